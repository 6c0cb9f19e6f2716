"""How a ``/ws`` connection ends: the close the server sends, and the cause the metrics get.

Whichever of a connection's tasks ends it raises ``Close`` (the core's ``Fail`` as an
exception: ``close_of``); the task group cancels the others and ``outcome`` picks the close
from what they raised: a deliberate close wins, then a client that left (no close to send);
a ``SpeechpipeError`` is an internal close (1011); anything else is re-raised. ``send_close``
sends the error event (if any) and the close frame; ``close_cause`` is the (code, reason) the
metrics count, including the closes the connection layer made itself (a flood, a client that
did not read, websockets' own).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Protocol

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from speechpipe.errors import SpeechpipeError
from speechpipe.transport.codes import CloseCode, ErrorCode
from speechpipe.transport.connection_core import Fail
from speechpipe.transport.frame_guard import GuardedConnection, Violation
from speechpipe.transport.protocol import dumps, encode_error

__all__ = ["Close", "close_of", "internal_error", "outcome", "violation", "close_cause",
           "send_close"]

log = logging.getLogger("speechpipe.server")


class Close(Exception):
    """Ends a connection: optionally sends an error event, then closes with ``code``."""

    def __init__(self, code: int, reason: str = "", error: dict[str, Any] | None = None) -> None:
        super().__init__(code, reason)
        self.code = code
        self.reason = reason
        self.error = error


class _ErrorCounter(Protocol):
    def error(self, code: str) -> None: ...


def close_of(action: Fail) -> Close:
    """The core's ``Fail`` as the exception that ends the connection's tasks."""
    return Close(action.code, action.reason, action.error)


def internal_error() -> Close:
    """An unexpected server error (1011)."""
    return Close(CloseCode.INTERNAL, ErrorCode.INTERNAL,
                 encode_error(ErrorCode.INTERNAL, "internal server error", fatal=True))


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def outcome(group: ExceptionGroup, label: str) -> Close | None:
    """Which close a failed task group calls for: a deliberate close wins, then a gone
    client; anything else is a server error (the original exception is re-raised)."""
    leaves = _leaves(group)
    for exc in leaves:
        if isinstance(exc, Close):
            return exc
    if any(isinstance(exc, ConnectionClosed) for exc in leaves):
        return None
    for exc in leaves:
        if isinstance(exc, SpeechpipeError):
            log.warning("session %s failed: %s", label, type(exc).__name__)
            return Close(
                CloseCode.INTERNAL, exc.code, encode_error(exc.code, str(exc), fatal=True)
            )
    raise group


def violation(ws: ServerConnection) -> Violation | None:
    """Why the connection layer ended this connection (flood, not reading), if it did."""
    return ws.violation if isinstance(ws, GuardedConnection) else None


_SENT_REASONS: dict[int, str] = {CloseCode.TOO_BIG: "message_too_big",
                                 CloseCode.NOT_READING: "not_reading",
                                 CloseCode.GOING_AWAY: "going_away"}


def close_cause(ws: ServerConnection, close: Close | None) -> tuple[int | None, str]:
    """(the close code the server sent or ``None`` if the client closed or vanished
    first, a short reason) for the metrics; the server's own codes only."""
    if close is not None:
        return close.code, close.reason or "closed"
    found = violation(ws)  # a flood (4008), or a client that did not read (1006)
    if found is not None:
        return found.close_code, found.code
    protocol = ws.protocol
    sent = protocol.close_sent
    if sent is not None and not protocol.close_rcvd_then_sent:
        return sent.code, _SENT_REASONS.get(sent.code, "closed")
    return None, "client_closed" if protocol.close_rcvd is not None else "connection_lost"


async def send_close(ws: ServerConnection, observer: _ErrorCounter, close: Close) -> None:
    """Send ``close``'s error event (counted), then close the socket with its code."""
    if close.error is not None:
        observer.error(close.error["code"])
        with contextlib.suppress(ConnectionClosed):
            await ws.send(dumps(close.error))
    await ws.close(close.code, close.reason[:120])
