"""Quotas: the pure cores with explicit clocks (each limit tripping on a real server: the cli
tier)."""

from __future__ import annotations

import asyncio
import time

import pytest

from speechpipe.transport.codes import CloseCode, ErrorCode
from speechpipe.transport.limits import Quotas
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
