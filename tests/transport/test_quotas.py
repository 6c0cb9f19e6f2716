"""Quotas: the pure cores with explicit clocks, then each limit tripping on a real server on
loopback with its documented error and close code (sessions are scripted fakes: the limits
do not depend on what the models say)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from speechpipe.transport.auth import TokenAuthority
from speechpipe.transport.codes import CloseCode, ErrorCode
from speechpipe.transport.limits import Quotas, ServerLimits
from speechpipe.transport.protocol import ProtocolError
from speechpipe.transport.quotas import (
    EXPIRED,
    Deadline,
    QuotaGuard,
    SessionCounter,
    SessionTimers,
    TokenBucket,
    check_sdp_size,
    quota_error,
)
from speechpipe.transport.websocket_server import SpeechServer
from tests.fakes import TickFactory
from tests.helpers import SECRET, errors, pcm, read_until_closed, recv_json, wait_for

live = pytest.mark.asyncio(loop_scope="session")  # the loop the fixtures run in

# --------------------------------------------------------------------------- pure cores


def test_token_bucket_allows_the_burst_then_the_rate() -> None:
    bucket = TokenBucket(rate=10, burst=5)
    assert all(bucket.take(0.0) for _ in range(5))
    assert not bucket.take(0.0)
    assert bucket.take(0.1) and not bucket.take(0.1)  # 0.1 s refills one
    assert sum(bucket.take(10.0) for _ in range(100)) == 5  # never more than the burst


def test_timers_idle_expiry_and_grace() -> None:
    q = Quotas(max_session_s=100, max_idle_s=10, expire_grace_s=5, audio_window_s=None)
    timers = SessionTimers(q, last_active=0.0)
    assert timers.next_deadline(stopping=False) is None  # before start: the start timeout
    timers.begin(0.0)
    assert timers.next_deadline(stopping=False) == (10.0, Deadline.IDLE)
    assert timers.due(9.9, stopping=False) is None
    assert timers.due(10.0, stopping=False) is Deadline.IDLE
    assert timers.due(10.0, stopping=True) is None  # after stop, idling is the server's
    for t in range(0, 100, 5):
        timers.touch(float(t))
    assert timers.due(100.0, stopping=False) is Deadline.EXPIRE
    timers.expired_at = 100.0
    assert timers.next_deadline(stopping=True) == (105.0, Deadline.GRACE_OVER)
    assert timers.due(105.0, stopping=True) is Deadline.GRACE_OVER
    off = SessionTimers(Quotas(max_session_s=None, max_idle_s=None, audio_window_s=None),
                        last_active=0.0)
    off.begin(0.0)
    assert off.next_deadline(stopping=False) is None
    paced = SessionTimers(Quotas(max_session_s=None, max_idle_s=None), last_active=0.0)
    paced.begin(0.0)  # the audio pace rule (on by default): one window without audio
    assert paced.next_deadline(stopping=False) == (20.0, Deadline.TOO_SLOW)
    assert paced.next_deadline(stopping=True) is None  # after stop no audio is expected


def test_session_counter() -> None:
    counter = SessionCounter(2)
    assert counter.acquire("a") and counter.acquire("a") and not counter.acquire("a")
    assert counter.acquire("b") and counter.acquire(None)  # None: not counted
    counter.release("a")
    assert counter.acquire("a")
    for _ in range(5):
        counter.release("a")
        counter.release("zzz")
    assert counter.counts == {"b": 1}
    assert SessionCounter(None).acquire("x") and not SessionCounter(None).full("x")


def test_sdp_size_and_quota_errors() -> None:
    check_sdp_size("v=0\r\n" * 10, 100)
    with pytest.raises(ProtocolError) as info:
        check_sdp_size("é" * 60, 100)  # bytes, not characters
    assert info.value.code == ErrorCode.SDP_TOO_LARGE and not info.value.fatal
    assert quota_error(ErrorCode.RATE_LIMITED, "x").close_code == CloseCode.RATE_LIMITED
    assert quota_error(ErrorCode.IDLE_TIMEOUT, "x").close_code == CloseCode.IDLE_TIMEOUT


def test_quota_guard_shell() -> None:
    """The async shell on short real deadlines: rate limit; idle, where WebRTC activity
    counts as input; expiry, then the grace period."""

    async def message() -> str:
        return "m"

    async def never() -> str:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def scenario() -> None:
        guard = QuotaGuard(Quotas(max_session_s=0.4, max_idle_s=0.1, expire_grace_s=0.1,
                                  messages_per_s=1, message_burst=2))
        guard.begin_session()
        assert await guard.recv(message) == "m"
        assert await guard.recv(message) == "m"
        with pytest.raises(ProtocolError) as info:
            await guard.recv(message)  # a third at once: over the burst
        assert (info.value.code, info.value.close_code) == ("rate_limited", 4008)
        frames = iter(range(1, 10**6))  # WebRTC audio keeps arriving: not idle
        assert await guard.recv(never, activity=lambda: next(frames)) is EXPIRED
        assert guard.expired
        with pytest.raises(ProtocolError) as info:
            await guard.recv(never, stopping=True)  # finishing took longer than the grace
        assert (info.value.code, info.value.close_code) == ("session_expired", 4006)

        idle = QuotaGuard(Quotas(max_idle_s=0.1))
        idle.begin_session()
        t0 = time.monotonic()
        with pytest.raises(ProtocolError) as info:
            await idle.recv(never, activity=lambda: 0)
        assert (info.value.code, info.value.close_code) == ("idle_timeout", 4007)
        assert 0.08 < time.monotonic() - t0 < 1.0

    asyncio.run(asyncio.wait_for(scenario(), 10))


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
