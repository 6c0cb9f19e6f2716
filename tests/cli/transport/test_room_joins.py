"""Issue 46: over real sockets, the join limit is on by default and the speaker keeps going
through a flood."""

from __future__ import annotations

import asyncio
import json

import pytest
from websockets.asyncio.client import connect

from speechpipe.transport.codes import CloseCode, ErrorCode
from speechpipe.transport.limits import RoomOptions, ServerLimits
from speechpipe.transport.websocket_server import SpeechServer
from tests.fakes import TickFactory
from tests.helpers import pcm, read_until_closed, recv_json


async def _join(url: str, room: str, turn: object = None) -> dict[str, object]:
    """One listener join: ``started`` (then it leaves), or the refusal with its close code."""
    async with connect(url) as ws:
        await ws.send(json.dumps({"type": "start", "role": "listener", "room": room,
                                  **({"turn": turn} if turn else {})}))
        first = await recv_json(ws)
        if first["type"] != "started":
            await read_until_closed(ws)
            first["close_code"] = ws.close_code
        return first


@pytest.mark.asyncio(loop_scope="session")
async def test_the_limit_is_on_by_default_over_a_socket() -> None:
    """Joins from 127.0.0.1, one after another (each leaves again): the address's burst
    passes, the next join is refused with 4016 and a retry delay."""
    async with SpeechServer(TickFactory()) as srv:
        url = f"ws://127.0.0.1:{srv.port}/ws"
        async with connect(url) as speaker:
            await speaker.send(json.dumps({"type": "start", "role": "speaker"}))
            room = str((await recv_json(speaker))["room"])
            burst = RoomOptions().join_ip_burst
            answers = []
            for _ in range(3 * burst):  # the bucket refills as they go: bounded, not exact
                answers.append(await _join(url, room))
                if answers[-1]["type"] != "started":
                    break
            assert len(answers) > burst and answers[-1]["type"] == "error"
            last = answers[-1]
            assert last["code"] == ErrorCode.TOO_MANY_JOINS and last["fatal"] is True
            assert last["close_code"] == CloseCode.TOO_MANY_JOINS == 4016
            assert 0 < float(last["retry_after_s"]) <= 1 / RoomOptions().join_per_ip_s  # type: ignore[arg-type]


@pytest.mark.asyncio(loop_scope="session")
async def test_a_flood_is_refused_and_the_speaker_keeps_going() -> None:
    limits = ServerLimits(rooms=RoomOptions(join_per_ip_s=0, join_per_room_s=1,
                                            join_room_burst=3))
    async with SpeechServer(TickFactory(), limits=limits) as srv:
        url = f"ws://127.0.0.1:{srv.port}/ws"
        async with connect(url) as speaker:
            await speaker.send(json.dumps({"type": "start", "role": "speaker"}))
            room = str((await recv_json(speaker))["room"])
            flood = await asyncio.gather(*(_join(url, room) for _ in range(12)))
            admitted = [a for a in flood if a["type"] == "started"]
            refused = [a for a in flood if a["type"] != "started"]
            assert len(admitted) == 3 and len(refused) == 9
            for answer in refused:
                assert answer["code"] == "too_many_joins"
                assert answer["close_code"] == 4016
            # each refused listener is told its own turn: 1 s, 2 s, ... 9 s
            told = sorted(float(a["retry_after_s"]) for a in refused)  # type: ignore[arg-type]
            assert told == pytest.approx([k + 1.0 for k in range(9)], abs=0.05)
            assert len({a["turn"] for a in refused}) == 9
            # the speaker's session goes on: 1 s of audio gives its captions
            await speaker.send(pcm(1.0))
            seen = []
            async with asyncio.timeout(5):
                while not any(e.get("type") == "source" for e in seen):
                    seen.append(await recv_json(speaker))
            # and the first turn, brought back after its delay, passes; no turn: refused
            first = min(refused, key=lambda a: float(a["retry_after_s"]))  # type: ignore[arg-type]
            await asyncio.sleep(float(first["retry_after_s"]))  # type: ignore[arg-type]
            assert (await _join(url, room))["type"] == "error"
            assert (await _join(url, room, first["turn"]))["type"] == "started"
