"""The benches' percentiles: the project's one definition (``evaluation.scores.percentile``,
linear between closest ranks; nan for no values) in the shapes the benches print."""

from __future__ import annotations

from collections.abc import Sequence

from speechpipe.evaluation.scores import percentile

__all__ = ["percentile", "rounded_percentile", "percentile_ms", "percentile_or_none"]


def rounded_percentile(values: Sequence[float], q: float, digits: int = 2) -> float:
    """``percentile`` rounded to ``digits`` (nan for no values)."""
    return round(percentile(values, q), digits)


def percentile_ms(values: Sequence[float], q: float) -> float:
    """``percentile`` of seconds, in milliseconds (nan for no values)."""
    return percentile(values, q) * 1000


def percentile_or_none(values: Sequence[float], q: float,
                       digits: int | None = None) -> float | None:
    """``percentile`` (rounded to ``digits`` when given), None for no values."""
    if not values:
        return None
    value = percentile(values, q)
    return value if digits is None else round(value, digits)
