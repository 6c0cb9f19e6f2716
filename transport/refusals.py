"""The closes that refuse or end a ``/ws`` connection, as the connection core returns them.

``Fail`` is the core's "end the connection" action: the close code, a short reason (the
metrics' label) and the ``error`` event sent first (None: none, e.g. to a listener that does
not read). The constructors below build each kind of refusal by the code table
(``transport.codes``): a fatal protocol error, a room refusal, a cluster redirect, listeners
joining too fast, a listener too slow, a start the capacity gate or the session factory
refused. ``transport.connection_core`` names them all; the shell raises a ``Fail`` as
``transport.closing.Close``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from speechpipe.errors import AdmissionError, SessionRedirect, SpeechpipeError
from speechpipe.transport.codes import CloseCode, ErrorCode, refusal_close
from speechpipe.transport.protocol import ProtocolError, encode_error

__all__ = ["Fail", "fail", "room_refusal", "room_redirect", "too_many_joins",
           "listener_too_slow", "session_refused"]


@dataclass(frozen=True, slots=True)
class Fail:
    """End the connection: send ``error`` (if any), then close with ``code``."""
    code: int
    reason: str
    error: dict[str, Any] | None = None


def fail(exc: ProtocolError, code: int | None = None) -> Fail:
    """A fatal protocol error as the close that ends the connection (its own close code,
    else ``code``, else 1008)."""
    close = code if code is not None else (exc.close_code or CloseCode.POLICY)
    return Fail(close, exc.code, encode_error(exc.code, str(exc), fatal=True))


def room_refusal(code: str, message: str, **detail: Any) -> Fail:
    """A room refusal (``RoomError``'s ``code``, message and detail) as its close: the close
    code of its row in the code table (``no_room``, 4014, for a code that has none)."""
    row = ErrorCode.lookup(code) or ErrorCode.NO_ROOM
    return Fail(row.close or CloseCode.NO_ROOM, row,
                encode_error(row, message, fatal=True, **detail))


def room_redirect(url: str) -> Fail:
    """Cluster mode: the room lives on another node, at ``url`` (4020)."""
    return Fail(CloseCode.REDIRECT, ErrorCode.REDIRECT, encode_error(
        ErrorCode.REDIRECT, "this room is on another node: reconnect there with the "
        "same start", fatal=True, url=url, ticket=None, expires_in_s=None))


def too_many_joins(retry_s: float, turn: str | None = None) -> Fail:
    """Listeners join this room (or from this address) too fast: retry after ``retry_s``,
    rounded up to a hundredth, so a wait of a few milliseconds is never told as 0 (a client
    that retried at once would be refused again), with ``turn`` (the turn booked for this
    listener, for its next ``start``; None: none booked, the line is full)."""
    return room_refusal(ErrorCode.TOO_MANY_JOINS, "many listeners are joining: waiting to "
                        "join; try again after retry_after_s with this turn",
                        retry_after_s=math.ceil(round(retry_s * 100, 6)) / 100, turn=turn)


def listener_too_slow() -> Fail:
    """A listening member's outbox overflowed (no error event: it does not read)."""
    return Fail(CloseCode.LISTENER_TOO_SLOW, ErrorCode.LISTENER_TOO_SLOW)


def session_refused(exc: SpeechpipeError) -> Fail:
    """The capacity gate or the session factory refused the start: the close code by the
    code table, with the redirect's or the retry's fields."""
    extra: dict[str, Any] = {}
    if isinstance(exc, SessionRedirect):
        extra = {"url": exc.url, "ticket": exc.ticket,
                 "expires_in_s": round(exc.expires_in_s, 1)}
    elif isinstance(exc, AdmissionError):
        extra = {"retry_after_s": exc.retry_after_s}
    return Fail(refusal_close(exc), exc.code, encode_error(exc.code, str(exc), fatal=True,
                                                           **extra))
