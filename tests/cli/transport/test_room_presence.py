"""Issue 46: over a socket, participants see who joins and leaves, and a join storm sends a
few presence events, not one per listener."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from speechpipe.transport.room import (
    PRESENCE_EVERY_S,
)
from speechpipe.transport.websocket_server import SpeechServer
from tests.fakes import TickFactory
from tests.helpers import recv_json


async def _presence(ws: ClientConnection, want: Any, within: float = 5.0) -> dict[str, Any]:
    """Read ``ws`` until a ``presence`` event for which ``want`` holds."""
    async with asyncio.timeout(within):
        while True:
            event = await recv_json(ws, within)
            if event.get("type") == "presence" and want(event):
                return event


@pytest.mark.asyncio(loop_scope="session")
async def test_participants_see_who_joins_and_leaves_over_a_socket() -> None:
    async with SpeechServer(TickFactory()) as srv:
        url = f"ws://127.0.0.1:{srv.port}/ws"
        async with connect(url) as alice:
            await alice.send(json.dumps({"type": "start", "role": "participant",
                                         "target_lang": "en"}))
            started = await recv_json(alice)
            room, invite, me = started["room"], started["invite"], started["session"]
            first = await _presence(alice, lambda e: True)
            assert first["members"] == [{"session": me, "role": "participant",
                                         "target_lang": "en"}]
            assert first["listeners"] == 0
            async with connect(url) as bob:
                await bob.send(json.dumps({"type": "start", "role": "participant",
                                           "room": room, "invite": invite,
                                           "target_lang": "es"}))
                bob_id = (await recv_json(bob))["session"]
                listeners = [await connect(url) for _ in range(3)]
                for listener in listeners:
                    await listener.send(json.dumps({"type": "start", "role": "listener",
                                                    "room": room, "target_lang": "de"}))
                    assert (await recv_json(listener))["type"] == "started"
                for ws in (alice, bob):  # both see both, and three listeners
                    seen = await _presence(ws, lambda e: e["listeners"] == 3)
                    assert [(m["session"], m["target_lang"]) for m in seen["members"]] == [
                        (me, "en"), (bob_id, "es")]
                for listener in listeners:
                    await listener.close()
                assert (await _presence(bob, lambda e: e["listeners"] == 0))["members"]
            gone = await _presence(alice, lambda e: len(e["members"]) == 1)
            assert gone["members"][0]["session"] == me and gone["listeners"] == 0


@pytest.mark.asyncio(loop_scope="session")
async def test_a_join_storm_sends_a_few_presence_events_not_one_per_listener() -> None:
    async with SpeechServer(TickFactory()) as srv:
        url = f"ws://127.0.0.1:{srv.port}/ws"
        async with connect(url) as alice:
            await alice.send(json.dumps({"type": "start", "role": "participant"}))
            room = (await recv_json(alice))["room"]
            await _presence(alice, lambda e: True)
            listeners = [await connect(url) for _ in range(20)]
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            await asyncio.gather(*(ws.send(json.dumps({"type": "start", "role": "listener",
                                                       "room": room})) for ws in listeners))
            counts = []
            async with asyncio.timeout(5):
                while not counts or counts[-1] < 20:
                    counts.append((await _presence(alice, lambda e: True))["listeners"])
            took = loop.time() - t0
            assert len(counts) <= 2 + took / PRESENCE_EVERY_S  # throttled, not 20 events
            assert counts == sorted(counts)
            for ws in listeners:
                await ws.close()
