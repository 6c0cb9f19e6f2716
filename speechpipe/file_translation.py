"""File translation: replay audio through the live pipeline; write the speech and the trace.

Used by ``speechpipe translate`` and ``speechpipe eval``; ``translate_file`` is also the
one-call library entry point (``speechpipe.translate_file``). It streams: the input is read
and resampled block by block and the translated speech goes to the output file as it is
produced, so memory does not grow with the input's length (only the trace's text records are
kept). ``translate_audio`` takes a clip already in memory and returns the rendered speech
(evaluation, tests).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from speechpipe.evaluation.scores import final_texts, latency_scores
from speechpipe.evaluation.trace import TraceBuilder, write_trace
from speechpipe.session import Pipeline
from speechpipe.stages.cues import Cue, CueOptions, Side, cues_from_records
from speechpipe.stages.frames import STREAM_RATE
from speechpipe.stages.request import SessionRequest
from speechpipe.transport.file_output import SpeechFileWriter
from speechpipe.transport.file_replay import (
    AudioFileInfo,
    first_leaf,
    probe_audio,
    replay,
    stream_audio,
)

__all__ = [
    "TranslationRun",
    "progress_bar_options",
    "translate_audio",
    "translate_file",
    "translate_stream",
    "utterance_lines",
]

log = logging.getLogger("speechpipe.translate")

PROGRESS_MIN_SECONDS = 30.0
PROGRESS_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:.1f} s [{elapsed}<{remaining}]"


@dataclass
class TranslationRun:
    """What one file translation produced: the event records, the rendered output audio,
    the final texts and the latency scores."""

    records: list[dict[str, Any]]
    output: np.ndarray | None  # None when the speech was streamed to a file
    output_rate: int
    input_seconds: float
    wall_seconds: float
    cpu_seconds: float
    source_text: str
    target_text: str
    scores: dict[str, float | None] = field(default_factory=dict)
    vad_seconds: float = 0.0
    language_candidates: tuple[tuple[str, float], ...] = ()
    """``source_lang=auto``, when a detection stayed unsure: the languages its vote weighed
    most and their shares, largest first (``PipelineSession.language_candidates``)."""

    def cues(self, side: Side = "target", options: CueOptions | None = None) -> list[Cue]:
        """The committed translation (or, ``side="source"``, captions) as subtitle cues on
        the input's timeline (``speechpipe.cues_from_records``)."""
        return cues_from_records(self.records, side, duration_s=self.input_seconds,
                                 options=options)


def _clock(seconds: float) -> str:
    """``m:ss.s`` (``h:mm:ss.s`` from an hour on) of a time in the input."""
    tenths = round(seconds * 10)
    minutes, rest = divmod(tenths, 600)
    hours, minutes = divmod(minutes, 60)
    head = f"{hours}:{minutes:02d}" if hours else f"{minutes}"
    return f"{head}:{rest // 10:02d}.{rest % 10}"


def utterance_lines(records: Iterable[dict[str, Any]]) -> list[str]:
    """One line per utterance, in order: where its speech starts in the input, its captions
    and its translation (``translate``'s summary; a long file reads as a transcript)."""
    starts: dict[Any, float] = {}
    lines: list[str] = []
    for record in records:
        utterance = record.get("utterance")
        if record["event"] == "vad.start" and utterance is not None:
            starts.setdefault(utterance, float(record.get("audio_t") or record["stream_t"]))
        elif record["event"] == "utterance.end":
            source = (record.get("source_text") or "").strip()
            target = (record.get("text") or "").strip()
            if not source and not target:
                continue
            when = _clock(starts.get(utterance, float(record["stream_t"])))
            lines.append(f"{when}  {source or '(no captions)'}  ->  "
                         f"{target or '(no translation)'}")
    return lines


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def progress_bar_options(seconds: float, is_tty: bool) -> dict[str, Any] | None:
    """tqdm arguments for the replay bar, or None for no bar: inputs shorter than
    ``PROGRESS_MIN_SECONDS``, and a stderr that is not a terminal (a log would get every
    refresh as a line; the command's summary line says how it went). Seconds in tenths."""
    if not is_tty or seconds < PROGRESS_MIN_SECONDS:
        return None
    return {"total": round(seconds, 1), "unit": "s", "desc": "replaying", "leave": False,
            "bar_format": PROGRESS_FORMAT}


