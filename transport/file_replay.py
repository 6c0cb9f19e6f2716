"""File replay: read any audio soundfile reads, replay it as 20 ms frames into a session.

``--pace realtime`` sleeps so frame *n* is pushed at wall time n x 20 ms (computation-aware);
``--pace fast`` pushes as fast as the session accepts (its input channel blocks).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr
from numpy.typing import NDArray

from speechpipe.errors import AudioInputError
from speechpipe.stages.frames import FRAME_SAMPLES, STREAM_RATE, AudioFrame, OutputEvent
from speechpipe.transport.session_api import LiveSession

__all__ = ["read_audio", "to_stream_rate", "replay", "ReplayEvent"]


def to_stream_rate(audio: NDArray[np.floating], rate: int) -> NDArray[np.int16]:
    """Mono float audio at ``rate`` -> int16 at the stream rate."""
    if rate != STREAM_RATE:
        audio = soxr.resample(audio.astype(np.float32), rate, STREAM_RATE, quality="HQ")
    return np.clip(np.round(audio * 32768.0), -32768, 32767).astype(np.int16)


def read_audio(path: str | Path) -> NDArray[np.int16]:
    """Read a file (any rate, any channel count) as 16 kHz mono int16."""
    path = Path(path)
    if not path.is_file():
        raise AudioInputError(f"{path}: no such file")
    try:
        audio, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except Exception as exc:  # soundfile raises LibsndfileError/RuntimeError/TypeError
        raise AudioInputError(f"{path}: not a readable audio file ({exc})") from exc
    if audio.size == 0 or len(audio) == 0:
        raise AudioInputError(f"{path}: contains no audio samples")
    if not np.all(np.isfinite(audio)):
        raise AudioInputError(f"{path}: audio contains NaN or infinite samples")
    mono = audio.mean(axis=1)
    return to_stream_rate(mono, int(rate))


@dataclass(frozen=True, slots=True)
class ReplayEvent:
    """An output event with the wall-clock time it arrived."""
    wall_t: float  # seconds since the replay started
    event: OutputEvent


async def replay(
    session: LiveSession,
    audio: NDArray[np.int16],
    *,
    pace: str = "realtime",
    on_progress: Callable[[int], None] | None = None,
) -> list[ReplayEvent]:
    """Push ``audio`` through ``session`` and collect every event with its wall time."""
    start = time.monotonic()
    collected: list[ReplayEvent] = []

    async def feed() -> None:
        nonlocal start
        start = time.monotonic()
        for offset in range(0, len(audio), FRAME_SAMPLES):
            if pace == "realtime":
                delay = start + offset / STREAM_RATE - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            await session.push(AudioFrame(audio[offset : offset + FRAME_SAMPLES], offset))
            if on_progress is not None:
                on_progress(min(FRAME_SAMPLES, len(audio) - offset))
        await session.finish()

    async def collect() -> None:
        async for event in session.events():
            collected.append(ReplayEvent(time.monotonic() - start, event))

    async with asyncio.TaskGroup() as group:
        group.create_task(feed())
        group.create_task(collect())
    return collected
