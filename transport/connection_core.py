"""One ``/ws`` connection's protocol state machine, without I/O: messages in, actions out.

As websockets keeps its connection in ``protocol.py`` (``receive_data`` in, events out, a
``State`` enum) with the asyncio layer only moving bytes, ``ConnectionCore`` decides what each
client message means in the connection's state, and returns what to do: send a recoverable
error, end the connection with a close code, accept ``start``, push audio, flush, stop, open
or feed a WebRTC peer. ``transport.websocket_server`` performs the actions (sockets, the
session, the peer) and tells the core when the session opens and ends. Time is a parameter.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from speechpipe.transport.audio_io import RealtimeGuard
from speechpipe.transport.codes import CloseCode, ErrorCode
from speechpipe.transport.protocol import (
    Flush,
    Ice,
    Offer,
    Playout,
    ProtocolError,
    Start,
    Stop,
    encode_error,
    parse_text,
    validate_audio,
)
from speechpipe.transport.quotas import Expired

__all__ = ["State", "ConnectionCore", "SendError", "Fail", "AcceptStart", "PushAudio",
           "FlushInput", "StopInput", "OpenPeer", "AddIce", "ReportPlayout", "Action",
           "fail"]


class State(enum.Enum):
    """Where a connection is. ``AWAITING_START`` -> ``STARTING`` (``start`` accepted; waiting
    for a slot and the session) -> ``STREAMING`` -> ``STOPPING`` (after ``stop`` or the
    maximum length: no more input, the output drains) -> ``CLOSED``; any state may close."""

    AWAITING_START = "awaiting_start"
    STARTING = "starting"
    STREAMING = "streaming"
    STOPPING = "stopping"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class SendError:
    """Send a recoverable ``error`` event; the connection goes on."""
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Fail:
    """End the connection: send ``error`` (if any), then close with ``code``."""
    code: int
    reason: str
    error: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class AcceptStart:
    """``start`` is well formed: authorize it and start the session."""
    start: Start


@dataclass(frozen=True, slots=True)
class PushAudio:
    """Client audio (validated, at the client's rate) for the session."""
    samples: NDArray[np.int16]
    seconds: float


@dataclass(frozen=True, slots=True)
class FlushInput:
    """End the utterance now."""


@dataclass(frozen=True, slots=True)
class StopInput:
    """No more input: finish the session (the output drains, then ``end``)."""


@dataclass(frozen=True, slots=True)
class OpenPeer:
    """A WebRTC offer to answer (audio then arrives over the peer)."""
    offer: Offer


@dataclass(frozen=True, slots=True)
class AddIce:
    """A trickled ICE candidate for the active peer."""
    ice: Ice


@dataclass(frozen=True, slots=True)
class ReportPlayout:
    """The client's playout clock, for the echo guard (``transport.echo_guard``)."""
    played_s: object


Action = (SendError | Fail | AcceptStart | PushAudio | FlushInput | StopInput | OpenPeer | AddIce
          | ReportPlayout)


def fail(exc: ProtocolError, code: int | None = None) -> Fail:
    """A fatal protocol error as the close that ends the connection (its own close code,
    else ``code``, else 1008)."""
    close = code if code is not None else (exc.close_code or CloseCode.POLICY)
    return Fail(close, exc.code, encode_error(exc.code, str(exc), fatal=True))


class ConnectionCore:
    """The protocol rules of one connection (see the module docs)."""

    def __init__(self, *, max_message_bytes: int, max_lead_s: float) -> None:
        self.state = State.AWAITING_START
        self.started = False  # a session ran on this connection (for the metrics)
        self.max_message_bytes = max_message_bytes
        self.max_lead_s = max_lead_s
        self.sample_rate = 16_000
        self._guard = RealtimeGuard(max_lead_s)

    @property
    def stopping(self) -> bool:
        """No more input is taken (after ``stop`` or the maximum length)."""
        return self.state is State.STOPPING

    @property
    def session_open(self) -> bool:
        """A session is running."""
        return self.state in (State.STREAMING, State.STOPPING)

    # -- what the I/O layer tells the core ---------------------------------------------------
    def session_opened(self, start: Start) -> None:
        """The session for ``start`` runs: audio may flow."""
        self.state = State.STREAMING
        self.started = True
        self.sample_rate = start.sample_rate
        self._guard = RealtimeGuard(self.max_lead_s)

    def stop(self) -> bool:
        """Stop taking input; False when it had stopped already."""
        if self.state is not State.STREAMING:
            return False
        self.state = State.STOPPING
        return True

    def closed(self) -> None:
        """The connection ended."""
        self.state = State.CLOSED

    # -- messages in, actions out ------------------------------------------------------------
    def receive(self, message: str | bytes | Expired, now: float, *,
                peer: bool = False) -> list[Action]:
        """What ``message`` calls for at ``now`` (``peer``: a WebRTC peer is active)."""
        if self.state is State.AWAITING_START:
            return self._before_start(message)
        if isinstance(message, Expired):
            return [SendError(ErrorCode.SESSION_EXPIRED,
                              "the session reached its maximum length: finishing (as after "
                              "'stop')"), StopInput()]
        if isinstance(message, bytes):
            return self._audio(message, now, peer)
        try:
            parsed = parse_text(message)
        except ProtocolError as exc:
            return [SendError(exc.code, str(exc))]
        if isinstance(parsed, Start):
            return [SendError(ErrorCode.BAD_START, "the session has already started")]
        if isinstance(parsed, Flush):
            return [FlushInput()]
        if isinstance(parsed, Stop):
            return [StopInput()]
        if isinstance(parsed, Playout):
            return [ReportPlayout(parsed.played_s)]
        if isinstance(parsed, Offer):
            if self.stopping:
                return [SendError(ErrorCode.STOPPING, "the session is stopping")]
            return [OpenPeer(parsed)]
        if not peer:
            return [SendError(ErrorCode.BAD_MESSAGE, "'ice' before 'offer'")]
        return [AddIce(parsed)]

    def start_timed_out(self) -> Fail:
        """No ``start`` within the start timeout."""
        return fail(ProtocolError(ErrorCode.START_TIMEOUT, "no 'start' message in time"),
                    CloseCode.START_TIMEOUT)

    def _before_start(self, message: str | bytes | Expired) -> list[Action]:
        if isinstance(message, bytes):
            return [SendError(ErrorCode.NOT_STARTED, "send 'start' before audio")]
        # the session length runs from ``begin_session``, after ``start``
        assert not isinstance(message, Expired)
        try:
            parsed = parse_text(message)
        except ProtocolError as exc:
            return [fail(exc)] if exc.fatal else [SendError(exc.code, str(exc))]
        if isinstance(parsed, Start):
            self.state = State.STARTING
            return [AcceptStart(parsed)]
        return [SendError(ErrorCode.NOT_STARTED, "no session yet: send 'start' first")]

    def _audio(self, message: bytes, now: float, peer: bool) -> list[Action]:
        if self.stopping:
            return [SendError(ErrorCode.STOPPING, "audio after 'stop' is ignored")]
        if peer:
            return [SendError(ErrorCode.WEBRTC_ACTIVE, "audio arrives over WebRTC: binary ignored")]
        try:
            samples = validate_audio(message, max_bytes=self.max_message_bytes)
        except ProtocolError as exc:
            return [SendError(exc.code, str(exc))]
        seconds = len(samples) / self.sample_rate
        if not self._guard.add(seconds, now):
            return [fail(ProtocolError(
                ErrorCode.TOO_FAST, f"audio is more than {self.max_lead_s:g} s ahead of real time",
            ), CloseCode.POLICY)]
        return [PushAudio(samples, seconds)]
