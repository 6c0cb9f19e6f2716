"""Operations metrics: refusals and closes by code and reason, counted by a real server on
loopback with a real ``websockets`` client (scripted sessions: what is counted does not
depend on the models)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from speechpipe.server.metrics import ServerMetrics
from speechpipe.transport.auth import TokenAuthority
from speechpipe.transport.codes import CloseCode
from speechpipe.transport.limits import Quotas, ServerLimits
from speechpipe.transport.protocol import MAX_MESSAGE_BYTES
from speechpipe.transport.websocket_server import SpeechServer
from tests.fakes import FakeFactory
from tests.helpers import expect_close, pcm, start, wait_for

live = pytest.mark.asyncio(loop_scope="session")  # the loop the fixtures run in


def value(metrics: ServerMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
async def observed() -> AsyncIterator[tuple[SpeechServer, ServerMetrics, dict[str, bool]]]:
    metrics = ServerMetrics()
    ready = {"value": True}
    limits = ServerLimits(
        token="s3cret", start_timeout_s=1.0, max_lead_s=3.0,
        quotas=Quotas(max_idle_s=0.5),
    )
    srv = SpeechServer(FakeFactory(), port=0, is_ready=lambda: ready["value"],
                       metrics_text=metrics.text, observer=metrics, limits=limits)
    async with srv:
        yield srv, metrics, ready


def url(srv: SpeechServer, query: str = "") -> str:
    return f"ws://127.0.0.1:{srv.port}/ws{query}"


async def refused_at_upgrade(address: str, **kwargs: Any) -> int:
    with pytest.raises(InvalidStatus) as refused:
        async with connect(address, **kwargs):
            pass
    return refused.value.response.status_code


@live
async def test_every_refusal_and_close_is_counted_by_code_and_reason(
    observed: tuple[SpeechServer, ServerMetrics, dict[str, bool]],
) -> None:
    srv, metrics, ready = observed
    refusals = "speechpipe_refusals_total"
    closed = "speechpipe_connections_closed_total"
    # HTTP refusals at the upgrade: 401, 403, 503 (429 below)
    assert await refused_at_upgrade(url(srv, "?token=guess")) == 401
    assert await refused_at_upgrade(url(srv), origin="https://evil.example") == 403
    ready["value"] = False
    assert await refused_at_upgrade(url(srv)) == 503
    ready["value"] = True
    assert value(metrics, refusals, code="401", reason="unauthorized") == 1
    assert value(metrics, refusals, code="403", reason="origin_not_allowed") == 1
    assert value(metrics, refusals, code="503", reason="not_ready") == 1

    # closes before a session started are refusals too: 4004 (token), 4005 (no start), 1013
    async with connect(url(srv)) as ws:
        await ws.send(json.dumps({"type": "start", "token": "guess"}))
        await expect_close(ws)
        assert ws.close_code == CloseCode.UNAUTHORIZED
    async with connect(url(srv)) as ws:
        await expect_close(ws)
        assert ws.close_code == CloseCode.START_TIMEOUT
    async with connect(url(srv)) as ws:
        await ws.send(json.dumps({"type": "start", "token": "s3cret", "source_lang": "bsy"}))
        await expect_close(ws)
        assert ws.close_code == CloseCode.TRY_AGAIN
    await wait_for(lambda: not srv.connections)
    for code, reason in (("4004", "unauthorized"), ("4005", "start_timeout"),
                         ("1013", "over_capacity")):
        assert value(metrics, refusals, code=code, reason=reason) == 1, (code, reason)
        assert value(metrics, closed, code=code, reason=reason) == 1, (code, reason)

    # closes of running sessions are not refusals: 1009, 1008, 4007, 1000, a client's close
    async with connect(url(srv), max_size=None) as ws:
        await start(ws, token="s3cret")
        await ws.send(b"\x00" * (MAX_MESSAGE_BYTES + 2))
        await expect_close(ws)
        assert ws.close_code == CloseCode.TOO_BIG
    async with connect(url(srv)) as ws:
        await start(ws, token="s3cret")
        for _ in range(3):
            await ws.send(pcm(2.0))  # 6 s of audio at once: > 3 s ahead of real time
        await expect_close(ws)
        assert ws.close_code == CloseCode.POLICY
    async with connect(url(srv)) as ws:
        await start(ws, token="s3cret")
        await expect_close(ws)
        assert ws.close_code == CloseCode.IDLE_TIMEOUT
    async with connect(url(srv)) as ws:
        await start(ws, token="s3cret")
        await ws.send(json.dumps({"type": "stop"}))
        await expect_close(ws)
        assert ws.close_code == CloseCode.NORMAL
    async with connect(url(srv)) as ws:
        await start(ws, token="s3cret")
    await wait_for(lambda: not srv.connections)
    for code, reason in (("1009", "message_too_big"), ("1008", "too_fast"),
                         ("4007", "idle_timeout"), ("1000", "stopped"),
                         ("client", "client_closed")):
        assert value(metrics, closed, code=code, reason=reason) == 1, (code, reason)
        assert value(metrics, refusals, code=code, reason=reason) == 0, (code, reason)
    assert value(metrics, "speechpipe_sessions_closed_total", code="1009") == 1

    # 429 at the upgrade: the address already holds its 2 sessions (no idle limit here)
    limits = ServerLimits(quotas=Quotas(max_sessions_per_ip=2))
    async with SpeechServer(FakeFactory(), port=0, observer=metrics, limits=limits) as other:
        async with connect(url(other)) as first, connect(url(other)) as second:
            await start(first)
            await start(second)
            assert await refused_at_upgrade(url(other)) == 429
    assert value(metrics, refusals, code="429", reason="too_many_sessions") == 1

    # 4009: the token in 'start' already holds its one session
    authority = TokenAuthority("metrics-test-secret-" + "x" * 40)
    token = authority.issue(ttl_s=60)
    limits = ServerLimits(auth=authority, quotas=Quotas(max_sessions_per_token=1))
    async with SpeechServer(FakeFactory(), port=0, observer=metrics, limits=limits) as other:
        async with connect(url(other)) as holder:
            await start(holder, token=token)
            async with connect(url(other)) as ws:
                await ws.send(json.dumps({"type": "start", "token": token}))
                await expect_close(ws)
                assert ws.close_code == CloseCode.TOO_MANY_SESSIONS
    assert value(metrics, refusals, code="4009", reason="too_many_sessions") == 1

    # 4008 (rate limit) and 4006 (session length) end running sessions
    limits = ServerLimits(quotas=Quotas(messages_per_s=20, message_burst=30, max_session_s=0.5))
    async with SpeechServer(FakeFactory(), port=0, observer=metrics, limits=limits) as other:
        async with connect(url(other)) as ws:
            await start(ws)
            with pytest.raises(ConnectionClosed):  # tiny messages, far faster than allowed
                for _ in range(200):
                    await ws.send(b"\x00\x00")
                    await asyncio.sleep(0.001)
            await expect_close(ws)
            assert ws.close_code == CloseCode.RATE_LIMITED
        async with connect(url(other)) as ws:
            await start(ws)
            await ws.send(pcm(0.2))
            await expect_close(ws, within=10)
            assert ws.close_code == CloseCode.SESSION_EXPIRED
        await wait_for(lambda: not other.connections)
    for code, reason in (("4008", "rate_limited"), ("4006", "session_expired")):
        assert value(metrics, closed, code=code, reason=reason) == 1, (code, reason)
        assert value(metrics, refusals, code=code, reason=reason) == 0, (code, reason)
    exposition = metrics.text().decode()
    assert "process_resident_memory_bytes" in exposition
    assert "process_cpu_seconds_total" in exposition
