"""Faults: a model worker that fails, and clients that misbehave, hurt no one else.

- A real pipeline whose Whisper engine fails one request of one session mid-utterance: that
  session gets a recoverable ``worker_error`` and goes on; the other session sees nothing;
  the shared worker keeps serving both.
- Clients that reset, stop reading, send garbage or reconnect in a storm while one
  well-behaved session streams a recording: it keeps receiving captions and speech.
- A real session's tasks and file descriptors are gone within 2 s of its client leaving."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from speechpipe.models.whisper.engine import WhisperRequest
from speechpipe.transport.codes import CloseCode
from speechpipe.transport.file_replay import read_audio
from speechpipe.transport.limits import Quotas, ServerLimits
from speechpipe.transport.websocket_server import SpeechServer
from tests.helpers import (
    ROOT,
    assert_released,
    errors,
    open_fds,
    pcm,
    recv_json,
    wait_for,
)

live = pytest.mark.asyncio(loop_scope="session")

SAMPLES = ROOT / "samples" / "wav"


def words(text: str) -> set[str]:
    return {w.strip(".,;:!?¿¡\"'").lower() for w in text.split()} - {""}


class InjectedFault(RuntimeError):
    pass


class FaultInjector:
    """Poisons one Whisper request: the engine raises whenever that request is run.

    Why a wrapper and not a broken model: the failure has to happen *inside the shared worker,
    on a real pipeline, mid-utterance, for one session only*, which no real input does on
    demand. It wraps the engine instance's ``run_bucket``, the one pass every decode goes
    through (a bucket that holds the poisoned request fails whole, as a real engine error
    would, and the worker must isolate it). The poisoned request is the
    ``nth`` distinct one that ``choose`` accepts; it fails every time it is run, so retrying
    it cannot hide the fault. Everything else runs on the real engine.
    """

    def __init__(self, engine: Any, choose: Callable[[WhisperRequest], bool], nth: int) -> None:
        self.engine = engine
        self.choose = choose
        self.nth = nth
        self.chosen = 0
        self.poisoned: WhisperRequest | None = None
        self.failures = 0
        self.ok_after_failure = 0  # requests served after the fault: the worker recovered
        self._originals: dict[str, Any] = {}

    def _check(self, requests: Sequence[WhisperRequest]) -> None:
        for request in requests:
            if self.poisoned is None and self.choose(request):
                self.chosen += 1
                if self.chosen == self.nth:
                    self.poisoned = request
        if self.poisoned is not None and any(r is self.poisoned for r in requests):
            self.failures += 1
            raise InjectedFault("injected engine fault")

    def install(self) -> FaultInjector:
        # every engine pass goes through run_bucket: run and run_batch call it, and the shared
        # worker reaches it through the decode program (stages/decode_program.py)
        for name in ("run_bucket",):
            original = getattr(self.engine, name, None)
            if original is None:
                continue
            self._originals[name] = original

            def wrapped(arg: Any, *args: Any, _original: Any = original,
                        **kwargs: Any) -> Any:
                self._check(list(arg))
                result = _original(arg, *args, **kwargs)
                if self.failures:
                    self.ok_after_failure += 1
                return result

            setattr(self.engine, name, wrapped)
        return self

    def remove(self) -> None:
        for name in self._originals:
            delattr(self.engine, name)  # the instance attribute; the class method shows again
        self._originals.clear()


QUALITY_NOTICES = frozenset({"translation_incomplete"})  # recoverable, docs/protocol.md


@live
async def test_worker_fault_reaches_only_the_affected_session(
    pipeline: Any, stream_ws: Any
) -> None:
    injector = FaultInjector(pipeline.engine, lambda r: r.language == "fr", nth=2).install()
    try:
        async with SpeechServer(pipeline.session, port=0) as srv:
            url = f"ws://127.0.0.1:{srv.port}/ws"
            spanish, french = await asyncio.gather(
                stream_ws(url, read_audio(SAMPLES / "es_hermano.wav"), tail_s=2.0,
                          start={"source_lang": "es"}),
                stream_ws(url, read_audio(SAMPLES / "fr_croissant.wav"), tail_s=2.0,
                          start={"source_lang": "fr"}),
            )
    finally:
        injector.remove()
    assert injector.failures >= 1, "the poisoned request ran"
    assert injector.ok_after_failure > 0, "the worker served requests after the fault"

    # What the test means: the fault reaches the French session once, as a recoverable
    # worker_error, and that session goes on; the Spanish session never sees it. Besides
    # that, either session may get recoverable quality notices its own audio calls for
    # (translation_incomplete: under load, or for the utterance the fault cut short), which
    # say nothing about fault isolation: they are allowed, fatal errors are not.
    fr_errors = errors([e for _, e in french.events])
    faults = [e for e in fr_errors if e["code"] == "worker_error"]
    assert [e["fatal"] for e in faults] == [False], fr_errors
    assert isinstance(faults[0].get("utterance"), int), "the error names the utterance"
    assert "injected" in faults[0]["message"]
    assert {e["code"] for e in fr_errors} <= {"worker_error", *QUALITY_NOTICES}, fr_errors
    assert not any(e["fatal"] for e in fr_errors), fr_errors
    events = [e for _, e in french.events]
    after = [e["type"] for e in events[events.index(faults[0]) + 1 :]]
    assert "target" in after and "utterance_end" in after, "the session went on"
    assert french.close_code == CloseCode.NORMAL
    assert words(french.text("target")) & {"coffee", "croissant", "please", "hello", "like"}

    es_errors = errors([e for _, e in spanish.events])
    assert {e["code"] for e in es_errors} <= QUALITY_NOTICES, "the fault stayed in its session"
    assert not any(e["fatal"] for e in es_errors), es_errors
    assert spanish.close_code == CloseCode.NORMAL and spanish.audio
    assert words(spanish.text("target")) & {"brother", "hospital", "city", "works", "early"}


async def _resetter(url: str, cycles: int) -> int:
    """Starts a session, talks for half a second, then vanishes without a closing handshake."""
    done = 0
    for _ in range(cycles):
        ws = await connect(url)
        await ws.send(json.dumps({"type": "start", "source_lang": "es"}))
        await recv_json(ws)
        for _ in range(25):
            await ws.send(pcm(0.02))
            await asyncio.sleep(0.02)
        ws.transport.abort()
        done += 1
    return done


async def _non_reader(url: str, srv: SpeechServer, seconds: float) -> float | None:
    """Starts a session, stops reading (so it never answers a ping) and keeps sending audio;
    returns how long the server took to drop it (None if it did not)."""
    ws = await connect(url)
    await ws.send(json.dumps({"type": "start", "source_lang": "es"}))
    await recv_json(ws)
    port = ws.local_address[1]
    ws.transport.pause_reading()
    t0 = time.monotonic()

    def mine() -> bool:
        return any(c.ws.remote_address[1] == port for c in srv.connections)

    dropped: float | None = None
    for i in range(int(seconds / 0.02)):
        if dropped is None and not mine():
            dropped = time.monotonic() - t0
        try:
            await ws.send(pcm(0.02))
        except ConnectionClosed:
            pass
        await asyncio.sleep(max(0.0, t0 + (i + 1) * 0.02 - time.monotonic()))
    ws.transport.abort()
    return dropped


async def _storm(url: str, total: int, parallel: int) -> int:
    """Connect, start, leave at once: ``total`` times, ``parallel`` at a time."""
    started = 0

    async def one() -> None:
        nonlocal started
        try:
            async with connect(url) as ws:
                await ws.send(json.dumps({"type": "start", "source_lang": "es"}))
                if (await recv_json(ws))["type"] == "started":
                    started += 1
        except (ConnectionClosed, InvalidStatus, OSError):
            pass

    for i in range(0, total, parallel):
        await asyncio.gather(*(one() for _ in range(min(parallel, total - i))))
    return started


async def _vandal(url: str) -> None:
    async with connect(url, max_size=None) as ws:
        await ws.send(json.dumps({"type": "start", "source_lang": "es"}))
        await recv_json(ws)
        for message in ("][", '{"type": 5}', b"\x01", '{"type": "ice"}', b"\x00" * 7,
                        '{"type": "offer", "sdp": "v=0 garbage"}'):
            await ws.send(message)
        ws.transport.abort()


@live
async def test_misbehaving_clients_do_not_hurt_a_well_behaved_session(
    pipeline: Any, stream_ws: Any
) -> None:
    limits = ServerLimits(ping_interval_s=0.5, ping_timeout_s=0.5, close_timeout_s=0.5,
                          quotas=Quotas(max_sessions_per_ip=None))
    audio = read_audio(SAMPLES / "es_hermano.wav")
    async with SpeechServer(pipeline.session, port=0, limits=limits) as srv:
        url = f"ws://127.0.0.1:{srv.port}/ws"
        good_task = asyncio.create_task(
            stream_ws(url, audio, tail_s=2.0, start={"source_lang": "es"})
        )
        await asyncio.sleep(0.5)
        t_chaos = time.monotonic()
        resets, dropped_after, storm_started, _ = await asyncio.gather(
            _resetter(url, 3), _non_reader(url, srv, 4.0), _storm(url, 24, 4), _vandal(url),
        )
        chaos_s = time.monotonic() - t_chaos
        good = await good_task
        await wait_for(lambda: not srv.connections, within=5, what="every connection gone")
    print(f"\nmisbehaviour for {chaos_s:.1f} s: {resets} resets, {storm_started} storm sessions, "
          f"non-reader dropped after {dropped_after} s; good session: "
          f"{len(good.of('target'))} target updates, {len(good.audio)} speech chunks")
    assert resets == 3 and storm_started == 24
    assert dropped_after is not None and dropped_after < 3.5, "ping timeout dropped the non-reader"

    assert good.close_code == CloseCode.NORMAL
    assert not errors([e for _, e in good.events]), "no error reached the good session"
    arrivals = [t for t, e in good.events if e["type"] in ("source", "target")]
    window = [t for t in arrivals if 0.5 <= t <= 0.5 + chaos_s]
    assert len(window) >= 2, f"captions kept arriving during the misbehaviour: {arrivals}"
    assert words(good.text("target")) & {"brother", "hospital", "city", "works", "early"}
    assert good.audio, "translated speech arrived"


@live
async def test_real_session_tasks_and_fds_gone_within_2s(pipeline: Any) -> None:
    audio = read_audio(SAMPLES / "es_hermano.wav")[: 16000 * 3].astype("<i2")
    async with SpeechServer(pipeline.session, port=0) as srv:
        tasks_before, fds_before = set(asyncio.all_tasks()), open_fds()
        ws = await connect(f"ws://127.0.0.1:{srv.port}/ws")
        await ws.send(json.dumps({"type": "start", "source_lang": "es"}))
        await recv_json(ws)
        for i in range(0, len(audio), 1600):  # 3 s of speech, sent within the 5 s lead
            await ws.send(audio[i : i + 1600].tobytes())
        async with asyncio.timeout(15):  # mid-utterance: the ASR has started on it
            while (await recv_json(ws, within=15))["type"] != "source":
                pass
        assert srv.active_sessions == 1
        ws.transport.abort()
        t0 = time.monotonic()
        await assert_released(tasks_before, fds_before, within=2.0)
        print(f"\nreal session released in {time.monotonic() - t0:.2f} s")
        assert srv.active_sessions == 0 and not srv.gate.per_ip.counts
