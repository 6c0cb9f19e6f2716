"""The shared TTS worker: one voice's synthesis (any engine) plus resampling, on its own thread.

Each synthesis has a deadline from the voice's measured p99 and the voice has a circuit
breaker (``models.workers.guard``): a synthesis past its deadline fails with ``WorkerTimeout``
for its phrase and a new thread serves the voice; while the breaker is open, phrases are
refused at once (``WorkerUnavailable``)."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import soxr
from numpy.typing import NDArray

from speechpipe.errors import SpeechpipeError, WorkerError
from speechpipe.models.workers import faults
from speechpipe.models.workers.guard import GuardedExecutor, LatencyBudget, WorkerGuard
from speechpipe.voices.engines import Synthesizer

__all__ = ["TtsWorker", "resample_int16", "trim_silence"]

EDGE_KEEP_S = 0.04  # silence kept at each end of a phrase
SILENCE_LEVEL = 200  # |int16| below this counts as silence


def trim_silence(samples: NDArray[np.int16], rate: int) -> NDArray[np.int16]:
    """Cut a phrase's leading/trailing silence down to ``EDGE_KEEP_S``: phrases are spoken
    back to back, and engines (Piper) pad each one, which adds up to seconds of EndOffset."""
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > SILENCE_LEVEL)
    if not len(loud):
        return samples[:0]
    keep = int(EDGE_KEEP_S * rate)
    return samples[max(0, loud[0] - keep) : loud[-1] + 1 + keep]


def resample_int16(samples: NDArray[np.int16], rate_in: int, rate_out: int) -> NDArray[np.int16]:
    """Resample int16 audio with soxr (HQ)."""
    if rate_in == rate_out or not len(samples):
        return samples
    out = soxr.resample(samples.astype(np.float32) / 32768.0, rate_in, rate_out, quality="HQ")
    return np.clip(np.round(out * 32768.0), -32768, 32767).astype(np.int16)


class TtsWorker:
    """Synthesizes phrases for many sessions on one dedicated thread (one voice).

    Close with ``aclose()`` (or ``async with``); ``close()`` is the same for sync callers."""

    def __init__(self, synthesizer: Synthesizer, name: str,
                 guard: WorkerGuard | None = None) -> None:
        self.synthesizer = synthesizer
        self.name = name
        # one voice is not the whole server: a voice that is down does not make it unready
        self.guard = guard or WorkerGuard(f"tts:{name}", required=False,
                                          budget=LatencyBudget(floor_s=2.0, ceiling_s=20.0))
        self._executor = GuardedExecutor(self.guard, f"tts-{name}")

    @property
    def sample_rate(self) -> int:
        """The voice's native sample rate."""
        return self.synthesizer.sample_rate

    def _synthesize(self, text: str, rate: int, speed: float) -> NDArray[np.int16]:
        faults.hit(f"tts:{self.name}")  # a test seam: a no-op unless a test arms it
        speech = trim_silence(self.synthesizer.synthesize(text, speed), self.sample_rate)
        return resample_int16(speech, self.sample_rate, rate)

    async def synthesize(self, text: str, rate: int, speed: float = 1.0,
                         due: float | None = None) -> NDArray[np.int16]:
        """Speak ``text`` at ``rate`` Hz and ``speed`` on the worker's thread. ``due``: the
        monotonic time its listener needs it by (the voice serves the earliest due first,
        ``GuardedExecutor``); None: now."""
        self.guard.admit()
        when = time.monotonic() if due is None else due
        try:
            return await asyncio.wrap_future(
                self._executor.submit_due(when, self._synthesize, text, rate, speed)
            )
        except (SpeechpipeError, asyncio.CancelledError):
            raise
        except Exception as exc:
            raise WorkerError(f"tts {self.name} failed: {type(exc).__name__}: {exc}") from exc

    def warm_up(self) -> None:
        """Synthesize one short phrase on the worker's thread (blocking). Its time is not
        kept for the deadline (one word is not what real phrases cost)."""
        measured = self.guard.budget.measured()
        self._executor.submit(self._synthesize, "Hello.", self.sample_rate, 1.0).result()
        self.guard.budget.restore(measured)

    def close(self) -> None:
        """Cancel queued syntheses and join the thread (one in progress finishes first)."""
        self._executor.shutdown(wait=True, cancel_futures=True)

    async def aclose(self) -> None:
        """``close()`` for async callers, on a helper thread: joining the worker (a synthesis
        in progress finishes first) never blocks the event loop."""
        await asyncio.to_thread(self.close)

    async def __aenter__(self) -> TtsWorker:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
