"""Session tokens and the origin policy: the pure pieces and the ``speechpipe token`` command
(over a real server on loopback: the cli tier)."""

from __future__ import annotations

import base64
import json
import time

import jwt
import pytest
from websockets.datastructures import Headers
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
from speechpipe.transport.limits import Quotas
from tests.helpers import SECRET

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
