"""Session tokens and the origin policy: the pure pieces, then a real server on loopback with
a real ``websockets`` client (tokens in ``start``, the ``Authorization`` header and the query
string; accepted, expired, forged, missing), and the ``speechpipe token`` command."""

from __future__ import annotations

import base64
import json
import logging
import time
from typing import Any

import jwt
import pytest
from websockets.asyncio.client import connect
from websockets.datastructures import Headers
from websockets.exceptions import InvalidStatus
from websockets.http11 import Request

from speechpipe.cli import main
from speechpipe.errors import InputError
from speechpipe.transport.auth import (
    AuthError,
    OriginPolicy,
    StaticToken,
    TokenAuthority,
    token_from_request,
)
from speechpipe.transport.codes import CloseCode
from speechpipe.transport.gate import AccessGate
from speechpipe.transport.limits import Quotas, ServerLimits
from speechpipe.transport.websocket_server import SpeechServer
from tests.fakes import TickFactory
from tests.helpers import SECRET, errors, read_until_closed, recv_json, server_log

live = pytest.mark.asyncio(loop_scope="session")  # the loop the fixtures run in

AUTHORITY = TokenAuthority(SECRET)


def expired_token() -> str:
    return AUTHORITY.issue(ttl_s=60, subject="late", now=time.time() - 3600)


def forged_token() -> str:
    return TokenAuthority("another-secret-" + "y" * 40).issue(ttl_s=60)


# --------------------------------------------------------------------------- pure


def test_issue_and_verify() -> None:
    token = AUTHORITY.issue(ttl_s=120, subject="alice")
    identity = AUTHORITY.verify(token)
    assert identity.subject == "alice"
    assert identity.key and identity.key.startswith("jti:")
    assert identity.expires_at == pytest.approx(time.time() + 120, abs=5)
    assert AUTHORITY.verify(AUTHORITY.issue(ttl_s=120)).key != identity.key  # one id per token


@pytest.mark.parametrize(
    "token",
    [None, "", "garbage", "a.b.c", "x" * 5000],
    ids=["none", "empty", "garbage", "three-parts", "huge"],
)
def test_malformed_or_missing_tokens_are_refused(token: str | None) -> None:
    with pytest.raises(AuthError) as info:
        AUTHORITY.verify(token)
    assert not info.value.expired


def test_expired_token() -> None:
    with pytest.raises(AuthError) as info:
        AUTHORITY.verify(expired_token())
    assert info.value.expired and str(info.value) == "token expired"


def test_forged_tokens() -> None:
    with pytest.raises(AuthError):
        AUTHORITY.verify(forged_token())
    # a valid token whose claims were edited (a longer life): the signature no longer fits
    header, payload, signature = AUTHORITY.issue(ttl_s=60).split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["exp"] += 10**6
    edited = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    with pytest.raises(AuthError):
        AUTHORITY.verify(f"{header}.{edited}.{signature}")
    # alg "none" (unsigned), and a token for another audience under the same secret
    unsigned = jwt.encode({"aud": "speechpipe", "iat": 0, "exp": 2**40}, None, algorithm="none")
    with pytest.raises(AuthError):
        AUTHORITY.verify(unsigned)
    other = jwt.encode({"aud": "billing", "iat": int(time.time()), "exp": 2**40}, SECRET,
                       algorithm="HS256")
    with pytest.raises(AuthError):
        AUTHORITY.verify(other)
    no_exp = jwt.encode({"aud": "speechpipe", "iat": int(time.time())}, SECRET, algorithm="HS256")
    with pytest.raises(AuthError):
        AUTHORITY.verify(no_exp)


def test_secret_must_be_long_and_is_never_shown() -> None:
    with pytest.raises(InputError):
        TokenAuthority("short")
    assert SECRET not in repr(AUTHORITY)
    assert "s3cret" not in repr(StaticToken("s3cret"))


def test_static_token() -> None:
    static = StaticToken("s3cret")
    assert static.verify("s3cret").key is None  # shared by everyone: not counted per token
    with pytest.raises(AuthError):
        static.verify("guess")


def test_token_from_request() -> None:
    assert token_from_request("/ws", [("Authorization", "Bearer abc")]) == "abc"
    assert token_from_request("/ws", [("authorization", "Basic abc")]) == ""
    assert token_from_request("/ws?x=1&token=q%2Bq", []) == "q+q"
    assert token_from_request("/ws?token=", []) == ""
    assert token_from_request("/ws", [("Host", "h")]) is None


def test_origin_policy() -> None:
    same = OriginPolicy()
    assert same.allows(None, "127.0.0.1:8765")  # not a browser
    assert same.allows("http://127.0.0.1:8765", "127.0.0.1:8765")
    assert same.allows("http://translate.example", "translate.example:80")  # default port
    # scheme and port count (issue 10 item 7); behind a TLS proxy, list the public origin
    assert not same.allows("https://translate.example", "translate.example")
    assert not same.allows("http://127.0.0.1:9999", "127.0.0.1:8765")
    assert not same.allows("https://127.0.0.1", "127.0.0.1:8765")
    assert not same.allows("https://127.0.0.1:8765", "127.0.0.1:8765")
    assert OriginPolicy(("https://translate.example",)).allows(
        "https://translate.example:443", "translate.example")
    assert not same.allows("https://evil.example", "127.0.0.1:8765")
    assert not same.allows("null", "127.0.0.1:8765")
    listed = OriginPolicy(("https://app.example",))
    assert listed.allows("https://app.example", "other")
    assert not listed.allows("http://app.example", "app.example")  # scheme matters
    assert OriginPolicy(("*",)).allows("https://anything.example", "h")


def test_gate_counts_tokens_and_addresses() -> None:
    gate = AccessGate(verifier=AUTHORITY, origins=OriginPolicy(),
                      quotas=Quotas(max_sessions_per_token=1, max_sessions_per_ip=2,
                                    client_ip_header="X-Forwarded-For"))
    token = AUTHORITY.issue(ttl_s=60)
    request = Request("/ws", Headers([("Authorization", f"Bearer {token}"),
                                      ("X-Forwarded-For", "203.0.113.9, 198.51.100.7")]))
    first = gate.admit(("127.0.0.1", 1), request)
    assert first.ip == "198.51.100.7"  # the proxy's own entry, not the client-supplied one
    assert gate.check_upgrade(("127.0.0.1", 2), request).status_code == 429  # token in use
    with pytest.raises(Exception) as info:
        gate.admit(("127.0.0.1", 2), request)  # a handshake that raced past the check
    assert getattr(info.value, "close_code", None) == CloseCode.TOO_MANY_SESSIONS
    assert gate.per_ip.counts == {"198.51.100.7": 1} and len(gate.per_token.counts) == 1
    gate.release(first)
    gate.release(first)  # idempotent
    assert gate.per_ip.counts == {} and gate.per_token.counts == {}


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


# --------------------------------------------------------------------------- speechpipe token


def test_token_command(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("SPEECHPIPE_AUTH_SECRET", SECRET)
    assert main(["token", "--ttl", "90", "--subject", "bob"]) == 0
    token = capsys.readouterr().out.strip()
    identity = AUTHORITY.verify(token)
    assert identity.subject == "bob"
    assert identity.expires_at == pytest.approx(time.time() + 90, abs=5)

    assert main(["token", "--new-secret"]) == 0
    assert len(capsys.readouterr().out.strip()) >= 32
    monkeypatch.delenv("SPEECHPIPE_AUTH_SECRET")
    assert main(["token"]) == 2
    assert "no secret" in capsys.readouterr().err
    assert main(["token", "--auth-secret", "short"]) == 2
