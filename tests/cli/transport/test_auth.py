"""Session tokens and the origin policy on a real server on loopback with a real
``websockets`` client: tokens in ``start``, the ``Authorization`` header and the query string;
accepted, expired, forged, missing; an origin refused."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from speechpipe.transport.auth import (
    TokenAuthority,
)
from speechpipe.transport.codes import CloseCode
from speechpipe.transport.limits import ServerLimits
from speechpipe.transport.websocket_server import SpeechServer
from tests.fakes import TickFactory
from tests.helpers import SECRET, errors, read_until_closed, recv_json, server_log

live = pytest.mark.asyncio(loop_scope="session")  # the loop the fixtures run in

AUTHORITY = TokenAuthority(SECRET)


def expired_token() -> str:
    return AUTHORITY.issue(ttl_s=60, subject="late", now=time.time() - 3600)


def forged_token() -> str:
    return TokenAuthority("another-secret-" + "y" * 40).issue(ttl_s=60)


# --------------------------------------------------------------------------- live server


def ws_url(srv: SpeechServer, query: str = "") -> str:
    return f"ws://127.0.0.1:{srv.port}/ws{query}"


@pytest.fixture
async def auth_server() -> Any:
    limits = ServerLimits(auth=AUTHORITY, start_timeout_s=3.0)
    async with SpeechServer(TickFactory(), port=0, limits=limits) as srv:
        yield srv


async def started_with(srv: SpeechServer, start: dict[str, Any], **connect_args: Any) -> None:
    async with connect(ws_url(srv, connect_args.pop("query", "")), **connect_args) as ws:
        await ws.send(json.dumps({"type": "start", **start}))
        event = await recv_json(ws)
        assert event["type"] == "started", event
        await ws.send(json.dumps({"type": "stop"}))
        await read_until_closed(ws)
        assert ws.close_code == CloseCode.NORMAL


async def refused_at_start(srv: SpeechServer, start: dict[str, Any]) -> dict[str, Any]:
    async with connect(ws_url(srv)) as ws:
        await ws.send(json.dumps({"type": "start", **start}))
        seen = await read_until_closed(ws)
        assert ws.close_code == CloseCode.UNAUTHORIZED
    (error,) = errors(seen)
    assert (error["code"], error["fatal"]) == ("unauthorized", True)
    return error


async def refused_at_upgrade(srv: SpeechServer, **connect_args: Any) -> int:
    with pytest.raises(InvalidStatus) as info:
        async with connect(ws_url(srv, connect_args.pop("query", "")), **connect_args):
            pass
    return int(info.value.response.status_code)


@live
async def test_token_accepted_in_start_header_and_query(
    auth_server: SpeechServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    tokens = [AUTHORITY.issue(ttl_s=60, subject=f"user{i}") for i in range(3)]
    await started_with(auth_server, {"token": tokens[0]})
    await started_with(auth_server, {},
                       additional_headers={"Authorization": f"Bearer {tokens[1]}"})
    await started_with(auth_server, {}, query=f"?token={tokens[2]}")
    # a header token wins; whatever start carries is then ignored
    await started_with(auth_server, {"token": "junk"},
                       additional_headers={"Authorization": f"Bearer {tokens[0]}"})
    logged = server_log(caplog.records)
    assert "started" in logged or "session" in logged  # DEBUG/INFO records were captured
    for token in tokens:  # never logged, not even its signature
        assert token.split(".")[2] not in logged and token not in logged


@live
async def test_expired_token_refused(auth_server: SpeechServer) -> None:
    token = expired_token()
    error = await refused_at_start(auth_server, {"token": token})
    assert error["message"] == "token expired"
    headers = {"Authorization": f"Bearer {token}"}
    assert await refused_at_upgrade(auth_server, additional_headers=headers) == 401
    assert await refused_at_upgrade(auth_server, query=f"?token={token}") == 401


@live
async def test_forged_token_refused(auth_server: SpeechServer) -> None:
    token = forged_token()
    error = await refused_at_start(auth_server, {"token": token})
    assert error["message"] == "missing or invalid token"
    assert await refused_at_upgrade(auth_server, query=f"?token={token}") == 401
    headers = {"Authorization": f"Bearer {token}"}
    assert await refused_at_upgrade(auth_server, additional_headers=headers) == 401
    assert await refused_at_upgrade(auth_server, additional_headers={"Authorization": "Basic x"}) \
        == 401


@live
async def test_missing_token_refused(auth_server: SpeechServer) -> None:
    await refused_at_start(auth_server, {})
    await refused_at_start(auth_server, {"token": None})
    assert not auth_server.gate.per_ip.counts  # refused connections gave their slot back


@live
async def test_origin_refused() -> None:
    async with SpeechServer(TickFactory(), port=0) as srv:  # default: same origin only
        assert await refused_at_upgrade(srv, origin="https://evil.example") == 403
        await started_with(srv, {}, origin=f"http://127.0.0.1:{srv.port}")
        await started_with(srv, {})  # no Origin: not a browser
    limits = ServerLimits(allowed_origins=("https://app.example",))
    async with SpeechServer(TickFactory(), port=0, limits=limits) as srv:
        await started_with(srv, {}, origin="https://app.example")
        assert await refused_at_upgrade(srv, origin=f"http://127.0.0.1:{srv.port}") == 403
