"""``speechpipe translate``: replay a file through the live pipeline, write speech and trace."""

from __future__ import annotations

import asyncio
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from speechpipe.evaluation.scores import final_texts, latency_scores
from speechpipe.evaluation.trace import TraceBuilder, write_trace
from speechpipe.session import Pipeline
from speechpipe.stages.frames import STREAM_RATE
from speechpipe.transport.file_replay import read_audio, replay
from speechpipe.transport.session_api import SessionRequest

__all__ = ["TranslationRun", "translate_audio", "translate_file"]

PROGRESS_MIN_SECONDS = 30.0


@dataclass
class TranslationRun:
    records: list[dict[str, Any]]
    output: np.ndarray
    output_rate: int
    input_seconds: float
    wall_seconds: float
    cpu_seconds: float
    source_text: str
    target_text: str
    scores: dict[str, float | None] = field(default_factory=dict)
    vad_seconds: float = 0.0


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def translate_audio(
    pipeline: Pipeline,
    audio: np.ndarray,
    request: SessionRequest,
    *,
    progress: bool = False,
) -> TranslationRun:
    seconds = len(audio) / STREAM_RATE
    bar = None
    if progress and seconds >= PROGRESS_MIN_SECONDS:
        from tqdm import tqdm

        bar = tqdm(total=round(seconds, 1), unit="s", desc="replaying", leave=False)
    cpu0, wall0 = _cpu_seconds(), time.monotonic()
    try:
        async with pipeline.session(request) as session:
            events = await replay(
                session, audio, pace=request.pace,
                on_progress=(lambda n: bar.update(n / STREAM_RATE)) if bar else None,
            )
            vad_seconds = session.vad.busy_seconds if session.vad else 0.0
    finally:
        if bar is not None:
            bar.close()
    wall, cpu = time.monotonic() - wall0, _cpu_seconds() - cpu0
    trace = TraceBuilder(request.output_sample_rate).add_all(events)
    source_text, target_text = final_texts(trace.records)
    return TranslationRun(
        records=trace.records,
        output=trace.render(len(audio)),
        output_rate=request.output_sample_rate,
        input_seconds=seconds,
        wall_seconds=wall,
        cpu_seconds=cpu,
        source_text=source_text,
        target_text=target_text,
        scores=latency_scores(trace.records, seconds),
        vad_seconds=vad_seconds,
    )


def translate_file(
    pipeline: Pipeline,
    path: str | Path,
    out: str | Path,
    request: SessionRequest,
    trace_path: str | Path | None = None,
) -> TranslationRun:
    audio = read_audio(path)
    run = asyncio.run(translate_audio(pipeline, audio, request, progress=True))
    sf.write(str(out), run.output, run.output_rate, subtype="PCM_16")
    if trace_path is not None:
        write_trace(trace_path, run.records)
    return run
