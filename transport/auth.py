"""Who may open a session: signed, expiring session tokens and the WebSocket origin policy.

Tokens are JSON Web Tokens signed with HMAC-SHA256 (PyJWT) under a secret the server and the
token issuer share (``speechpipe serve --auth-secret`` / ``speechpipe token``). A token says
who it was issued to (``sub``), when it expires (``exp``) and carries a random id (``jti``)
that the per-token session quota counts by. A token is checked when a session is opened;
a session that is running when its token expires goes on (the session-length quota ends it).

Where a token may travel (``token_from_request`` for the first two):

- ``Authorization: Bearer <token>`` on the HTTP upgrade (non-browser clients);
- ``/ws?token=<token>`` (browsers, which cannot set headers on a WebSocket);
- ``{"type": "start", "token": "..."}`` (browsers; keeps it out of URLs and proxy logs).

A bad token in a header or the query string is refused at the upgrade with HTTP 401; a bad
token in ``start`` closes the connection with 4004 (``docs/protocol.md``). Nothing here logs a
token, and the error messages never repeat one.

Pure: no sockets, no event loop (``issue`` takes ``now`` so tests can mint expired tokens).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from speechpipe.errors import InputError
from speechpipe.transport.hosts import WebOrigin, parse_host, parse_origin
from speechpipe.transport.identity import Identity, TokenVerifier

__all__ = [
    "AUDIENCE",
    "MIN_SECRET_BYTES",
    "AuthError",
    "Identity",
    "TokenVerifier",
    "TokenAuthority",
    "StaticToken",
    "OriginPolicy",
    "token_from_request",
    "new_secret",
]

AUDIENCE = "speechpipe"  # tokens for another service signed with the same secret do not pass
ALGORITHM = "HS256"
MIN_SECRET_BYTES = 32  # RFC 7518 3.2: an HS256 key at least as long as the hash
MAX_TOKEN_CHARS = 4096  # longer is not a token we issued; refused before any parsing
MAX_TTL_S = 366 * 24 * 3600  # a token that outlives a year is a secret, not a session grant


ROOM_ROLES = ("speaker", "listener", "participant")


class AuthError(InputError):
    """A token was missing, malformed, forged or expired. ``expired`` lets clients refresh."""

    code = "unauthorized"

    def __init__(self, message: str, *, expired: bool = False) -> None:
        super().__init__(message)
        self.expired = expired


def new_secret() -> str:
    """A fresh random secret (256 bits, URL-safe text) for ``--auth-secret``."""
    return secrets.token_urlsafe(32)


def _jwt() -> Any:
    try:
        import jwt
    except ImportError as exc:  # pragma: no cover - PyJWT is a declared dependency
        raise InputError("session tokens need PyJWT: pip install PyJWT") from exc
    return jwt


class TokenAuthority:
    """Issues and verifies HS256 session tokens under one shared secret."""

    def __init__(self, secret: str | bytes, *, leeway_s: float = 5.0) -> None:
        key = secret.encode() if isinstance(secret, str) else bytes(secret)
        if len(key) < MIN_SECRET_BYTES:
            raise InputError(
                f"the auth secret must be at least {MIN_SECRET_BYTES} bytes "
                "(make one with: speechpipe token --new-secret)"
            )
        self._key = key
        self.leeway_s = leeway_s  # clock skew between the issuer and this server
        _jwt()  # import PyJWT now, not on the event loop at the first session's token

    def __repr__(self) -> str:  # never show the secret
        return "TokenAuthority(secret=<hidden>)"

    def issue(self, *, ttl_s: float, subject: str = "", now: float | None = None,
              room: str | None = None, role: str | None = None) -> str:
        """A signed token for ``subject`` valid for ``ttl_s`` seconds (``room``/``role``:
        the rooms claims; a ``listener`` token cannot speak)."""
        if not (math.isfinite(ttl_s) and 0 < ttl_s <= MAX_TTL_S):
            raise InputError(f"a token's time to live must be a number of seconds above 0 and "
                             f"at most {MAX_TTL_S} (one year); got {ttl_s}")
        issued = int(time.time() if now is None else now)
        claims: dict[str, Any] = {
            "aud": AUDIENCE,
            "iat": issued,
            "exp": issued + max(1, round(ttl_s)),
            "jti": secrets.token_hex(8),
        }
        if subject:
            claims["sub"] = subject
        if room:
            claims["room"] = room
        if role:
            if role not in ROOM_ROLES:
                raise InputError(f"role must be one of {', '.join(ROOM_ROLES)}")
            claims["role"] = role
        return str(_jwt().encode(claims, self._key, algorithm=ALGORITHM))

    def verify(self, token: str | None) -> Identity:
        """The identity a valid token grants; raises ``AuthError`` otherwise."""
        if not token:
            raise AuthError("a session token is required")
        if len(token) > MAX_TOKEN_CHARS:
            raise AuthError("invalid token")
        jwt = _jwt()
        try:
            claims = jwt.decode(
                token, self._key, algorithms=[ALGORITHM], audience=AUDIENCE,
                leeway=self.leeway_s, options={"require": ["exp", "iat", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise AuthError("token expired", expired=True) from None
        except (jwt.InvalidTokenError, ValueError, TypeError, KeyError):
            raise AuthError("invalid token") from None
        jti = claims.get("jti")
        key = f"jti:{jti}" if isinstance(jti, str) and jti else _digest(token)
        subject = claims.get("sub")
        room, role = claims.get("room"), claims.get("role")
        if not (room is None or isinstance(room, str)) or not (role is None
                                                               or role in ROOM_ROLES):
            raise AuthError("invalid token")
        return Identity(
            key=key,
            subject=subject if isinstance(subject, str) else "",
            expires_at=float(claims["exp"]),
            room=room or None,
            role=role or None,
        )


class StaticToken:
    """One shared token (the older ``--token`` flag): compared in constant time."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    def __repr__(self) -> str:
        return "StaticToken(<hidden>)"

    def verify(self, token: str | None) -> Identity:
        """The identity for the one shared token; raises ``AuthError`` otherwise."""
        if not token:
            raise AuthError("a session token is required")
        if not hmac.compare_digest(self._token, token.encode()):
            raise AuthError("invalid token")
        return Identity(key=None)


