"""How the Apertium text-MT backend runs (``--set apertium.*``): a leaf module, so the options
tree (``speechpipe.config``) imports it without the backend or any process.

Each field's bound is its ``metadata`` (``range``, ``text``: ``speechpipe.config`` holds every
leaf to one)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ApertiumOptions"]


@dataclass(frozen=True, slots=True)
class ApertiumOptions:
    """The rule-based MT backend's options (``--set apertium.FIELD=VALUE``)."""

    hold_words: int = field(default=2, metadata={"range": (1, 12)})
    """An open sentence's re-translation commits all but its last N words at once (hold-N);
    the held words commit at the sentence end or a pause. Apertium cannot continue a forced
    prefix, so what it said last is kept and only the held tail may still change. On text
    alone (``benchmarks/apertium_hold.py``) hold 3 keeps the whole sentence's translation on
    the tuning half (BLEU 100 against it; hold 2: 97.6); on real speech at real time hold 2
    brings the first translated speech 0.33 s (tuning half) to 1.0 s (report half) sooner,
    for 0.6 and 7.5 BLEU, and only hold 2 meets StartOffset <= 2.5 s (docs/benchmarks.md,
    "Other languages on real engines")."""
    deadline_s: float = field(default=1.0, metadata={"range": (0.05, 60)})
    """A translation not back within this many seconds means a hung pipeline: it is killed,
    started again and the text retried once (a call takes 2-4 ms; the first one after a start
    up to ~0.3 s while the programs read their data), so a hung chain costs a session about
    this long once."""
    warm: tuple[str, ...] = field(default=(), metadata={
        "text": (16, r"[a-z]{2,3}-[a-z]{2,3}", "a pair such as en-es")})
    """Pairs started when the server starts (``en-es``, ``fr-es``), so their first session
    does not wait for the programs to read their data (~0.1 s); others start on first use."""
