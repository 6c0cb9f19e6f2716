"""Rooms over real WebSockets on loopback, with the real models and a real recording: one
speaker heard by several listeners (identical captions and speech bytes; a late joiner gets
the current utterance's state first and its speech from a phrase boundary; a direction with no
model gets the source captions and a ``status``), and a listener that stops reading closed
with ``listener_too_slow`` (4012) while the others get everything."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
import pytest_asyncio

from speechpipe.transport.client import listen_room, stream_session
from speechpipe.transport.codes import CloseCode
from speechpipe.transport.file_replay import read_audio
from speechpipe.transport.limits import RoomOptions, ServerLimits
from tests.helpers import tiny_buffer_socket, wait_for

pytestmark = pytest.mark.asyncio(loop_scope="session")

# a listener socket's send buffer in the stalled-listener test: a quarter of a speech chunk
# (~40 KB at 48 kHz), so the stalled socket is full after the first chunk whatever the
# translation's length. With the default (128 KB, ~256 KB as Linux counts it) the clip's
# 190-210 KB of speech decided by a few KB whether the outbox ever overflowed
SEND_BUFFER = 16 * 1024
LEAD_SILENCE_S = 2.0  # listeners join during this (the first event comes after speech starts)


async def _app(pipeline: Any, rooms: RoomOptions) -> Any:
    from speechpipe.server.serve import ServerApp

    app = ServerApp("127.0.0.1", 0, pipeline=pipeline, limits=ServerLimits(rooms=rooms))
    await app.start()
    await app.load()
    return app


@pytest_asyncio.fixture(loop_scope="session")
async def room_server(pipeline: Any) -> AsyncIterator[Any]:
    app = await _app(pipeline, RoomOptions())
    yield app
    await app.stop(close_pipeline=False)


def url(app: Any) -> str:
    return f"ws://127.0.0.1:{app.server.port}/ws"


def speech(audio: np.ndarray) -> np.ndarray:
    return np.concatenate([np.zeros(int(LEAD_SILENCE_S * 16000), np.int16), audio])


def metric(app: Any, name: str) -> float:
    for line in app.metrics.text().decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no metric {name}")


def audio_events(app: Any) -> float:
    text = app.metrics.text().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith('speechpipe_events_total{type="audio"}'))


async def _speaker(app: Any, audio: np.ndarray, room: asyncio.Future[str],
                   start: dict[str, Any], begin: asyncio.Event) -> Any:
    def seen(message: str | bytes) -> None:
        if isinstance(message, str) and not room.done():
            event = json.loads(message)
            if event.get("type") == "started":
                room.set_result(event["room"])

    return await stream_session(url(app), audio, start=start, on_message=seen, tail_s=3.0,
                                begin=begin)


async def attached(app: Any, room_id: str, count: int) -> None:
    """Wait (bounded) until ``count`` subscribers are on the room's feeds: then the speaker's
    audio may start, and every listener hears it from its first event."""
    room = app.server.rooms.registry.rooms[room_id]
    await wait_for(lambda: sum(len(f.subscribers) for f in room.feeds.values()) >= count,
                   within=30, what=f"{count} listeners attached")


async def test_listeners_get_identical_captions_and_speech_and_a_late_joiner_catches_up(
    room_server: Any, spanish_clip: tuple[Any, dict[str, Any]]
) -> None:
    path, _ = spanish_clip
    audio = speech(read_audio(path))
    room: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    stop, go = asyncio.Event(), asyncio.Event()
    async with asyncio.timeout(120):
        speaker = asyncio.create_task(_speaker(
            room_server, audio, room,
            {"role": "speaker", "source_lang": "es", "output_sample_rate": 24000}, go))
        room_id = await room
        assert len(room_id) >= 32, "room ids are long random capabilities"
        joined = [asyncio.Event() for _ in range(4)]
        early = [asyncio.create_task(listen_room(
            url(room_server), room_id, stop=stop, on_started=lambda _, e=ev: e.set(),
            start={"target_lang": lang})) for ev, lang in zip(joined, ["en", "en", "en", "de"],
                                                              strict=True)]
        for ev in joined:
            await ev.wait()
        await attached(room_server, room_id, 4)
        go.set()
        # the late joiner: once the speaker's translated speech is flowing (mid-talk)
        the_room = room_server.server.rooms.registry.rooms[room_id]
        await wait_for(lambda: any(f.current for f in the_room.feeds.values())
                       and audio_events(room_server) > 0, within=60, what="speech mid-talk")
        late = asyncio.create_task(listen_room(url(room_server), room_id, stop=stop))
        spoke = await speaker
        assert spoke.close_code == CloseCode.NORMAL
        await asyncio.sleep(0.5)  # let the last fan-out reach the sockets (no timing asserted)
        stop.set()
        runs = [await task for task in early]
        late_run = await late

    en = runs[:3]
    for run in runs + [late_run]:
        assert run.close_code == CloseCode.NORMAL, run.error
        assert run.started["role"] == "listener" and run.started["room"] == room_id
    # every listener of the same language got the same messages, the same speech bytes
    assert en[0].audio, "translated speech reached the listeners"
    texts = [[e for _, e in run.events] for run in en]
    assert texts[0] == texts[1] == texts[2]
    pcm = [[chunk for _, _, chunk in run.audio] for run in en]
    assert pcm[0] == pcm[1] == pcm[2]
    assert [c for _, _, c in spoke.audio] and [
        np.frombuffer(c, "<i2").tolist() for c in pcm[0]] == [
        c.tolist() for _, _, c in spoke.audio], "listeners hear what the speaker's pipeline made"
    committed = en[0].committed("target")
    assert committed and any(committed.values()), "committed English captions arrived"

    # the late joiner: the current utterance's state first, then live from a phrase boundary
    # (the captions first: the last minute's committed ones and the current utterance's)
    # (after the engines status: what translates this speaker and speaks it)
    told = [e for _, e in late_run.events if e.get("status") != "engines"]
    assert told and len(told) < len(late_run.events), "the engines status came"
    first = told[0]
    assert first["type"] in ("source", "target"), first
    assert late_run.audio, "the late joiner got live speech"
    late_pcm = [chunk for _, _, chunk in late_run.audio]
    assert late_pcm == pcm[0][len(pcm[0]) - len(late_pcm):], (
        "its speech is the others' from a chunk boundary on: never mid-word")
    assert late_run.committed("target") == {
        k: v for k, v in committed.items() if k in late_run.committed("target")}

    # a direction with no model (the embedded default translates into English only)
    de = runs[3]
    unavailable = [e for e in de.of("status") if e["status"] == "translation_unavailable"]
    assert unavailable and unavailable[0]["detail"]["target_lang"] == "de"
    assert not de.of("target") and not de.audio, "no invented German"
    assert de.committed("source") == en[0].committed("source") != {}

    assert metric(room_server, "speechpipe_rooms") == 0
    assert metric(room_server, "speechpipe_room_listeners") == 0
    assert metric(room_server, "speechpipe_room_fanout_delay_seconds_count") > 0


async def test_a_listener_that_stops_reading_is_closed_and_the_others_get_everything(
    pipeline: Any, spanish_clip: tuple[Any, dict[str, Any]]
) -> None:
    from websockets.asyncio.client import connect

    app = await _app(pipeline, RoomOptions(outbox_capacity=8, listener_send_buffer=SEND_BUFFER))
    try:
        path, _ = spanish_clip
        audio = speech(read_audio(path))
        room: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        stop, go = asyncio.Event(), asyncio.Event()
        async with asyncio.timeout(120):
            speaker = asyncio.create_task(_speaker(
                app, audio, room,
                {"role": "speaker", "source_lang": "es", "output_sample_rate": 48000}, go))
            room_id = await room
            joined = asyncio.Event()
            reader = asyncio.create_task(listen_room(url(app), room_id, stop=stop,
                                                     on_started=lambda _: joined.set()))
            await joined.wait()
            sock = tiny_buffer_socket(app.server.port)
            async with connect(url(app), sock=sock, max_queue=1, max_size=None) as stalled:
                await stalled.send(json.dumps({"type": "start", "role": "listener",
                                               "room": room_id}))
                started = json.loads(await stalled.recv())
                assert started["type"] == "started"
                await attached(app, room_id, 2)
                go.set()
                # (the server bounds a listener socket's send buffer, rooms.listener_send_buffer:
                # with the OS's, loopback would absorb megabytes before the outbox fills)
                # ... and it reads nothing more while the speaker talks
                spoke = await speaker
                stop.set()
                good = await reader
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(15):
                        async for _ in stalled:
                            pass
        assert spoke.close_code == CloseCode.NORMAL
        name = 'speechpipe_connections_closed_total{code="4012",reason="listener_too_slow"}'
        await wait_for(lambda: name in app.metrics.text().decode(), within=15,
                       what="the stalled listener's close")
        assert metric(app, name) == 1, "the stalled listener was closed with listener_too_slow"
        assert stalled.close_code == CloseCode.LISTENER_TOO_SLOW
        assert metric(app, "speechpipe_room_fanout_drops_total") == 1
        assert good.close_code == CloseCode.NORMAL
        assert [np.frombuffer(c, "<i2").tolist() for _, _, c in good.audio] == [
            c.tolist() for _, _, c in spoke.audio] != [], "the reading listener got everything"
    finally:
        await app.stop(close_pipeline=False)
