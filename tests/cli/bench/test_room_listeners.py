"""``bench room``'s lean listeners (``speechpipe.bench.room_listeners``): against a real
websockets server on 127.0.0.1 they speak ``listen_room``'s protocol, keep every message in
order with its read time and the kernel's receive time (real, not invented), answer the
server's pings and close cleanly; a refusal and a server that never closes end them, bounded."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

from speechpipe.bench.room_listeners import run_listeners
from speechpipe.transport.client import ListenerRun

SOURCE = {"type": "source", "utterance": 0, "committed": "hola", "tentative": "", "final": True}
HEADER = {"type": "audio", "utterance": 0, "samples": 4, "sample_rate": 16000}
PCM = bytes([1, 0, 255, 127, 0, 128, 7, 9])
TARGET = {"type": "target", "utterance": 0, "committed": "hello", "tentative": "", "final": True}
LISTENERS = 3


async def listen_against(handler: Callable[[ServerConnection], Awaitable[None]],
                         stop: threading.Event, **options: Any) -> list[ListenerRun]:
    """Serve ``handler`` on 127.0.0.1 and run ``LISTENERS`` lean listeners against it in a
    thread (they block); bounded."""
    async with serve(handler, "127.0.0.1", 0, ping_interval=None, compression=None) as server:
        port = server.sockets[0].getsockname()[1]
        return await asyncio.wait_for(asyncio.to_thread(
            run_listeners, f"ws://127.0.0.1:{port}/ws", "r1", LISTENERS, stop=stop.is_set,
            limit_s=20, open_timeout_s=10, **options), 30)


@pytest.mark.asyncio(loop_scope="session")
async def test_lean_listeners_hear_everything_in_order_with_kernel_receive_times() -> None:
    stop = threading.Event()
    seen: dict[str, list[Any]] = {"starts": [], "pongs": [], "stops": [], "closed": []}

    async def handler(ws: ServerConnection) -> None:
        seen["starts"].append(json.loads(await ws.recv()))
        await ws.send(json.dumps({"type": "started", "role": "listener", "room": "r1"}))
        for message in (json.dumps(SOURCE), json.dumps(HEADER), PCM, json.dumps(TARGET)):
            await ws.send(message)
        await asyncio.wait_for(await ws.ping(), 5)  # the listener's protocol answered it
        seen["pongs"].append(True)
        if len(seen["pongs"]) == LISTENERS:
            stop.set()
        seen["stops"].append(json.loads(await asyncio.wait_for(ws.recv(), 5)))
        await ws.close()  # 1000
        seen["closed"].append(ws.close_code)

    wall_minus_monotonic = time.time() - time.monotonic()
    before = time.time()
    runs = await listen_against(handler, stop)
    after = time.time()

    assert seen["starts"] == [{"type": "start", "role": "listener", "room": "r1"}] * LISTENERS
    assert len(seen["pongs"]) == LISTENERS
    assert seen["stops"] == [{"type": "stop"}] * LISTENERS
    assert seen["closed"] == [1000] * LISTENERS
    for run in runs:
        assert run.started["type"] == "started" and run.error == ""
        assert run.close_code == 1000
        assert [e for _, e in run.events] == [SOURCE, HEADER, TARGET]
        assert [(h, pcm) for _, h, pcm in run.audio] == [(HEADER, PCM)]
        # on the wire: source, header, PCM, target
        arrivals = [run.arrived[0], run.arrived[1], run.audio_arrived[0], run.arrived[2]]
        reads = [run.events[0][0], run.events[1][0], run.audio[0][0], run.events[2][0]]
        assert all(math.isfinite(t) for t in arrivals)
        assert arrivals == sorted(arrivals), "non-decreasing per listener"
        for arrived, read in zip(arrivals, reads, strict=True):
            read_wall = read + wall_minus_monotonic
            assert before <= arrived <= after
            assert read_wall - 1.0 < arrived <= read_wall + 1e-3, "before it was read"


@pytest.mark.asyncio(loop_scope="session")
async def test_a_refusal_is_reported_once_with_its_code_and_the_close() -> None:
    async def handler(ws: ServerConnection) -> None:
        await ws.recv()
        await ws.send(json.dumps({"type": "error", "code": "room_not_found", "fatal": True}))
        await ws.close(4004, "room_not_found")

    joined: list[ListenerRun] = []
    runs = await listen_against(handler, threading.Event(), on_joined=joined.append)
    assert len(joined) == LISTENERS and all(r in runs for r in joined)
    for run in runs:
        assert not run.started and run.error == "room_not_found" and run.close_code == 4004
        assert not run.events and not run.arrived


@pytest.mark.asyncio(loop_scope="session")
async def test_a_server_that_never_closes_is_left_after_the_close_timeout() -> None:
    stop = threading.Event()

    async def handler(ws: ServerConnection) -> None:
        await ws.recv()
        await ws.send(json.dumps({"type": "started"}))
        stop.set()
        await ws.recv()  # the stop, never answered
        await asyncio.wait_for(ws.wait_closed(), 10)  # until the listener gives up

    t0 = time.monotonic()
    runs = await listen_against(handler, stop, close_timeout_s=0.3)
    assert time.monotonic() - t0 < 5
    assert all(r.started and r.close_code is None and "no close" in r.error for r in runs)