class _ReplayProgress:
    """Counts replayed samples (exactly, as integers) and shows them in tenths of a second."""

    def __init__(self, seconds: float, enabled: bool) -> None:
        options = progress_bar_options(seconds, sys.stderr.isatty()) if enabled else None
        self._bar = None
        if options is not None:
            from tqdm import tqdm

            self._bar = tqdm(file=sys.stderr, **options)
        self.samples = 0
        self._shown = 0.0

    def advance(self, samples: int) -> None:
        self.samples += samples
        if self._bar is not None:
            shown = round(self.samples / STREAM_RATE, 1)
            if shown > self._shown:
                self._bar.update(shown - self._shown)
                self._shown = shown

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


async def _run(
    pipeline: Pipeline,
    audio: NDArray[np.int16] | Iterable[NDArray[np.int16]],
    seconds: float,
    request: SessionRequest,
    builder: TraceBuilder,
    progress: bool,
) -> TranslationRun:
    bar = _ReplayProgress(seconds, progress)
    cpu0, wall0 = _cpu_seconds(), time.monotonic()
    try:
        async with pipeline.session(request) as session:
            await replay(session, audio, pace=request.pace, on_progress=bar.advance,
                         on_event=builder.add)
            vad_seconds = session.vad.busy_seconds if session.vad else 0.0
            candidates: tuple[tuple[str, float], ...] = getattr(
                session, "language_candidates", tuple)()  # a test double may have none
    except BaseExceptionGroup as group:  # the session's task group wraps what ended it
        raise first_leaf(group) from None
    finally:
        bar.close()
    wall, cpu = time.monotonic() - wall0, _cpu_seconds() - cpu0
    seconds = bar.samples / STREAM_RATE
    source_text, target_text = final_texts(builder.records)
    return TranslationRun(
        records=builder.records,
        output=None,
        output_rate=request.output_sample_rate,
        input_seconds=seconds,
        wall_seconds=wall,
        cpu_seconds=cpu,
        source_text=source_text,
        target_text=target_text,
        scores=latency_scores(builder.records, seconds),
        vad_seconds=vad_seconds,
        language_candidates=candidates,
    )


async def translate_audio(
    pipeline: Pipeline,
    audio: np.ndarray,
    request: SessionRequest,
    *,
    progress: bool = False,
) -> TranslationRun:
    """Translate a clip held in memory; ``run.output`` is the speech on its timeline."""
    builder = TraceBuilder(request.output_sample_rate)
    run = await _run(pipeline, audio, len(audio) / STREAM_RATE, request, builder, progress)
    run.output = builder.render(len(audio))
    return run


async def translate_stream(
    pipeline: Pipeline,
    source: AudioFileInfo,
    writer: SpeechFileWriter,
    request: SessionRequest,
    *,
    progress: bool = True,
) -> TranslationRun:
    """Translate a file block by block, writing the speech to ``writer`` as it comes; the
    writer is committed on success and discarded on any failure or interruption."""
    builder = TraceBuilder(request.output_sample_rate, on_speech=writer.write_at)
    log.info("replaying %.1f s of audio (%s pace)", source.seconds, request.pace)
    try:
        run = await _run(pipeline, stream_audio(source), source.seconds, request, builder,
                         progress)
        writer.commit(builder.output_samples(round(run.input_seconds * STREAM_RATE)))
    except BaseException:
        writer.discard()
        raise
    return run


def translate_file(
    path: str | Path | AudioFileInfo,
    out: str | Path | SpeechFileWriter,
    request: SessionRequest | None = None,
    *,
    pipeline: Pipeline | None = None,
    trace_path: str | Path | None = None,
) -> TranslationRun:
    """Translate the speech in an audio file into ``out`` (an audio file); one call, blocking.

    ``request`` defaults to ``SessionRequest(pace="fast", priority="replay")``. Without a
    ``pipeline`` the models are loaded for this call and released after it; pass a loaded
    ``Pipeline`` to translate many files. ``trace_path`` also writes the JSON-lines trace.
    Nothing is left at ``out`` if this fails (see ``SpeechFileWriter``)."""
    request = request or SessionRequest(pace="fast", priority="replay")
    source = path if isinstance(path, AudioFileInfo) else probe_audio(path)
    writer = (out if isinstance(out, SpeechFileWriter)
              else SpeechFileWriter(out, request.output_sample_rate))
    owned = pipeline is None
    try:
        if pipeline is None:
            pipeline = Pipeline.load()
        run = asyncio.run(translate_stream(pipeline, source, writer, request))
    finally:
        writer.discard()  # a no-op once committed
        if owned and pipeline is not None:
            pipeline.close()  # joins the workers, releases the models on this thread
    if trace_path is not None:
        write_trace(trace_path, run.records)  # OutputError (one line) if it fails
    return run
