"""The door of ``/ws``: origin, token and per-client session limits, in two steps.

1. ``check_upgrade`` runs in the HTTP handshake (``process_request``) and refuses cheaply:
   ``400`` for a malformed or repeated ``Origin``/``Host``, ``403`` for an origin not
   allowed, ``401`` for a bad token in the ``Authorization``
   header or the query string, ``429`` when the client's address (or token) already holds
   its maximum of sessions. Nothing is counted here: a handshake may still fail after it.
2. ``admit`` runs once the connection is open and counts it (strictly: concurrent handshakes
   that all passed step 1 are sorted out here, with ``too_many_sessions`` / close 4009).
   ``authorize`` checks the token of ``start`` when none came with the upgrade.
   ``release`` gives the slots back when the connection ends, however it ends.

Logs name codes and counts only: never a token, never the query string.
"""

from __future__ import annotations

import http
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from speechpipe.transport.auth import AuthError, Identity, OriginPolicy, TokenVerifier
from speechpipe.transport.auth import token_from_request as _token_from_request
from speechpipe.transport.codes import CloseCode, ErrorCode
from speechpipe.transport.hosts import HeaderError, single_header
from speechpipe.transport.limits import Quotas
from speechpipe.transport.protocol import ProtocolError
from speechpipe.transport.quotas import SessionCounter, quota_error

__all__ = ["AccessGate", "Admission"]

log = logging.getLogger("speechpipe.server")


@dataclass
class Admission:
    """What one connection holds: its address slot and (once known) its token slot."""

    ip: str | None
    identity: Identity | None = None
    ip_counted: bool = False
    token_counted: bool = False


def _refuse(status: int, message: str, extra: Iterable[tuple[str, str]] = ()) -> Response:
    body = (message + "\n").encode()
    headers = Headers(
        [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
            ("Connection", "close"),
            *extra,
        ]
    )
    return Response(status, http.HTTPStatus(status).phrase, headers, body)


class AccessGate:
    """Who may open a session: origin, token and connection quotas."""

    def __init__(
        self,
        *,
        verifier: TokenVerifier | None,
        origins: OriginPolicy,
        quotas: Quotas,
    ) -> None:
        self.verifier = verifier
        self.origins = origins
        self.quotas = quotas
        self.per_ip = SessionCounter(quotas.max_sessions_per_ip)
        self.per_token = SessionCounter(quotas.max_sessions_per_token)

    def client_ip(self, remote_address: object, headers: Headers) -> str | None:
        """The client's address: the socket peer, or the rightmost entry of the configured
        header (what the trusted proxy in front of us saw; clients can forge the others)."""
        name = self.quotas.client_ip_header
        if name:
            values = headers.get_all(name)  # repeated headers are one comma-separated list
            if values:
                return values[-1].split(",")[-1].strip()[:64] or None
        if isinstance(remote_address, tuple) and remote_address:
            return str(remote_address[0])
        return None

    def _identity_from_request(self, request: Request) -> Identity | None:
        """The verified identity of a header/query token; ``None`` when there is none.
        Raises ``AuthError`` for a bad one."""
        if self.verifier is None:
            return None
        token = _token_from_request(request.path, request.headers.raw_items())
        if token is None:
            return None
        return self.verifier.verify(token)

    # -- step 1: the HTTP handshake ---------------------------------------------------------
    def check_upgrade(self, remote_address: object, request: Request) -> Response | None:
        """None to accept a WebSocket upgrade, else the HTTP refusal."""
        headers = request.headers
        try:
            origin_ok = self.origins.allows(
                single_header(headers, "Origin"), single_header(headers, "Host")
            )
        except HeaderError as exc:
            log.info("upgrade refused: %s", exc)
            return _refuse(400, str(exc))
        if not origin_ok:
            log.info("upgrade refused: origin not allowed")
            return _refuse(403, "origin not allowed")
        try:
            identity = self._identity_from_request(request)
        except AuthError as exc:
            log.info("upgrade refused: %s", "token expired" if exc.expired else "invalid token")
            return _refuse(
                401, str(exc), [("WWW-Authenticate", 'Bearer error="invalid_token"')]
            )
        if self.per_ip.full(self.client_ip(remote_address, headers)):
            log.info("upgrade refused: too many sessions from one address")
            return _refuse(429, "too many sessions from this address", [("Retry-After", "5")])
        if (identity is not None and identity.role != "listener"
                and self.per_token.full(identity.key)):
            log.info("upgrade refused: too many sessions for one token")
            return _refuse(429, "too many sessions for this token", [("Retry-After", "5")])
        return None

    # -- step 2: the open connection --------------------------------------------------------
    def admit(self, remote_address: object, request: Request | None) -> Admission:
        """Count a new connection; raises a fatal ``ProtocolError`` (4009 / 4004)."""
        headers = request.headers if request is not None else Headers()
        admission = Admission(ip=self.client_ip(remote_address, headers))
        if not self.per_ip.acquire(admission.ip):
            raise quota_error(ErrorCode.TOO_MANY_SESSIONS, "too many sessions from this address")
        admission.ip_counted = True
        if request is None:
            return admission
        try:
            try:
                identity = self._identity_from_request(request)
            except AuthError as exc:  # it passed step 1; it may have expired since
                raise ProtocolError(
                    ErrorCode.UNAUTHORIZED, str(exc), close_code=CloseCode.UNAUTHORIZED
                ) from None
            if identity is not None:
                self._hold_token(admission, identity)
        except ProtocolError:
            self.release(admission)  # the caller never sees this admission
            raise
        return admission

    @property
    def tokens_required(self) -> bool:
        """Whether sessions need a token (a room refusal is then ``unauthorized``)."""
        return self.verifier is not None

    def authorize(self, admission: Admission, token: str | None) -> None:
        """Check ``start.token`` unless the upgrade already carried a valid token."""
        if self.verifier is None or admission.identity is not None:
            return
        try:
            identity = self.verifier.verify(token)
        except AuthError as exc:
            raise ProtocolError(
                ErrorCode.UNAUTHORIZED,
                "token expired" if exc.expired else "missing or invalid token",
                close_code=CloseCode.UNAUTHORIZED,
            ) from None
        self._hold_token(admission, identity)

    def _hold_token(self, admission: Admission, identity: Identity) -> None:
        if identity.role == "listener":  # one listener link is shared by a whole audience:
            admission.identity = identity  # listeners have their own limits (rooms)
            return
        if not self.per_token.acquire(identity.key):
            raise quota_error(ErrorCode.TOO_MANY_SESSIONS, "too many sessions for this token")
        admission.identity = identity
        admission.token_counted = True

    def seat_listener(self, admission: Admission | None) -> None:
        """A connection became a room listener: it stops counting against
        ``max_sessions_per_ip`` (an audience behind one address -- a venue's NAT -- is bounded
        by the rooms' listener limits and join rate instead; issue 74)."""
        if admission is not None and admission.ip_counted:
            self.per_ip.release(admission.ip)
            admission.ip_counted = False

    def release(self, admission: Admission | None) -> None:
        """Give back what an admitted connection held."""
        if admission is None:
            return
        if admission.ip_counted:
            self.per_ip.release(admission.ip)
            admission.ip_counted = False
        if admission.token_counted and admission.identity is not None:
            self.per_token.release(admission.identity.key)
            admission.token_counted = False
