"""Fault drills on a live server (real models, real websockets clients on loopback): a shared
worker fails, hangs or trips its breaker while sessions stream; the affected work gets a
documented error event, the other sessions complete, and ``/readyz`` / ``/metrics`` say so.

Faults are injected at the real workers' boundaries with ``speechpipe.models.workers.faults``, a
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

from speechpipe.models.workers import faults
from speechpipe.models.workers.guard import CircuitBreaker, LatencyBudget, WorkerGuard
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
def own_phrase_caches(pipeline: Any) -> Iterator[None]:
    """The shared pipeline as a bench server's (``pipeline.phrase_cache_per_session``) for one
    drill: every session a phrase cache of its own, so every phrase goes to the TTS worker."""
    import dataclasses

    saved = pipeline.options
    pipeline.options = dataclasses.replace(saved, phrase_cache_per_session=True)
    try:
        yield
    finally:
        pipeline.options = saved


@pytest.fixture
def drill_guard(pipeline: Any, own_phrase_caches: None) -> Iterator[Any]:
    """Short deadlines and cooldowns on the shared pipeline's workers for one drill (and its
    sessions' own phrase caches); the original guards (and no armed fault) afterwards."""
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
            # a phrase cache of its own (own_phrase_caches): every phrase goes to the TTS worker
            stream_session(_url(app), audio, tail_s=tail_s, index=i, start={
                "source_lang": "es"})
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
        await wait_for(lambda: asr.budget.count >= 3, 25.0, "three calls measured")
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


@live
async def test_a_raising_synthesis_fails_one_phrase_and_every_session_completes(
    live_server: Any, spanish_clip: Any, drill_guard: Any,
) -> None:
    """onnxruntime raising inside Piper: that phrase fails with ``worker_error`` (a worker
    failure counted by its breaker, not the caller's bad input), the voice's thread goes
    on, the session speaks its next phrases and the other session all of its speech."""
    _, tts = drill_guard
    audio = _clip(spanish_clip)
    fired = faults.fired.get("tts", 0)
    faults.arm("tts", "raise", times=1)
    runs = await _sessions(live_server, audio, 2)
    assert all(_completed(run) for run in runs), [(r.close_code, _codes(r)) for r in runs]
    assert faults.fired.get("tts", 0) - fired == 1, "the fault fired once"
    assert sum(_codes(run).count("worker_error") for run in runs) == 1
    assert tts.failures == 1 and tts.abandoned == 0 and tts.restarts == 0
    assert not tts.health().down, "one failure does not open the breaker"
    clean = [run for run in runs if "worker_error" not in _codes(run)]
    assert clean and all(run.audio for run in clean), "the other session got its speech"
    assert all(run.text("target") for run in runs), "captions and translations went on"


@live
@pytest.mark.usefixtures("own_phrase_caches")
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


# --- the text-MT worker (a CTranslate2 model the test builds) and the cache on disk -------


def _own_clip(name: str, gap_s: float = 0.0, *more: str) -> np.ndarray:
    from speechpipe.transport.file_replay import read_audio
    from tests.helpers import OWN_SAMPLES

    parts: list[np.ndarray] = []
    for clip in (name, *more):
        parts += [read_audio(OWN_SAMPLES / "wav" / clip), np.zeros(int(gap_s * 16_000),
                                                                    np.int16)]
    return np.concatenate(parts)


@pytest.fixture
async def tiny_fr_en(pipeline: Any, tmp_path: Any) -> Any:
    """A tiny fr->en CTranslate2 pair (random weights: the words mean nothing), registered
    in the run's home for one test, so a session speaking French takes the text-MT route
    (``--mt auto``) while Spanish sessions keep Whisper's own translation. Its worker gets
    the drills' short ceiling and cooldown; its deadline is the floor or 4 x the p99 of its
    own measured calls (a few real translations before the drill). Unregistered after."""
    from speechpipe.bench.tiny_mt import build_tiny_pair
    from speechpipe.cli import main
    from speechpipe.models.mt.registry import locked_registry, resolve_mt_model
    from speechpipe.stages.model_api import TextMtRequest

    name = f"drill-fr-en-{time.monotonic_ns()}"
    pair = build_tiny_pair(tmp_path / "tiny-fr-en", "fr", "en")
    assert main(["models", "add", str(pair), "--name", name]) == 0
    worker = await asyncio.to_thread(pipeline.text_mt_worker, name)
    guard = WorkerGuard(worker.guard.name, required=False,
                        budget=LatencyBudget(floor_s=2.0, ceiling_s=8.0),
                        breaker=CircuitBreaker(failures=3, window_s=30.0, cooldown_s=1.0))
    worker.guard = worker._executor.guard = guard
    for text in ("bonjour", "le chat dort", "merci beaucoup"):
        await worker.translate(TextMtRequest(text, "fr", "en"))
    try:
        yield worker
    finally:
        faults.clear()
        with locked_registry() as data:
            data["mt"].pop(name, None)
        with pipeline._text_mt_lock:
            pipeline._text_mt.pop(str(resolve_mt_model(str(pair))), None)
        await worker.aclose()


