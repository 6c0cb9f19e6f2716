"""How a Piper voice runs (``--set piper.*``): a leaf module, so the options tree
(``speechpipe.config``) imports it without Piper, onnxruntime, numpy or the voice registry."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PiperOptions"]


@dataclass(frozen=True, slots=True)
class PiperOptions:
    """How a voice runs; ``None`` keeps the value from the voice's own config. The pipeline's
    ``piper`` group (``--set piper.FIELD=VALUE``)."""

    intra_op_threads: int = 1
    """Threads one synthesis may use; 1 scales best when many sessions share few cores."""
    allow_spinning: bool = False
    """onnxruntime busy-waits between ops when True: lower latency, wasted shared CPU."""
    length_scale: float | None = None
    """> 1 speaks slower, < 1 faster."""
    noise_scale: float | None = None
    noise_w_scale: float | None = None
    volume: float = 1.0
    seed: int | None = 0
    """Seed of the voice's random noise, so a run speaks the same way each time (none:
    onnxruntime's own, different per process)."""
