"""Fault drills on a live server (real models, real websockets clients on loopback): a shared
worker fails, hangs or trips its breaker while sessions stream; the affected work gets a
documented error event, the other sessions complete, and ``/readyz`` / ``/metrics`` say so.

Faults are injected at the real workers' boundaries with ``speechpipe.models.faults``, a
test seam (off unless a test arms it). The drills shorten the deadlines' floor and ceiling
and the breaker's cooldown so they run in seconds; the deadline is still the measured p99's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from websockets.exceptions import InvalidStatus

from speechpipe.models import faults
from speechpipe.models.worker_guard import CircuitBreaker, LatencyBudget, WorkerGuard
from speechpipe.transport.client import ClientRun, stream_session
from speechpipe.transport.codes import CloseCode
from tests.helpers import http_request, raw_http, wait_for

live = pytest.mark.asyncio(loop_scope="session")
CLIP_S = 4.0


def _url(app: Any) -> str:
    return f"ws://127.0.0.1:{app.server.port}/ws"


def _clip(spanish_clip: tuple[Any, dict[str, Any]]) -> np.ndarray:
    from speechpipe.transport.file_replay import read_audio

    return read_audio(spanish_clip[0])[: int(CLIP_S * 16_000)]


async def _get(app: Any, path: str) -> tuple[int, bytes]:
    port = app.server.port
    status, raw = await asyncio.to_thread(
        raw_http, port, http_request(path, [("Host", f"127.0.0.1:{port}")]))
    return status, raw.partition(b"\r\n\r\n")[2]


def _codes(run: ClientRun) -> list[str]:
    return [e["code"] for e in run.of("error")]


@pytest.fixture
def drill_guard(pipeline: Any) -> Iterator[Any]:
    """Short deadlines and cooldowns on the shared pipeline's workers for one drill; the
    original guards (and no armed fault) afterwards."""
    from speechpipe.voices.registry import resolve_voice

    tts = pipeline.tts_worker(resolve_voice(None, "en", pipeline.options.voice_dirs))
    saved = (pipeline.whisper.guard, tts.guard, tts._executor.guard)

    def short(name: str, required: bool, old: WorkerGuard) -> WorkerGuard:
        guard = WorkerGuard(name, required=required,
                            budget=LatencyBudget(floor_s=2.0, ceiling_s=8.0),
                            breaker=CircuitBreaker(failures=3, window_s=30.0, cooldown_s=1.0))
        guard.budget._samples.extend(old.budget._samples)  # the measured calls: a real p99
        return guard

    pipeline.whisper.guard = short("asr", True, saved[0])
    tts.guard = tts._executor.guard = short(saved[1].name, False, saved[1])
    try:
        yield pipeline.whisper.guard, tts.guard
    finally:
        faults.clear()
        pipeline.whisper.guard = saved[0]
        tts.guard, tts._executor.guard = saved[1], saved[2]


async def _sessions(app: Any, audio: np.ndarray, n: int, tail_s: float = 1.5,
                    ) -> list[ClientRun]:
    async with asyncio.timeout(40):
        return list(await asyncio.gather(*(
            # a phrase-cache namespace of its own: every phrase goes to the TTS worker
            stream_session(_url(app), audio, tail_s=tail_s, index=i, start={
                "source_lang": "es", "phrase_cache": f"drill-{time.monotonic_ns()}-{i}"})
            for i in range(n))))


def _completed(run: ClientRun) -> bool:
    return run.close_code == CloseCode.NORMAL and run.of("end") != []


@live
async def test_a_hung_asr_call_is_abandoned_and_the_other_sessions_complete(
    live_server: Any, pipeline: Any, spanish_clip: Any, drill_guard: Any,
) -> None:
    asr, _ = drill_guard
    audio = _clip(spanish_clip)
    batcher = pipeline.whisper
    recovery: list[float] = []

    async def inject() -> None:
        # the deadline from this run's own measured calls, not the ceiling
        await wait_for(lambda: asr.budget.count >= 3, 10.0, "three calls measured")
        faults.arm("asr", "hang", seconds=20.0)
        await wait_for(lambda: asr.abandoned >= 1, 18.0, "the hung call abandoned")
        abandoned_at = time.monotonic()
        await wait_for(lambda: batcher.last_dispatch > abandoned_at, 5.0, "an ASR call after it")
        recovery.append(batcher.last_dispatch - abandoned_at)

    runs, _ = await asyncio.gather(_sessions(live_server, audio, 2, tail_s=6.0), inject())
    faults.release()
    assert all(_completed(run) for run in runs), [(r.close_code, _codes(r)) for r in runs]
    assert sum(_codes(run).count("worker_timeout") for run in runs) >= 1
    assert all(run.text("source") for run in runs), "every session got its captions"
    # recovery: from the abandonment to the next engine call begun (on the replacement thread)
    assert asr.restarts >= 1 and recovery and recovery[0] <= 2.0, recovery
    status, body = await _get(live_server, "/metrics")
    assert status == 200 and b'speechpipe_worker_restarts_total{worker="asr"}' in body


@live
async def test_an_open_asr_breaker_refuses_fast_and_readyz_says_so(
    live_server: Any, spanish_clip: Any, drill_guard: Any,
) -> None:
    asr, _ = drill_guard
    audio = _clip(spanish_clip)
    seen: dict[str, Any] = {}

    async def inject() -> None:
        await asyncio.sleep(1.0)
        faults.arm("asr", "raise", times=3)
        await wait_for(lambda: asr.health().down, 10.0, "the breaker open")
        seen["readyz"] = await _get(live_server, "/readyz")
        seen["healthz"] = await _get(live_server, "/healthz")
        try:  # a new session: refused at the upgrade, at once, not queued behind the worker
            await stream_session(_url(live_server), audio[:16_000], start={"source_lang": "es"},
                                 tail_s=0.2)
        except InvalidStatus as exc:
            seen["late"] = exc.response
        await wait_for(lambda: not asr.health().down, 3.0, "the cooldown")
        seen["ready_again"] = await _get(live_server, "/readyz")

    (run,), _ = await asyncio.gather(_sessions(live_server, audio, 1), inject())
    assert seen["readyz"][0] == 503 and b"asr" in seen["readyz"][1]
    assert seen["healthz"][0] == 200  # liveness is not readiness
    late = seen["late"]
    assert late.status_code == 503 and b"worker down: asr" in late.body, late
    assert seen["ready_again"][0] == 200
    assert _completed(run), (run.close_code, _codes(run))  # it went on through the outage
    assert _codes(run).count("worker_error") >= 1
    after = await _sessions(live_server, audio[: 2 * 16_000], 1)
    assert _completed(after[0]) and asr.health().breaker == "closed"


@live
async def test_a_hung_synthesis_fails_one_phrase_and_every_session_completes(
    live_server: Any, spanish_clip: Any, drill_guard: Any,
) -> None:
    _, tts = drill_guard
    audio = _clip(spanish_clip)
    faults.arm("tts", "hang", seconds=8.0)
    runs = await _sessions(live_server, audio, 2)
    faults.release()
    assert all(_completed(run) for run in runs), [(r.close_code, _codes(r)) for r in runs]
    assert faults.fired.get("tts"), "the fault fired"
    assert sum(_codes(run).count("worker_timeout") for run in runs) == 1
    assert tts.abandoned == 1 and tts.restarts == 1
    clean = [run for run in runs if "worker_timeout" not in _codes(run)]
    assert clean and all(run.audio for run in clean), "the other session got its speech"


def test_the_worker_codes_are_the_docs_rows() -> None:
    """The worker codes against docs/protocol.md's error table: each is a recoverable row
    (the session goes on), and at ``start`` ``worker_unavailable`` closes as the code table
    says (``refusal_close``: 1013)."""
    from speechpipe.errors import WorkerError, WorkerTimeout, WorkerUnavailable
    from speechpipe.transport.codes import refusal_close
    from tests.transport.test_codes import error_rows

    rows = error_rows()
    for kind in (WorkerError, WorkerTimeout, WorkerUnavailable):
        assert ({kind.code}, "no", "—") in rows, kind.code
    at_start = refusal_close(WorkerUnavailable("down", retry_after_s=2.0))
    assert at_start == CloseCode.TRY_AGAIN
    assert ({"worker_unavailable"}, "yes", str(int(at_start))) in rows


@live
async def test_a_voice_file_truncated_or_removed_while_serving_refuses_only_its_sessions(
    live_server: Any, pipeline: Any, spanish_clip: Any, tmp_path: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The model cache on disk: a voice installed when the server started, then truncated
    (a half-copied file) and then removed. A session asking for it is refused with one clear
    line (``no_voice``, close 4003); a session on another voice completes meanwhile."""
    import dataclasses
    import shutil
    from pathlib import Path

    from speechpipe.voices.registry import resolve_voice

    joe = resolve_voice(None, "en", ())
    for path in Path(joe.model_path).parent.glob(Path(joe.model_path).name + "*"):
        shutil.copy(path, tmp_path / path.name.replace("joe", "drill"))
    model = tmp_path / "en_US-drill-medium.onnx"
    saved = pipeline.options
    pipeline.options = dataclasses.replace(saved, voice_dirs=(tmp_path,))
    try:
        model.write_bytes(model.read_bytes()[: 4096])  # truncated while the server runs
        audio = _clip(spanish_clip)[: 2 * 16_000]

        async def drill_voice() -> ClientRun:
            return await stream_session(_url(live_server), audio, tail_s=0.5, start={
                "source_lang": "es", "voice": "en_US-drill-medium"})

        async with asyncio.timeout(30):
            truncated, ok = await asyncio.gather(drill_voice(), _sessions(live_server, audio, 1))
            model.unlink()  # and now removed
            removed = await drill_voice()
    finally:
        pipeline.options = saved
    for refused in (truncated, removed):
        assert not refused.started and refused.close_code == CloseCode.UNSUPPORTED_REQUEST
        assert refused.error == "no_voice", refused.error
    assert _completed(ok[0]) and ok[0].audio
    assert not [r for r in caplog.records if r.exc_info], "no traceback in the server log"
