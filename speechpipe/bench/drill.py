"""``speechpipe bench drill``: a live server on 127.0.0.1 with N real sessions while a
scripted plan injects each fault in turn into the real shared workers (``models.workers.faults``:
the bench enables the seam in its own process only).

Per fault it prints: sessions completed / failed / refused, time to detect (the fault
firing -> the worker's guard counting it: an abandoned call or a failure), time to recover
(the last injected failure -> the worker's next successful call with its breaker closed),
whether the breaker opened, and the error codes the clients saw. Exit status 1 when a
session failed or was refused. Figures need a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from speechpipe.bench.own_samples import own_samples
from speechpipe.bench.record import note, print_decoder
from speechpipe.decoder_path import pipeline_decoder_paths

__all__ = ["PLAN", "register_drill", "run_drill"]

SAMPLES = own_samples()  # the package's own clips, installed or not

# (label, point, kind, times): each fault in turn
PLAN: tuple[tuple[str, str, str, int], ...] = (
    ("ASR call raises", "asr", "raise", 1),
    ("ASR calls raise x3 (breaker)", "asr", "raise", 3),
    ("ASR call hangs", "asr", "hang", 1),
    ("TTS synthesis raises", "tts", "raise", 1),
    ("TTS synthesis hangs", "tts", "hang", 1),
)


@dataclass
class DrillRow:
    fault: str
    completed: int
    failed: int
    refused: int
    detect_s: float | None
    recover_s: float | None
    client_saw: dict[str, int]
    breaker_opened: bool = False


def _audio(seconds: float, lang: str = "es") -> np.ndarray:
    from speechpipe.evaluation.manifest import load_manifest
    from speechpipe.transport.file_replay import read_audio

    rows = load_manifest(SAMPLES / "manifest.jsonl")
    clips = [read_audio(row["path"]) for row in rows if row["lang"] == lang]
    audio = np.concatenate(clips)
    return audio[: int(seconds * 16_000)]


async def _poll(predicate: Any, within: float) -> float | None:
    """Seconds until ``predicate()`` (polled every 10 ms), None if not within."""
    began = time.monotonic()
    while time.monotonic() - began < within:
        if predicate():
            return time.monotonic()
        await asyncio.sleep(0.01)
    return None


async def _one_fault(app: Any, label: str, point: str, kind: str, times: int,
                     sessions: int, audio: np.ndarray) -> DrillRow:
    from speechpipe.models.workers import faults
    from speechpipe.transport.client import stream_session
    from speechpipe.voices.registry import resolve_voice

    pipeline = app.pipeline
    guard = (pipeline.whisper.guard if point == "asr" else
             pipeline.tts_worker(resolve_voice(None, "en", pipeline.options.voice_dirs)).guard)
    url = f"ws://127.0.0.1:{app.server.port}/ws"
    clients = [asyncio.ensure_future(stream_session(url, audio, tail_s=1.5, index=i, start={
        "source_lang": "es"})) for i in range(sessions)]
    await asyncio.sleep(1.5)
    before = (guard.abandoned + guard.failures, guard.successes)
    fired_before = faults.fired.get(point, 0)
    faults.arm(point, kind, times=times, seconds=60.0)
    opened_before = guard.breaker.opened
    fired = await _poll(lambda: faults.fired.get(point, 0) > fired_before, 30.0)
    detected = await _poll(lambda: guard.abandoned + guard.failures > before[0], 60.0)
    await _poll(lambda: faults.fired.get(point, 0) >= fired_before + times, 30.0)  # all fired
    recovered = None
    if detected is not None:
        await asyncio.sleep(0.05)  # the last firing's failure is counted
        seen = guard.successes
        def back() -> bool:
            return guard.successes > seen and not guard.health().down

        # recovery needs traffic (the half-open probe): bounded by the sessions' own end
        await _poll(lambda: back() or all(c.done() for c in clients), 60.0)
        recovered = time.monotonic() if back() else None
    faults.clear()
    breaker = guard.breaker.opened > opened_before
    runs = await asyncio.gather(*clients, return_exceptions=True)
    saw: Counter[str] = Counter()
    completed = failed = refused = 0
    for run in runs:
        if isinstance(run, BaseException):
            refused += 1
            saw[type(run).__name__] += 1
            continue
        saw.update(e["code"] for e in run.of("error"))
        if not run.started:
            refused += 1
        elif run.close_code == 1000 and run.of("end"):
            completed += 1
        else:
            failed += 1
    return DrillRow(label, completed, failed, refused,
                    None if fired is None or detected is None else detected - fired,
                    None if detected is None or recovered is None else recovered - detected,
                    dict(saw), breaker)


APERTIUM_KILLED = "Apertium pipeline killed (en -> es)"


async def _apertium_killed(app: Any, sessions: int, seconds: float) -> DrillRow | None:
    """English sessions into Spanish on the shared Apertium en->es chain; mid-talk the whole
    chain is killed (SIGKILL to its process group, a real fault, not the seam). Detect: the
    kill -> the worker starting the chain again; recover: -> its next successful call. None
    where the pair is not installed."""
    import os
    import signal

    from speechpipe.models.mt.apertium import installed_pairs
    from speechpipe.transport.client import stream_session

    pair = installed_pairs().get(("en", "es"))
    if pair is None:
        return None
    worker = await asyncio.to_thread(app.pipeline.text_mt_worker, pair.name)
    url = f"ws://127.0.0.1:{app.server.port}/ws"
    audio = _audio(seconds, "en")
    clients = [asyncio.ensure_future(stream_session(url, audio, tail_s=1.5, index=i, start={
        "source_lang": "en", "target_lang": "es"})) for i in range(sessions)]
    await asyncio.sleep(2.0)
    restarts, calls = worker.restarts, worker.calls
    killed = time.monotonic()
    os.killpg(worker.process.pids[0], signal.SIGKILL)
    detected = await _poll(lambda: worker.restarts > restarts, 30.0)
    recovered = await _poll(lambda: worker.calls > calls and worker.process.running, 30.0)
    runs = await asyncio.gather(*clients, return_exceptions=True)
    saw: Counter[str] = Counter()
    completed = failed = refused = 0
    for run in runs:
        if isinstance(run, BaseException) or not run.started:
            refused += 1
            continue
        saw.update(e["code"] for e in run.of("error"))
        if run.close_code == 1000 and run.of("end"):
            completed += 1
        else:
            failed += 1
    return DrillRow(APERTIUM_KILLED, completed, failed, refused,
                    None if detected is None else detected - killed,
                    None if detected is None or recovered is None else recovered - detected,
                    dict(saw))


async def run_drill(sessions: int = 4, seconds: float = 8.0) -> list[DrillRow]:
    """Run the plan against a server started here; returns (and prints) a row per fault."""
    from speechpipe.config import PipelineOptions
    from speechpipe.server.serve import ServerApp
    from speechpipe.session import Pipeline, apply_process_limits
    from speechpipe.voices.registry import resolve_voice

    # a bench server: every session a phrase cache of its own (all speech is synthesized)
    options = PipelineOptions(phrase_cache_per_session=True)
    apply_process_limits(options)
    pipeline = await asyncio.to_thread(Pipeline.load, options)
    app = ServerApp("127.0.0.1", 0, pipeline=pipeline)
    audio = _audio(seconds)
    rows = []
    async with app.running():
        print_decoder(pipeline_decoder_paths(pipeline))  # warmed up by app.running()
        for label, point, kind, times in PLAN:
            row = await _one_fault(app, label, point, kind, times, sessions, audio)
            rows.append(row)
            print(_format(row), flush=True)
            await asyncio.sleep(2.5)  # the breaker's cooldown, then a probe closes it
            await asyncio.to_thread(pipeline.whisper.warm_up)
            await asyncio.to_thread(
                pipeline.tts_worker(resolve_voice(None, "en", options.voice_dirs)).warm_up)
        killed = await _apertium_killed(app, sessions, seconds)
        if killed is None:
            print(f"| {APERTIUM_KILLED} | skipped: `apt install apertium apertium-eng-spa` "
                  "| | | | |", flush=True)
        else:
            rows.append(killed)
            print(_format(killed), flush=True)
    return rows


def _format(row: DrillRow) -> str:
    def secs(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    saw = ", ".join(f"{k} x{v}" for k, v in sorted(row.client_saw.items())) or "nothing"
    return (f"| {row.fault} | {row.completed} / {row.failed} / {row.refused} | "
            f"{secs(row.detect_s)} | {secs(row.recover_s)} | "
            f"{'opened' if row.breaker_opened else 'closed'} | {saw} |")


def register_drill(kinds: argparse._SubParsersAction) -> None:
    """Add ``bench drill`` to the bench subparsers."""
    drill = kinds.add_parser("drill", help="fault drills: inject each worker fault in turn "
                                           "into a live server with N sessions")
    drill.add_argument("--sessions", type=int, default=4, help="concurrent sessions per fault")
    drill.add_argument("--seconds", type=float, default=8.0, help="audio per session")
    drill.set_defaults(handler=_bench_drill)


def _bench_drill(args: argparse.Namespace) -> int:
    print("| fault | sessions completed / failed / refused | detect s | recover s | breaker | "
          "clients saw |\n|---|---|---|---|---|---|", flush=True)
    rows = asyncio.run(run_drill(args.sessions, args.seconds))
    note({"faults": [dataclasses.asdict(row) for row in rows]})  # --record
    return 0 if all(row.failed == 0 and row.refused == 0 for row in rows) else 1
