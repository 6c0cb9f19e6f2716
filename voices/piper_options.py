"""How a Piper voice runs (``--set piper.*``): a leaf module, so the options tree
(``speechpipe.config``) imports it without Piper, onnxruntime, numpy or the voice registry.

Each numeric field's range is its ``metadata["range"]`` (``speechpipe.config`` holds every
leaf to one)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["PiperOptions", "pipeline_defaults"]


@dataclass(frozen=True, slots=True)
class PiperOptions:
    """How a voice runs; ``None`` keeps the value from the voice's own config. The pipeline's
    ``piper`` group (``--set piper.FIELD=VALUE``)."""

    intra_op_threads: int = field(default=1, metadata={"range": (1, 256)})
    """Threads one synthesis may use; 1 scales best when many sessions share few cores."""
    allow_spinning: bool = False
    """onnxruntime busy-waits between ops when True: lower latency, wasted shared CPU."""
    # 1e308 ended in a traceback
    length_scale: float | None = field(default=None, metadata={"range": (0.1, 5.0)})
    """> 1 speaks slower, < 1 faster."""
    noise_scale: float | None = field(default=None, metadata={"range": (0, 5)})
    noise_w_scale: float | None = field(default=None, metadata={"range": (0, 5)})
    volume: float = field(default=1.0, metadata={"range": (0.0, 10.0), "open_low": True})
    seed: int | None = field(default=0, metadata={"range": (0, 2**31 - 1)})
    """Seed of the voice's random noise, so a run speaks the same way each time (none:
    onnxruntime's own, different per process)."""


def pipeline_defaults() -> PiperOptions:
    """The pipeline's ``piper`` group (``voices.engines`` names it): speaking rate 0.9, a
    little faster than the voices' own (< 1 is faster)."""
    return PiperOptions(length_scale=0.9)
