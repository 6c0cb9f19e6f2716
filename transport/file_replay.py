"""File replay: read any audio soundfile reads, replay it as 20 ms frames into a session.

``--pace realtime`` sleeps so frame *n* is pushed at wall time n x 20 ms (computation-aware);
``--pace fast`` pushes as fast as the session accepts (its input channel blocks).

Files are read in blocks and resampled incrementally (``stream_audio``), so a long input costs
memory for one block, not for the whole file. Input rates below ``MIN_INPUT_RATE`` are refused:
a header that claims 1 Hz would otherwise turn a few kilobytes into hours of audio.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr
from numpy.typing import NDArray

from speechpipe.errors import AudioInputError
from speechpipe.stages.frames import FRAME_SAMPLES, STREAM_RATE, AudioFrame, OutputEvent
from speechpipe.transport.session_api import LiveSession

__all__ = [
    "AudioFileInfo",
    "MIN_INPUT_RATE",
    "ReplayEvent",
    "first_leaf",
    "frames_of",
    "probe_audio",
    "read_audio",
    "replay",
    "stream_audio",
]

MIN_INPUT_RATE = 8_000  # Hz; below this no speech survives (telephony is 8 kHz)
READ_BLOCK_S = 2.0  # seconds of input read (and resampled) at a time
_FLOAT_SUBTYPES = {"FLOAT", "DOUBLE"}  # the only ones that can hold NaN or infinity


def _to_int16(audio: NDArray[np.floating]) -> NDArray[np.int16]:
    return np.clip(np.round(audio * 32768.0), -32768, 32767).astype(np.int16)


@dataclass(frozen=True, slots=True)
class AudioFileInfo:
    """What an audio file holds: rate, length, channels and sample format."""
    path: Path
    sample_rate: int
    frames: int  # at ``sample_rate``
    channels: int
    subtype: str

    @property
    def seconds(self) -> float:
        """Duration of the file in seconds."""
        return self.frames / self.sample_rate


@contextlib.contextmanager
def _without_decoder_chatter(quiet: bool) -> Iterator[None]:
    """libmpg123 (inside libsndfile) prints its own warnings ("[src/libmpg123/layer3.c:...]
    error: part2_3_length ... too large") on the process's stderr for ordinary MP3 files:
    while an MP3 is read, file descriptor 2 goes to a temporary file and everything else
    written there meanwhile is passed on."""
    if not quiet:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            kept = [line for line in caught.read().splitlines(keepends=True)
                    if not line.startswith(b"[src/libmpg123/")]
            if kept:
                os.write(2, b"".join(kept))


def _is_mp3(path: Path) -> bool:
    return path.suffix.lower() in (".mp3", ".mp2", ".mpga")


def _blocks(info: AudioFileInfo) -> Iterator[NDArray[np.float32]]:
    """Mono float32 blocks of ``READ_BLOCK_S`` at the file's own rate."""
    block = max(1, int(READ_BLOCK_S * info.sample_rate))
    quiet = info.subtype.startswith("MPEG") or _is_mp3(info.path)
    try:
        with sf.SoundFile(str(info.path)) as fh:
            while True:
                with _without_decoder_chatter(quiet):
                    data = fh.read(block, dtype="float32", always_2d=True)
                if not len(data):
                    return
                yield data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
    except sf.LibsndfileError as exc:
        raise AudioInputError(f"{info.path}: not a readable audio file ({exc})") from exc


def probe_audio(path: str | Path) -> AudioFileInfo:
    """Check a file without holding its audio: readable, not empty, a sample rate of at least
    ``MIN_INPUT_RATE``, and (float files) no NaN or infinite sample. Raises
    ``AudioInputError`` with one line saying what is wrong."""
    path = Path(path)
    if path.is_dir():
        raise AudioInputError(f"{path}: is a folder, not an audio file")
    if not path.is_file():
        if path.exists():  # a FIFO, a device, a socket: reading it may block or never end
            raise AudioInputError(f"{path}: is not a regular file (a FIFO, a device or a "
                                  "socket), not an audio file")
        raise AudioInputError(f"{path}: no such file")
    if path.stat().st_size == 0:
        raise AudioInputError(f"{path}: is empty (0 bytes)")
    try:
        with _without_decoder_chatter(_is_mp3(path)):
            raw = sf.info(str(path))
    except Exception as exc:  # soundfile raises LibsndfileError/RuntimeError/TypeError
        raise AudioInputError(f"{path}: not a readable audio file ({exc})") from exc
    info = AudioFileInfo(path, int(raw.samplerate), int(raw.frames), int(raw.channels),
                         str(raw.subtype))
    if info.frames <= 0 or info.channels <= 0:
        raise AudioInputError(f"{path}: contains no audio samples")
    if info.sample_rate < MIN_INPUT_RATE:
        raise AudioInputError(
            f"{path}: sample rate {info.sample_rate} Hz is below the {MIN_INPUT_RATE} Hz "
            "minimum (a damaged header?)"
        )
    if info.subtype in _FLOAT_SUBTYPES:
        for block in _blocks(info):
            if not np.all(np.isfinite(block)):
                raise AudioInputError(f"{path}: audio contains NaN or infinite samples")
    return info


def stream_audio(source: str | Path | AudioFileInfo) -> Iterator[NDArray[np.int16]]:
    """The file as 16 kHz mono int16 blocks (about ``READ_BLOCK_S`` each), resampled
    incrementally: memory stays at one block whatever the file's length."""
    info = source if isinstance(source, AudioFileInfo) else probe_audio(source)
    resampler = (
        None if info.sample_rate == STREAM_RATE
        else soxr.ResampleStream(info.sample_rate, STREAM_RATE, 1, dtype="float32", quality="HQ")
    )
    for block in _blocks(info):
        if not np.all(np.isfinite(block)):  # the file changed since it was probed
            raise AudioInputError(f"{info.path}: audio contains NaN or infinite samples")
        out = block if resampler is None else resampler.resample_chunk(block)
        if len(out):
            yield _to_int16(out)
    if resampler is not None:
        tail = resampler.resample_chunk(np.zeros(0, np.float32), last=True)
        if len(tail):
            yield _to_int16(tail)


def read_audio(path: str | Path) -> NDArray[np.int16]:
    """Read a whole file (any rate >= ``MIN_INPUT_RATE``, any channel count) as 16 kHz mono
    int16. For clips; ``stream_audio`` for inputs of any length."""
    blocks = list(stream_audio(path))
    audio = np.concatenate(blocks) if blocks else np.zeros(0, np.int16)
    if not len(audio):
        raise AudioInputError(f"{path}: contains no audio samples")
    return audio


def frames_of(blocks: Iterable[NDArray[np.int16]]) -> Iterator[AudioFrame]:
    """20 ms frames (pts in samples) cut from blocks of any size; the last may be shorter."""
    pts = 0
    carry = np.zeros(0, np.int16)
    for block in blocks:
        if len(carry):
            block = np.concatenate([carry, block])
        whole = len(block) - len(block) % FRAME_SAMPLES
        for offset in range(0, whole, FRAME_SAMPLES):
            yield AudioFrame(block[offset : offset + FRAME_SAMPLES], pts)
            pts += FRAME_SAMPLES
        carry = block[whole:]
    if len(carry):
        yield AudioFrame(carry, pts)


@dataclass(frozen=True, slots=True)
class ReplayEvent:
    """An output event with the wall-clock time it arrived."""
    wall_t: float  # seconds since the replay started
    event: OutputEvent


async def replay(
    session: LiveSession,
    audio: NDArray[np.int16] | Iterable[NDArray[np.int16]],
    *,
    pace: str = "realtime",
    on_progress: Callable[[int], None] | None = None,
    on_event: Callable[[ReplayEvent], object] | None = None,
) -> list[ReplayEvent]:
    """Push ``audio`` (one array, or blocks of any size from ``stream_audio``) through
    ``session`` and collect every event with its wall time; with ``on_event``, each event goes
    to it instead and the returned list stays empty (nothing held for a long input).

    A failure of the feeder or the collector is raised as itself (the other one is cancelled),
    not wrapped in an exception group."""
    start = time.monotonic()
    collected: list[ReplayEvent] = []
    deliver = on_event or collected.append
    blocks = [audio] if isinstance(audio, np.ndarray) else audio

    async def feed() -> None:
        nonlocal start
        start = time.monotonic()
        for frame in frames_of(blocks):
            if pace == "realtime":
                delay = start + frame.pts / STREAM_RATE - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            await session.push(frame)
            if on_progress is not None:
                on_progress(len(frame.samples))
        await session.finish()

    async def collect() -> None:
        async for event in session.events():
            deliver(ReplayEvent(time.monotonic() - start, event))

    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(feed())
            group.create_task(collect())
    except BaseExceptionGroup as group_error:
        raise first_leaf(group_error) from None
    return collected


def first_leaf(group: BaseExceptionGroup) -> BaseException:
    """The first exception in a (nested) group: what a caller of a task group expects."""
    first = group.exceptions[0]
    return first_leaf(first) if isinstance(first, BaseExceptionGroup) else first