async def _mixed(app: Any, french: np.ndarray, spanish: np.ndarray, others: int,
                 ) -> tuple[ClientRun, list[ClientRun]]:
    """One French session (the text-MT route) and ``others`` Spanish ones (Whisper's)."""
    async with asyncio.timeout(60):
        runs = await asyncio.gather(
            stream_session(_url(app), french, tail_s=2.0, start={"source_lang": "fr"}),
            *(stream_session(_url(app), spanish, tail_s=1.5, index=i + 1, start={
                "source_lang": "es"})
              for i in range(others)))
    return runs[0], list(runs[1:])


@live
@pytest.mark.usefixtures("own_phrase_caches")
async def test_a_hung_text_mt_call_fails_its_session_s_step_only_and_recovers(
    live_server: Any, spanish_clip: Any, tiny_fr_en: Any,
) -> None:
    """The text-MT worker hangs on the French session's first translation: that request is
    abandoned at its deadline (``worker_timeout`` to that session only), a new thread serves
    the worker's queue, the French session's next translation succeeds within 2 s of the
    deadline, and the Spanish sessions (Whisper's route, never the MT worker) complete with
    their speech and no error."""
    worker = tiny_fr_en
    guard = worker.guard
    deadline = guard.deadline_s()
    assert deadline < 8.0, "the deadline is measured (floor or 4 x p99), not the ceiling"
    recovery: list[float] = []

    async def watch() -> None:
        await wait_for(lambda: guard.abandoned >= 1, 40.0, "the hung MT call abandoned")
        abandoned_at, seen = time.monotonic(), guard.successes
        await wait_for(lambda: guard.successes > seen, 10.0, "an MT call after it")
        recovery.append(time.monotonic() - abandoned_at)

    fired = faults.fired.get("mt", 0)
    faults.arm("mt", "hang", seconds=20.0)
    (french, spanish), _ = await asyncio.gather(
        _mixed(live_server, _own_clip("fr_croissant.wav"), _clip(spanish_clip), 2), watch())
    faults.release()
    assert faults.fired.get("mt", 0) - fired == 1
    assert _completed(french), (french.close_code, _codes(french))
    assert _codes(french).count("worker_timeout") == 1
    timeout_at = next(t for t, e in french.events if e.get("code") == "worker_timeout")
    assert any(t > timeout_at and e["committed"] for t, e in french.events
               if e.get("type") == "target"), "translations again after the abandoned one"
    assert guard.abandoned == 1 and guard.restarts == 1
    assert recovery and recovery[0] <= 2.0, recovery
    for run in spanish:
        assert _completed(run) and run.audio and not _codes(run), (run.close_code, _codes(run))


