"""Issue 42 over real sockets on loopback (fake sessions, no models): the feed's writer
writes the room's messages directly to idle listeners; every listener gets the very bytes
the speaker's pipeline published, in its order, and a listener that stops reading is closed
with ``listener_too_slow`` (4012) while the speaker is still talking."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from speechpipe.transport import listener_path
from speechpipe.transport.codes import CloseCode
from speechpipe.transport.limits import RoomOptions, ServerLimits
from speechpipe.transport.websocket_server import SpeechServer
from tests.fakes import FakeFactory
from tests.helpers import pcm, recv_json, tiny_buffer_socket, wait_for

pytestmark = pytest.mark.asyncio(loop_scope="session")

LISTENERS = 4
TALK_S = 30  # seconds of audio, sent ahead of the clock: ~0.6 MB of speech at 48 kHz


async def _collect(ws: ClientConnection, into: list[str | bytes]) -> None:
    try:
        async for message in ws:
            into.append(message)
    except ConnectionClosed:
        pass


def _room_messages(messages: list[str | bytes]) -> list[str | bytes]:
    """The room's messages in what a client got: without ``started``, ``end`` and the
    ``speaker_left`` status."""
    kept: list[str | bytes] = []
    for message in messages:
        if isinstance(message, str):
            kind = json.loads(message)
            if kind["type"] in ("started", "end") or kind.get("status") == "speaker_left":
                continue
        kept.append(message)
    return kept


async def test_listeners_get_the_speakers_bytes_in_order_and_a_stalled_one_is_closed_mid_talk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    direct = 0
    write = listener_path.ListenerSocket.write

    def counting(self: Any, frames: Any, wire: bytes) -> None:
        nonlocal direct
        direct += 1
        write(self, frames, wire)

    monkeypatch.setattr(listener_path.ListenerSocket, "write", counting)
    limits = ServerLimits(max_lead_s=TALK_S + 10, rooms=RoomOptions(
        outbox_capacity=4, listener_send_buffer=4096, join_per_ip_s=0, join_per_room_s=0))
    async with SpeechServer(FakeFactory(), limits=limits) as srv, asyncio.timeout(60):
        url = f"ws://127.0.0.1:{srv.port}/ws"
        async with connect(url, max_size=None) as speaker:
            await speaker.send(json.dumps({"type": "start", "role": "speaker",
                                           "output_sample_rate": 48000}))
            room_id = str((await recv_json(speaker))["room"])
            spoken: list[str | bytes] = []
            speaker_reads = asyncio.create_task(_collect(speaker, spoken))
            good = [await connect(url, max_size=None) for _ in range(LISTENERS)]
            heard: list[list[str | bytes]] = [[] for _ in good]
            for ws in good:
                await ws.send(json.dumps({"type": "start", "role": "listener", "room": room_id}))
            readers = [asyncio.create_task(_collect(ws, into))
                       for ws, into in zip(good, heard, strict=True)]
            sock = tiny_buffer_socket(srv.port)
            async with connect(url, sock=sock, max_queue=1, max_size=None) as stalled:
                await stalled.send(json.dumps({"type": "start", "role": "listener",
                                               "room": room_id}))
                assert (await recv_json(stalled))["type"] == "started"
                room = srv.rooms.registry.rooms[room_id]
                await wait_for(lambda: sum(len(f.subscribers) for f in room.feeds.values())
                               == LISTENERS + 1, what="every listener attached")
                # the talk; the stalled listener reads nothing more from here on
                for _ in range(TALK_S):
                    await speaker.send(pcm(1.0))
                    await asyncio.sleep(0.02)
                await wait_for(lambda: room.listeners == LISTENERS, within=10,
                               what="the stalled listener closed while the speaker talks")
                assert srv.rooms.registry.rooms.get(room_id) is room, "the talk goes on"
                await speaker.send(json.dumps({"type": "stop"}))
                await speaker_reads
                assert speaker.close_code == CloseCode.NORMAL
                await wait_for(lambda: all(_said_left(h) for h in heard), within=10,
                               what="speaker_left at every listener")
                for ws in good:
                    await ws.close()
                await asyncio.gather(*readers)
                with pytest.raises(ConnectionClosed):
                    while True:  # what it had not read, then the close
                        await asyncio.wait_for(stalled.recv(), 10)
                assert stalled.close_code == CloseCode.LISTENER_TOO_SLOW == 4012

    room_part = _room_messages(spoken)
    assert sum(isinstance(m, bytes) for m in room_part) >= TALK_S - 1, "speech was published"
    for messages in heard:
        assert _room_messages(messages) == room_part, (
            "every listener: the speaker's messages, the same bytes, in the same order")
    assert direct > 0, "the writer wrote directly to idle listeners"


def _said_left(messages: list[str | bytes]) -> bool:
    return any(isinstance(m, str) and '"speaker_left"' in m for m in messages)
