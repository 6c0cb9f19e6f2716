"""Clients that stop reading (issue 21, item 9) have their own close code, ``not_reading``
(4011), instead of ``too_slow`` (4010, audio falling behind) or 1011 (an internal error). Real
websockets clients on loopback, a real server; sessions are scripted: which code a client
gets does not depend on the models.

"Stops reading" is what a real client does when its application stops calling ``recv``: the
websockets library buffers ``max_queue`` messages, then stops reading the socket, so pings
go unanswered. The session below talks all the time (like a session speaking its
translation), so a client that stops reading fills its library's queue within a second."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from speechpipe.stages.frames import StatusEvent
from speechpipe.transport.codes import CloseCode
from speechpipe.transport.quotas import Quotas
from speechpipe.transport.websocket_server import ServerLimits, SpeechServer
from tests.fakes import Observed, TickSession
from tests.helpers import errors, pcm, read_until_closed, recv_json, wait_for

live = pytest.mark.asyncio(loop_scope="session")


class ChattySession(TickSession):
    """A session that sends an event every 10 ms whatever the client does."""

    async def __aenter__(self) -> ChattySession:
        await super().__aenter__()
        self.tasks.append(asyncio.create_task(self._chatter(), name="chatter"))
        return self

    async def _chatter(self) -> None:
        for _ in range(100_000):  # bounded: ~17 min, far beyond any test here
            await self.channel.put(StatusEvent("degraded", {"level": 0}))
            await asyncio.sleep(0.01)


def chatty(request: Any) -> ChattySession:
    return ChattySession(request)


def limits(**overrides: Any) -> ServerLimits:
    """Short windows so each case ends within seconds; keepalive off unless asked for."""
    base: dict[str, Any] = dict(
        quotas=Quotas(audio_window_s=1.0, min_audio_ratio=0.5, max_idle_s=None),
        ping_interval_s=None, ping_timeout_s=None, read_check_s=1.0, close_timeout_s=30.0,
    )
    base.update(overrides)
    return ServerLimits(**base)


async def _close_seen_later(ws: Any) -> tuple[list[dict[str, Any]], int | None]:
    """The client reads again: the error events and close code the server left for it."""
    seen = await read_until_closed(ws, within=30.0)
    return [e for e in errors(seen)], ws.close_code


@live
async def test_a_silent_client_that_stopped_reading_is_not_reading_not_too_slow() -> None:
    """The client starts, then neither reads nor sends: the audio pace deadline passes, the
    server's ping goes unanswered, and the cause is ``not_reading`` (4011)."""
    observed = Observed()
    async with SpeechServer(chatty, port=0, limits=limits(), observer=observed) as srv:
        async with connect(f"ws://127.0.0.1:{srv.port}/ws", max_queue=4) as ws:
            await ws.send(json.dumps({"type": "start"}))
            assert (await recv_json(ws))["type"] == "started"
            # the application stops reading (and sending) here
            await wait_for(lambda: bool({"not_reading", "too_slow"} & set(observed.errors)),
                           within=20.0, what="the server gave up on the client")
            errs, code = await _close_seen_later(ws)
    assert code == CloseCode.NOT_READING == 4011
    assert [e["code"] for e in errs] == ["not_reading"], errs
    assert "too_slow" not in observed.errors
    assert observed.connections == [(CloseCode.NOT_READING, "not_reading")]


@live
async def test_a_client_that_reads_but_sends_no_audio_is_still_too_slow() -> None:
    """The control: a client that keeps reading (it answers the ping) but sends no audio is
    ``too_slow`` (4010), as before."""
    observed = Observed()
    async with SpeechServer(chatty, port=0, limits=limits(), observer=observed) as srv:
        async with connect(f"ws://127.0.0.1:{srv.port}/ws") as ws:
            await ws.send(json.dumps({"type": "start"}))
            assert (await recv_json(ws))["type"] == "started"
            errs, code = await _close_seen_later(ws)
    assert code == CloseCode.TOO_SLOW
    assert [e["code"] for e in errs] == ["too_slow"], errs
    assert observed.connections == [(CloseCode.TOO_SLOW, "too_slow")]


@live
async def test_a_client_that_sends_audio_but_stopped_reading_is_not_reading() -> None:
    """Audio keeps coming at real time, so the pace rule holds; the keepalive finds that the
    client does not read and closes with ``not_reading`` (4011), not 1011."""
    observed = Observed()
    fast_keepalive = limits(ping_interval_s=0.5, ping_timeout_s=1.0)
    async with SpeechServer(chatty, port=0, limits=fast_keepalive, observer=observed) as srv:
        async with connect(f"ws://127.0.0.1:{srv.port}/ws", max_queue=4) as ws:
            await ws.send(json.dumps({"type": "start"}))
            assert (await recv_json(ws))["type"] == "started"
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            for i in range(1500):  # at most 30 s of real-time audio, never reading
                if srv.connections and all(
                    c.ws.protocol.close_sent is not None for c in srv.connections
                ) or not srv.connections:
                    break
                await asyncio.sleep(max(0.0, t0 + i * 0.02 - loop.time()))
                try:
                    await ws.send(pcm(0.02))
                except ConnectionClosed:
                    break
            else:
                raise AssertionError("the server never closed the non-reading client")
            _, code = await _close_seen_later(ws)
    assert code == CloseCode.NOT_READING
    assert ws.close_reason == "not_reading"
    assert observed.connections == [(CloseCode.NOT_READING, "not_reading")]
    assert "not_reading" in observed.errors
