"""Rooms over a real WebSocket server on loopback, with a scripted session (no models: these
are the access rules): unknown rooms, the listener limit, the ``room``/``role`` token claims,
a listener that sends audio, and captions reaching a listener."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from websockets.asyncio.client import connect

from speechpipe.transport.auth import TokenAuthority
from speechpipe.transport.codes import CloseCode
from speechpipe.transport.limits import RoomOptions, ServerLimits
from speechpipe.transport.websocket_server import SpeechServer
from tests.fakes import TickFactory
from tests.helpers import FAKE_TARGET, SECRET, pcm, read_until_closed, recv_json, wait_for

pytestmark = pytest.mark.asyncio(loop_scope="session")  # the loop the fixtures run in

AUTH = TokenAuthority(SECRET)


@pytest.fixture
async def server() -> AsyncIterator[SpeechServer]:
    limits = ServerLimits(auth=AUTH, rooms=RoomOptions(max_listeners_per_room=1))
    async with SpeechServer(TickFactory(), limits=limits) as srv:
        yield srv


def url(srv: SpeechServer) -> str:
    return f"ws://127.0.0.1:{srv.port}/ws"


async def start(srv: SpeechServer, **fields: Any) -> tuple[Any, dict[str, Any]]:
    ws = await connect(url(srv))
    await ws.send(json.dumps({"type": "start", **fields}))
    return ws, await recv_json(ws)


async def closed_with(ws: Any) -> tuple[int | None, list[Any]]:
    seen = await read_until_closed(ws)
    return ws.close_code, seen


async def test_captions_reach_a_listener_and_a_listener_cannot_speak(server: SpeechServer) -> None:
    speaker, started = await start(server, role="speaker", token=AUTH.issue(ttl_s=60))
    assert started["type"] == "started" and started["role"] == "speaker"
    room = started["room"]
    listener, joined = await start(server, room=room, token=AUTH.issue(
        ttl_s=60, role="listener", room=room))
    assert joined["role"] == "listener" and joined["room"] == room
    await listener.send(pcm(0.1))  # a listener's audio is refused, recoverably
    error = await recv_json(listener)
    assert error["code"] == "listener_cannot_speak" and not error["fatal"]
    await speaker.send(pcm(1.0))  # the scripted session captions each second of audio
    got = await recv_json(listener)
    while got["type"] != "target":
        got = await recv_json(listener)
    assert got["committed"] == FAKE_TARGET and got["speaker"] == started["session"]
    # the room's limit of one listener
    third, refused = await start(server, room=room, token=AUTH.issue(ttl_s=60))
    assert refused["code"] == "room_full"
    assert (await closed_with(third))[0] == CloseCode.ROOM_FULL
    await listener.send(json.dumps({"type": "stop"}))
    assert (await closed_with(listener))[0] == CloseCode.NORMAL
    await speaker.send(json.dumps({"type": "stop"}))
    assert (await closed_with(speaker))[0] == CloseCode.NORMAL
    assert not server.rooms.registry.rooms, "the room ended with its last member"


async def test_a_listener_token_cannot_speak_and_a_room_token_opens_only_its_room(
    server: SpeechServer,
) -> None:
    ws, reply = await start(server, role="speaker", token=AUTH.issue(ttl_s=60, role="listener"))
    assert reply["code"] == "unauthorized"
    assert (await closed_with(ws))[0] == CloseCode.UNAUTHORIZED
    ws, reply = await start(server, role="participant",
                            token=AUTH.issue(ttl_s=60, role="listener"))
    assert (await closed_with(ws))[0] == CloseCode.UNAUTHORIZED
    ws, reply = await start(server, token=AUTH.issue(ttl_s=60, role="listener"))  # no role
    assert reply["code"] == "unauthorized", "nor an ordinary session of its own"
    assert (await closed_with(ws))[0] == CloseCode.UNAUTHORIZED
    speaker, started = await start(server, role="speaker", token=AUTH.issue(ttl_s=60))
    other = AUTH.issue(ttl_s=60, role="listener", room="another-room-id")
    ws, reply = await start(server, room=started["room"], token=other)
    assert reply["code"] == "unauthorized"
    assert (await closed_with(ws))[0] == CloseCode.UNAUTHORIZED
    # a speaker token naming a room opens it under that id (its issuer chose it)
    chosen, opened = await start(server, role="speaker", token=AUTH.issue(
        ttl_s=60, role="speaker", room="issuer-chosen-room"))
    assert opened["room"] == "issuer-chosen-room"
    for ws in (speaker, chosen):
        await ws.send(json.dumps({"type": "stop"}))
        assert (await closed_with(ws))[0] == CloseCode.NORMAL


async def test_an_unknown_room_is_refused(server: SpeechServer) -> None:
    ws, reply = await start(server, room="no-such-room", token=AUTH.issue(ttl_s=60))
    assert reply["code"] == "no_room" and reply["fatal"]
    assert (await closed_with(ws))[0] == CloseCode.NO_ROOM
    ws, reply = await start(server, role="listener", token=AUTH.issue(ttl_s=60))
    assert reply["code"] == "bad_start", "a listener needs a room"


async def test_a_listener_in_another_language_gets_its_own_pipeline_on_the_same_audio(
    server: SpeechServer,
) -> None:
    factory = server.factory
    assert isinstance(factory, TickFactory)
    before = len(factory.sessions)
    speaker, started = await start(server, role="speaker", token=AUTH.issue(ttl_s=60))
    listener, joined = await start(server, room=started["room"], target_lang="fr",
                                   token=AUTH.issue(ttl_s=60))
    assert joined["type"] == "started"
    await wait_for(lambda: len(factory.sessions) == before + 2, what="the French pipeline")
    french = factory.sessions[-1]
    assert french.request.target_lang == "fr" and french.request.source_lang == "auto"
    await speaker.send(pcm(1.0))
    got = await recv_json(listener)
    while got["type"] != "target":
        got = await recv_json(listener)
    assert got["speaker"] == started["session"]
    assert french.frames > 0 and french.next_pts == factory.sessions[before].next_pts, (
        "the French pipeline got the speaker's audio")
    await listener.send(json.dumps({"type": "stop"}))
    assert (await closed_with(listener))[0] == CloseCode.NORMAL
    await speaker.send(json.dumps({"type": "stop"}))
    assert (await closed_with(speaker))[0] == CloseCode.NORMAL
    assert french.exited, "the extra pipeline ended with its speaker"


async def test_pipelines_for_other_languages_take_capacity_slots_and_never_queue() -> None:
    from speechpipe.server.admission import AdmissionCore, AdmissionGate, AdmissionOptions

    gate = AdmissionGate(AdmissionCore(AdmissionOptions(capacity=2, per_client=0)))
    factory = TickFactory()
    async with SpeechServer(factory, capacity=gate) as srv:
        speaker, started = await start(srv, role="speaker")  # slot 1
        french, _ = await start(srv, room=started["room"], target_lang="fr")  # slot 2
        await wait_for(lambda: len(factory.sessions) == 2, what="the French pipeline")
        german, _ = await start(srv, room=started["room"], target_lang="de")  # none left
        status = await recv_json(german)
        assert status["type"] == "status" and status["status"] == "translation_unavailable"
        assert "capacity" in status["message"] and status["detail"]["target_lang"] == "de"
        assert len(factory.sessions) == 2 and len(gate.core.active) == 2
        assert not gate.core.waiting, "the German pipeline did not wait in line"
        await speaker.send(pcm(1.0))
        for ws, side in ((french, "target"), (german, "source")):  # captions, no invention
            got = await recv_json(ws)
            while got["type"] != side:
                assert got["type"] != "target" or side == "target", got
                got = await recv_json(ws)
        # the French listener leaves: nobody hears French, its pipeline stops, its slot
        # is free, and a Dutch listener now gets a pipeline of its own
        await french.send(json.dumps({"type": "stop"}))
        assert (await closed_with(french))[0] == CloseCode.NORMAL
        await wait_for(lambda: factory.sessions[1].exited and len(gate.core.active) == 1,
                       what="the unheard French pipeline stopped")
        dutch, _ = await start(srv, room=started["room"], target_lang="nl")
        await wait_for(lambda: len(factory.sessions) == 3, what="the Dutch pipeline")
        assert factory.sessions[2].request.target_lang == "nl"
        for ws in (german, dutch, speaker):
            await ws.send(json.dumps({"type": "stop"}))
            assert (await closed_with(ws))[0] == CloseCode.NORMAL
        await wait_for(lambda: not gate.core.active, what="slots released")