def _digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()[:32]


def token_from_request(path: str, headers: Iterable[tuple[str, str]]) -> str | None:
    """The token of an HTTP upgrade: ``Authorization: Bearer`` first, then ``?token=``.

    Returns ``""`` for a present but empty/malformed one (refused), ``None`` for none.
    """
    for name, value in headers:
        if name.lower() == "authorization":
            scheme, _, credentials = value.strip().partition(" ")
            if scheme.lower() != "bearer":
                return ""
            return credentials.strip()
    _, _, query = path.partition("?")
    if query:
        values = urllib.parse.parse_qs(query, keep_blank_values=True).get("token")
        if values is not None:
            return values[0]
    return None


@dataclass(frozen=True, slots=True)
class OriginPolicy:
    """Which web pages may open a WebSocket session (cross-site WebSocket hijacking guard).

    Browsers always send ``Origin``; other clients usually send none, and are let through
    (they are not a browser page acting for a user; tokens still apply).

    - ``allowed`` empty (the default): same origin only: the ``Origin`` must be
      ``http://`` + the ``Host`` the request was sent to, scheme, host and port alike (the
      demo page served by this server passes; behind a TLS proxy, list the public origin);
    - ``allowed`` lists exact origins (``https://example.com``; scheme, host and port are
      compared, a default port may be left out); ``*`` lets any origin in.

    ``allows`` raises ``transport.hosts.HeaderError`` for a malformed ``Origin`` or ``Host``.
    """

    allowed: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for origin in self.allowed:  # fail at start-up, not per request
            if origin.strip() != "*":
                parse_origin(origin)

    def allows(self, origin: str | None, host: str | None) -> bool:
        """True when a page from ``origin`` may open sessions on ``host``."""
        if origin is None:
            return True
        parsed = parse_origin(origin)
        if any(o.strip() == "*" for o in self.allowed):
            return True
        if self.allowed:
            return parsed is not None and parsed in {
                parse_origin(o) for o in self.allowed
            }
        if parsed is None or not host:
            return False
        name, port = parse_host(host)
        return parsed == WebOrigin("http", name, port if port is not None else 80)