@live
@pytest.mark.usefixtures("own_phrase_caches")
async def test_a_crashing_text_mt_worker_opens_its_breaker_and_only_its_sessions_see_it(
    live_server: Any, spanish_clip: Any, tiny_fr_en: Any,
) -> None:
    """CTranslate2 raising on every call: the French sessions' failed requests get
    ``worker_error``, two failures open the MT worker's breaker, requests while it is open
    are refused at once (``worker_unavailable``, one per update the guard refused), ``/readyz``
    stays 200 (one pair's model is not the server); once the model works again the half-open
    probe closes the breaker and the French sessions translate again (their second
    utterance). The Spanish session (Whisper's route) completes with its speech and no
    error."""
    worker = tiny_fr_en
    guard = worker.guard
    guard.breaker = CircuitBreaker(failures=2, window_s=30.0, cooldown_s=1.0)
    seen: dict[str, Any] = {}

    async def watch() -> None:
        await wait_for(lambda: guard.breaker.opened >= 1, 40.0, "the MT breaker open")
        faults.clear()  # the model works again: the probe after the cooldown succeeds
        seen["readyz"] = await _get(live_server, "/readyz")
        await wait_for(lambda: guard.health().breaker == "closed", 40.0, "closed again")

    fired = faults.fired.get("mt", 0)
    faults.arm("mt", "raise", times=100)
    french = _own_clip("fr_croissant.wav", 1.5, "fr_plage.wav")  # two utterances
    async with asyncio.timeout(60):
        (*mt_runs, spanish), _ = await asyncio.gather(asyncio.gather(
            *(stream_session(_url(live_server), french, tail_s=2.0, index=i, start={
                "source_lang": "fr"})
              for i in range(2)),
            stream_session(_url(live_server), _clip(spanish_clip), tail_s=1.5, index=2, start={
                "source_lang": "es"})),
            watch())
    codes = [code for run in mt_runs for code in _codes(run)]
    assert all(_completed(run) for run in mt_runs), [(r.close_code, _codes(r)) for r in mt_runs]
    failed = faults.fired["mt"] - fired  # batches that raised (two sessions' may share one)
    assert codes.count("worker_error") >= failed >= 2, (codes, failed)
    # one event per failed update; an update asks for up to two translations (its committed
    # captions' and the look-ahead's, text_mt.lookahead), and reports the first that failed
    refused_updates = codes.count("worker_unavailable")
    failed_updates = refused_updates + codes.count("worker_error")
    assert 1 <= refused_updates <= guard.refused <= 2 * failed_updates, (codes, guard.refused)
    assert seen["readyz"][0] == 200, seen["readyz"]
    assert guard.health().breaker == "closed" and guard.breaker.opened >= 1
    for run in mt_runs:  # each French session translates again after its last failure
        last_error = max(t for t, e in run.events if e.get("type") == "error")
        assert any(t > last_error and e["committed"] for t, e in run.events
                   if e.get("type") == "target"), "translations again once the breaker closed"
    assert _completed(spanish) and spanish.audio and not _codes(spanish), _codes(spanish)


@live
@pytest.mark.usefixtures("own_phrase_caches")
async def test_a_full_cache_disk_is_one_warning_and_the_sessions_still_speak(
    live_server: Any, pipeline: Any, spanish_clip: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    """The model cache on a full (or read-only) filesystem: a session in a language whose
    restricted decoder is not built yet needs its kept tokens written under
    ``$SPEECHPIPE_HOME``; the write fails with ENOSPC (the faults seam: the tests run as root
    here, where a read-only folder is writable, and a tiny tmpfs needs root to mount). One
    warning line says what could not be written; the session decodes and speaks all the
    same, the other session completes, no traceback, no half-written file in the cache."""
    import logging

    from speechpipe.models.home import speechpipe_home

    engine = pipeline.engine
    cache = speechpipe_home() / "models" / "vocabularies"
    for old in cache.glob("*-de-en-*.json"):  # this run's home: built again, then not kept
        old.unlink()
    with engine._decoders_lock:  # as if no German session had come yet in this process
        for key in [k for k in engine._decoders if k[0] == "de"]:
            del engine._decoders[key]
    fired = faults.fired.get("cache:write", 0)
    faults.arm("cache:write", "full")
    with caplog.at_level(logging.WARNING):
        german, spanish = await _mixed_lang(live_server, _own_clip("de_wetter.wav"),
                                            _clip(spanish_clip))
    assert faults.fired.get("cache:write", 0) - fired == 1
    for run in (german, spanish):
        assert _completed(run) and run.audio and not _codes(run), (run.close_code, _codes(run))
    assert german.text("source") and german.text("target")
    lines = [r.getMessage() for r in caplog.records if "cannot write" in r.getMessage()]
    assert len(lines) == 1 and "No space left on device" in lines[0], lines
    assert not [r for r in caplog.records if r.exc_info], "no traceback in the server log"
    assert not list(cache.glob("*-de-en-*")) and not list(cache.glob(".tmp-*-de-en-*"))
    assert [v for k, v in engine._decoders.items() if k[0] == "de" and v is not None], \
        "the restricted decoder was built all the same"


async def _mixed_lang(app: Any, german: np.ndarray, spanish: np.ndarray,
                      ) -> tuple[ClientRun, ClientRun]:
    async with asyncio.timeout(60):
        first, second = await asyncio.gather(
            stream_session(_url(app), german, tail_s=1.5, start={"source_lang": "de"}),
            stream_session(_url(app), spanish, tail_s=1.5, index=1, start={
                "source_lang": "es"}))
    return first, second
