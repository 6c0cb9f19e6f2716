"""The Whisper engine's work counters (``models.whisper.engine``; ``bench cost`` reads them)."""

from __future__ import annotations

import threading

__all__ = ["EngineStats"]


class EngineStats:
    """Cumulative work counters of one engine (all worker threads): what ``bench cost``
    reads. Seconds are wall time of the calls, which is CPU time with one CTranslate2 thread
    per call; ``encoded_s`` is encoder input in audio seconds (window + silence)."""

    FIELDS = ("encode_calls", "encode_s", "encoded_s", "generate_calls", "decode_items",
              "decode_s", "generated_tokens", "kept_tokens", "forced_tokens",
              "context_tokens", "align_s", "recover_s", "native_cpu_s",
              "prefilled_tokens", "decoder_steps")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(self.FIELDS, 0.0)

    def add(self, **values: float) -> None:
        """Add to counters (thread-safe)."""
        with self._lock:
            for name, value in values.items():
                self._values[name] += value

    def snapshot(self) -> dict[str, float]:
        """A copy of every counter now."""
        with self._lock:
            return dict(self._values)
