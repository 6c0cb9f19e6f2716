"""Audio at the edge of a live session: client audio resampled onto the stream clock
(``InputResampler``), translated speech resampled to the client's rate (``OutputResampler``),
and the pacing rule for audio sent ahead of real time (``RealtimeGuard``). Pure and
synchronous, like the codec (``transport.protocol``) they sit beside.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from speechpipe.stages.frames import FRAME_SAMPLES, STREAM_RATE, AudioFrame, SpeechChunk
from speechpipe.transport.protocol import encode_event

__all__ = ["InputResampler", "OutputResampler", "RealtimeGuard"]


class InputResampler:
    """Client PCM at any rate -> contiguous 20 ms ``AudioFrame``s at 16 kHz, pts increasing.

    Streaming (``soxr.ResampleStream``), so chunk boundaries leave no clicks; at 16 kHz it
    only re-chunks. ``finish()`` flushes the resampler and pads the last frame with silence.
    """

    def __init__(self, sample_rate: int, *, start_pts: int = 0) -> None:
        self.sample_rate = sample_rate
        self.pts = start_pts
        self.received = 0  # input samples seen, at the client's rate
        self._pending = np.zeros(0, dtype=np.int16)
        self._stream: Any = None
        if sample_rate != STREAM_RATE:
            import soxr

            self._stream = soxr.ResampleStream(sample_rate, STREAM_RATE, 1, dtype="int16")

    def feed(self, samples: NDArray[np.int16]) -> list[AudioFrame]:
        """Client audio in; 16 kHz mono int16 out."""
        self.received += len(samples)
        if self._stream is not None:
            samples = self._stream.resample_chunk(samples)
        return list(self._chunk(samples))

    def finish(self) -> list[AudioFrame]:
        """The resampler's remaining output."""
        tail = np.zeros(0, dtype=np.int16)
        if self._stream is not None:
            tail = self._stream.resample_chunk(np.zeros(0, dtype=np.int16), last=True)
        frames = list(self._chunk(tail))
        if len(self._pending):
            pad = np.zeros(FRAME_SAMPLES - len(self._pending), dtype=np.int16)
            frames.extend(self._chunk(pad))
        return frames

    def _chunk(self, samples: NDArray[np.int16]) -> Iterator[AudioFrame]:
        if len(samples):
            buf = np.concatenate([self._pending, samples.astype(np.int16, copy=False)])
        else:
            buf = self._pending
        whole = len(buf) - len(buf) % FRAME_SAMPLES
        for start in range(0, whole, FRAME_SAMPLES):
            yield AudioFrame(buf[start : start + FRAME_SAMPLES].copy(), self.pts)
            self.pts += FRAME_SAMPLES
        self._pending = buf[whole:].copy()


class OutputResampler:
    """Translated speech -> the client's ``output_sample_rate`` (one-shot per phrase)."""

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate

    def convert(self, chunk: SpeechChunk) -> NDArray[np.int16]:
        """Translated speech at the client's sample rate."""
        if chunk.sample_rate == self.sample_rate or len(chunk.samples) == 0:
            return np.asarray(chunk.samples, dtype=np.int16)
        import soxr

        out = soxr.resample(
            np.asarray(chunk.samples, dtype=np.int16), chunk.sample_rate, self.sample_rate
        )
        return np.asarray(out, dtype=np.int16)

    def encode(self, chunk: SpeechChunk) -> tuple[dict[str, Any], bytes]:
        """The ``audio`` header and its binary PCM (little-endian int16)."""
        pcm = self.convert(chunk)
        header = encode_event(chunk)
        header["sample_rate"] = self.sample_rate
        header["samples"] = int(len(pcm))
        return header, pcm.astype("<i2", copy=False).tobytes()


@dataclass
class RealtimeGuard:
    """Flags audio arriving far faster than real time.

    A live client may run ahead of the wall clock by at most ``max_lead_s`` (network bursts,
    audio buffered while connecting). Beyond that it is replaying a file as fast as it can,
    which a live session cannot serve: the connection is closed with ``CloseCode.POLICY``.
    Pure: the caller passes ``now`` (monotonic seconds).
    """

    max_lead_s: float = 5.0
    _t0: float | None = None
    _seconds: float = 0.0

    def add(self, seconds: float, now: float) -> bool:
        """Account for ``seconds`` of audio received at ``now``; False if too far ahead."""
        if self._t0 is None:
            self._t0 = now
        self._seconds += seconds
        return self.lead(now) <= self.max_lead_s

    def lead(self, now: float) -> float:
        """How far the client's audio runs ahead of the wall clock, in seconds."""
        if self._t0 is None:
            return 0.0
        return self._seconds - (now - self._t0)
