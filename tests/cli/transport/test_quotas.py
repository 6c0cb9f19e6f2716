"""Quotas: each limit tripping on a real server on loopback with its documented error and
close code (sessions are scripted fakes: the limits do not depend on what the models say)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from speechpipe.transport.auth import TokenAuthority
from speechpipe.transport.codes import CloseCode
from speechpipe.transport.limits import Quotas, ServerLimits
from speechpipe.transport.websocket_server import SpeechServer
from tests.fakes import TickFactory
from tests.helpers import SECRET, errors, pcm, read_until_closed, recv_json, wait_for

live = pytest.mark.asyncio(loop_scope="session")  # the loop the fixtures run in


# --------------------------------------------------------------------------- live server


def ws_url(srv: SpeechServer) -> str:
    return f"ws://127.0.0.1:{srv.port}/ws"


async def start(ws: ClientConnection, **fields: Any) -> None:
    await ws.send(json.dumps({"type": "start", "sample_rate": 16000, **fields}))
    event = await recv_json(ws)
    assert event["type"] == "started", event


def limits(**quota_fields: Any) -> ServerLimits:
    return ServerLimits(quotas=Quotas(**quota_fields), start_timeout_s=3.0)


def the_error(seen: list[Any]) -> dict[str, Any]:
    found = errors(seen)
    assert found, seen
    return found[-1]


@live
async def test_rate_limit_trips() -> None:
    factory = TickFactory()
    async with SpeechServer(factory, port=0, limits=limits(messages_per_s=20, message_burst=30)) \
            as srv, connect(ws_url(srv)) as ws:
        await start(ws)
        with pytest.raises(ConnectionClosed):  # tiny messages, far faster than allowed
            for _ in range(200):
                await ws.send(b"\x00\x00")
                await asyncio.sleep(0.001)
        seen = await read_until_closed(ws)
        assert ws.close_code == CloseCode.RATE_LIMITED
        error = the_error(seen)
        assert (error["code"], error["fatal"]) == ("rate_limited", True)
        await wait_for(lambda: factory.sessions[0].exited, what="session freed")


@live
async def test_steady_real_time_audio_is_within_the_rate_limit() -> None:
    async with SpeechServer(TickFactory(), port=0, limits=limits(messages_per_s=60,
                                                                 message_burst=20)) as srv:
        async with connect(ws_url(srv)) as ws:
            await start(ws)
            t0 = time.monotonic()
            for i in range(60):  # 1.2 s of 20 ms frames at real-time pace: 50 messages/s
                await asyncio.sleep(max(0.0, t0 + i * 0.02 - time.monotonic()))
                await ws.send(pcm(0.02))
            await ws.send(json.dumps({"type": "stop"}))
            seen = await read_until_closed(ws)
            assert ws.close_code == CloseCode.NORMAL and not errors(seen)


@live
async def test_idle_timeout_trips() -> None:
    factory = TickFactory()
    async with SpeechServer(factory, port=0, limits=limits(max_idle_s=0.5)) as srv:
        async with connect(ws_url(srv)) as ws:
            await start(ws)
            await ws.send(pcm(0.1))
            t0 = time.monotonic()
            seen = await read_until_closed(ws, within=5)
            assert ws.close_code == CloseCode.IDLE_TIMEOUT
            assert 0.3 < time.monotonic() - t0 < 3.0
        error = the_error(seen)
        assert (error["code"], error["fatal"]) == ("idle_timeout", True)
        await wait_for(lambda: factory.sessions[0].exited, what="session freed")


@live
async def test_session_length_ends_gracefully_with_4006() -> None:
    async with SpeechServer(TickFactory(), port=0, limits=limits(max_session_s=1.5)) as srv:
        async with connect(ws_url(srv)) as ws:
            await start(ws)
            t0 = time.monotonic()

            async def talk() -> None:  # keeps talking past the limit, as a live speaker would
                for i in range(150):
                    await asyncio.sleep(max(0.0, t0 + i * 0.02 - time.monotonic()))
                    try:
                        await ws.send(pcm(0.02))
                    except ConnectionClosed:
                        return

            talker = asyncio.create_task(talk())
            seen = await read_until_closed(ws, within=10)
            await talker
            assert ws.close_code == CloseCode.SESSION_EXPIRED
    kinds = [m["type"] for m in seen if isinstance(m, dict)]
    expired = next(e for e in errors(seen) if e["code"] == "session_expired")
    assert expired["fatal"] is False  # the session finishes: nothing promised is lost
    assert "target" in kinds and "utterance_end" in kinds and kinds[-1] == "end"
    assert kinds.index("utterance_end") > kinds.index("error")


@live
async def test_session_that_cannot_finish_is_closed_after_the_grace() -> None:
    factory = TickFactory(hang=True)
    quotas = {"max_session_s": 0.5, "expire_grace_s": 0.5, "max_idle_s": None}
    async with SpeechServer(factory, port=0, limits=limits(**quotas)) as srv:
        async with connect(ws_url(srv)) as ws:
            await start(ws)
            seen = await read_until_closed(ws, within=5)
            assert ws.close_code == CloseCode.SESSION_EXPIRED
        codes = [(e["code"], e["fatal"]) for e in errors(seen)]
        assert codes == [("session_expired", False), ("session_expired", True)]
        await wait_for(lambda: factory.sessions[0].exited, what="session freed")


@live
async def test_message_size_limit_trips() -> None:
    async with SpeechServer(TickFactory(), port=0,
                            limits=ServerLimits(max_message_bytes=4096)) as srv:
        async with connect(ws_url(srv), max_size=None) as ws:
            await start(ws)
            await ws.send(pcm(0.1))  # 3200 bytes: fine
            await ws.send(b"\x00" * 8192)
            await read_until_closed(ws)
            assert ws.close_code == CloseCode.TOO_BIG


@live
async def test_sdp_size_limit_trips() -> None:
    async with SpeechServer(TickFactory(), port=0, limits=limits(max_sdp_bytes=1000)) as srv:
        async with connect(ws_url(srv)) as ws:
            await start(ws)
            await ws.send(json.dumps({"type": "offer", "sdp": "v=0\r\n" + "a=x\r\n" * 400}))
            error = await recv_json(ws)
            assert (error["code"], error["fatal"]) == ("sdp_too_large", False)
            assert all(conn.peer is None for conn in srv.connections)
            await ws.send(pcm(1.0))  # the session goes on
            await ws.send(json.dumps({"type": "stop"}))
            seen = await read_until_closed(ws)
            assert ws.close_code == CloseCode.NORMAL and not errors(seen)


@live
async def test_sessions_per_ip_limit_trips() -> None:
    async with SpeechServer(TickFactory(), port=0, limits=limits(max_sessions_per_ip=2)) as srv:
        first = await connect(ws_url(srv))
        second = await connect(ws_url(srv))
        await start(first)
        await wait_for(lambda: srv.gate.per_ip.counts.get("127.0.0.1") == 2)
        with pytest.raises(InvalidStatus) as info:
            await connect(ws_url(srv))
        assert info.value.response.status_code == 429
        assert info.value.response.headers["Retry-After"] == "5"
        await first.close()
        await wait_for(lambda: srv.gate.per_ip.counts.get("127.0.0.1") == 1)
        async with connect(ws_url(srv)) as third:  # a slot freed: welcome again
            await start(third)
        await second.close()
        await wait_for(lambda: not srv.gate.per_ip.counts, what="every slot given back")


@live
async def test_sessions_per_ip_limit_when_many_connect_at_once() -> None:
    """Handshakes that all pass the HTTP check before any is counted: the surplus is closed
    with 4009 right after the upgrade."""
    async with SpeechServer(TickFactory(), port=0, limits=limits(max_sessions_per_ip=3)) as srv:
        outcomes: list[Any] = []

        async def one() -> None:
            try:
                async with connect(ws_url(srv)) as ws:
                    await ws.send(json.dumps({"type": "start"}))
                    message = json.loads(await asyncio.wait_for(ws.recv(), 5))
                    outcomes.append(message.get("code") or message["type"])
                    await asyncio.sleep(0.5)  # hold the session while the others arrive
            except InvalidStatus as exc:
                outcomes.append(exc.response.status_code)
            except ConnectionClosed as exc:
                outcomes.append(exc.rcvd.code if exc.rcvd else None)

        await asyncio.gather(*(one() for _ in range(8)))
        assert outcomes.count("started") == 3, outcomes
        assert all(o in ("started", 429, "too_many_sessions") for o in outcomes), outcomes
        await wait_for(lambda: not srv.gate.per_ip.counts, what="every slot given back")


@live
async def test_sessions_per_token_limit_trips() -> None:
    authority = TokenAuthority(SECRET)
    token = authority.issue(ttl_s=60)
    quota = limits(max_sessions_per_token=1)
    async with SpeechServer(TickFactory(), port=0,
                            limits=ServerLimits(auth=authority, quotas=quota.quotas)) as srv:
        async with connect(ws_url(srv)) as holder:
            await start(holder, token=token)
            async with connect(ws_url(srv)) as ws:  # the same token in start: 4009
                await ws.send(json.dumps({"type": "start", "token": token}))
                seen = await read_until_closed(ws)
                assert ws.close_code == CloseCode.TOO_MANY_SESSIONS
                assert (the_error(seen)["code"], the_error(seen)["fatal"]) == (
                    "too_many_sessions", True)
            with pytest.raises(InvalidStatus) as info:  # in the header: refused at the upgrade
                await connect(ws_url(srv), additional_headers={"Authorization": f"Bearer {token}"})
            assert info.value.response.status_code == 429
            async with connect(ws_url(srv)) as other:  # another token is another client
                await start(other, token=authority.issue(ttl_s=60))
        await wait_for(lambda: not srv.gate.per_token.counts, what="token slots given back")
        async with connect(ws_url(srv)) as again:
            await start(again, token=token)
