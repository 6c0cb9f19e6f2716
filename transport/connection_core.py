"""One ``/ws`` connection's protocol state machine, without I/O: messages in, actions out.

As websockets keeps its connection in ``protocol.py`` (``receive_data`` in, events out, a
``State`` enum) with the asyncio layer only moving bytes, ``ConnectionCore`` decides what each
client message means in the connection's state, and returns what to do: send a recoverable
error, end the connection with a close code, accept ``start``, push audio, flush, stop, open
or feed a WebRTC peer. The asyncio shell performs the actions (sockets, the session, the
peer): ``transport.ws_connection`` until the start, then ``transport.speaker_path`` or
``transport.listener_path``; it tells the core when the session opens and ends. Time is a
parameter.

The core also decides what an accepted ``start`` becomes (``plan_start``): a solo session, a
room speaker, a participant or a listener, by the ``role`` it names and what the client's
token claims (``Claims``); which room entry that is (``enter``, over
``transport.room_access.decide``); the WebRTC preconditions of an ``offer`` (a peer already
active, WebRTC disabled, an oversized SDP); and what a listener may send (no audio, no
``flush``, no ``playout``). Refusals come back as ``Fail``: the close code and error event
the shell sends, by the code table (``transport.codes``; the constructors live in
``transport.refusals``). What a quota's failure on receiving
means (``quota_failure``: a listener's liveness is the ping, not its input) is decided here
too (the shell only pings), as are how a finished session closes (``finished``) and which of
its own pipeline's messages a room member gets back (``hears_own``).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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
    parse_text,
    validate_audio,
)
from speechpipe.transport.quotas import Expired, check_sdp_size
from speechpipe.transport.refusals import (
    Fail,
    fail,
    listener_too_slow,
    room_redirect,
    room_refusal,
    session_refused,
    too_many_joins,
)
from speechpipe.transport.room import Role, Room
from speechpipe.transport.room_access import EntryRequest, Join, Open, Refuse, decide

if TYPE_CHECKING:
    from speechpipe.transport.auth import Identity

__all__ = ["State", "ConnectionCore", "SendError", "Fail", "AcceptStart", "PushAudio",
           "FlushInput", "StopInput", "OpenPeer", "AddIce", "ReportPlayout", "Action", "CheckReads",
           "fail", "Claims", "StartPlan", "CAPTION_TARGET", "room_refusal", "room_redirect",
           "too_many_joins", "listener_too_slow", "session_refused"]

CAPTION_TARGET = "en"  # a participant's own pipeline translates into this (the embedded default)


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


@dataclass(frozen=True, slots=True)
class CheckReads:
    """Ping the client first: if it answers (within ``read_check_s``) it still reads what the
    server sends, and ``then`` follows (None: go on receiving); if not, ``otherwise``."""
    then: Fail | None
    otherwise: Fail


Action = (SendError | Fail | AcceptStart | PushAudio | FlushInput | StopInput | OpenPeer | AddIce
          | ReportPlayout)


@dataclass(frozen=True, slots=True)
class Claims:
    """What the connection's verified token says: ``key`` (None: no token, or the one
    shared token), the ``room`` and ``role`` it is for."""
    key: str | None = None
    room: str | None = None
    role: str | None = None

    @classmethod
    def of(cls, identity: Identity | None) -> Claims:
        """The claims of a verified token (``Admission.identity``; None: no token)."""
        if identity is None:
            return cls()
        return cls(identity.key, identity.room, identity.role)


@dataclass(frozen=True, slots=True)
class StartPlan:
    """What an accepted ``start`` becomes. ``role`` None: a solo session (no room);
    ``Role.LISTENER``: no pipeline and no capacity slot. ``request``: the pipeline's
    request (a participant's translates into ``CAPTION_TARGET``: the captions' source);
    ``entry``: the room entry to ask for (None: no room); ``claims``: the token's."""
    start: Start
    role: Role | None
    request: Any
    entry: EntryRequest | None
    claims: Claims = Claims()

    @property
    def listener(self) -> bool:
        return self.role is Role.LISTENER

    @property
    def room_id(self) -> str | None:
        """The room the start names, else its token's room claim (None: a new room)."""
        if self.entry is None:
            return None
        return self.entry.room or self.entry.claim_room

    def slot_owner(self, ip: str | None, connection: str) -> tuple[str, str]:
        """Whom a capacity slot for this start counts for: (the client, by its declared
        ``client_id``, else its address, else the ``connection``'s id; its token's key, ""
        without one)."""
        return self.start.request.client_id or ip or connection, self.claims.key or ""

    @property
    def join_limited(self) -> bool:
        """Its join counts against the room's (and its address's) join rate: a listener's,
        which costs the room no right but comes in crowds."""
        return self.listener

    @property
    def member_target(self) -> str:
        """The language this member hears the room in."""
        return str(self.start.request.target_lang).strip().lower()

    def room_options(self) -> dict[str, Any]:
        """``RoomHub.new_room``'s options for a room this start opens."""
        return {"opener_key": self.entry.key if self.entry is not None else None,
                "conversation": self.role is Role.PARTICIPANT,
                "listener_history": self.start.history}


class ConnectionCore:
    """The protocol rules of one connection (see the module docs)."""

    def __init__(self, *, max_message_bytes: int, max_lead_s: float, webrtc: bool = True,
                 max_sdp_bytes: int | None = None) -> None:
        self.state = State.AWAITING_START
        self.started = False  # a session ran on this connection (for the metrics)
        self.max_message_bytes = max_message_bytes
        self.max_lead_s = max_lead_s
        self.webrtc = webrtc  # the server answers WebRTC offers
        self.max_sdp_bytes = max_sdp_bytes  # None: no limit on an offer's SDP
        self.role: Role | None = None  # once ``plan_start`` accepted the start
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

    @property
    def listening(self) -> bool:
        """The start made this connection a room listener."""
        return self.role is Role.LISTENER

    @property
    def pipeline_open(self) -> bool:
        """A session with a pipeline runs: one the metrics count (a listener has none)."""
        return self.session_open and not self.listening

    # -- what an accepted start becomes -----------------------------------------------------
    def plan_start(self, start: Start, claims: Claims, *,
                   tokens_required: bool = False) -> StartPlan | Fail:
        """The role, room entry and pipeline request of ``start``, or the refusal. A token
        with a ``role`` claim is for that role only: a listener token cannot speak, at all
        (nor a speaker token start a solo session)."""
        if claims.role and claims.role != start.role:
            return room_refusal(ErrorCode.UNAUTHORIZED, f"this token is for a {claims.role}")
        role = Role(start.role) if start.role is not None else None
        request = start.request
        if role is Role.PARTICIPANT:  # its own pipeline: the captions' source
            request = dataclasses.replace(request, target_lang=CAPTION_TARGET)
        entry = None
        if role is not None:
            entry = EntryRequest(role, start.room, start.invite, key=claims.key,
                                 claim_room=claims.room, claim_role=claims.role,
                                 tokens_required=tokens_required)
        self.role = role
        return StartPlan(start, role, request, entry, claims)

    @staticmethod
    def enter(plan: StartPlan, room: Room | None) -> Join | Open | Fail:
        """Where ``plan`` enters: ``room`` is the room it names (``plan.room_id``) when that
        room exists on this server (the rules: ``transport.room_access``)."""
        assert plan.entry is not None, "a solo session enters no room"
        entry = decide(plan.entry, room)
        if isinstance(entry, Refuse):
            return room_refusal(entry.code, entry.message)
        return entry

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

    @staticmethod
    def finished(expired: bool = False) -> Fail:
        """The session's output ended and ``end`` was sent: 1000, or 4006 when it ended
        because the session reached its maximum length (``expired``)."""
        if expired:
            return Fail(CloseCode.SESSION_EXPIRED, ErrorCode.SESSION_EXPIRED)
        return Fail(CloseCode.NORMAL, "stopped")

    def hears_own(self, kind: str) -> bool:
        """Whether a room member gets back a message of ``kind`` its own pipeline published:
        a speaker all of them; a participant its own captions (``source``) and errors only,
        never its own voice or translation (the room sends it the others')."""
        if self.role is Role.SPEAKER:
            return True
        return kind in ("source", "error")

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
            actions = self._audio(message, now, peer)
            if self.role is Role.LISTENER and isinstance(actions[0], PushAudio):
                return [SendError(ErrorCode.LISTENER_CANNOT_SPEAK,
                                  "a listener sends no audio: binary ignored")]
            return actions
        try:
            parsed = parse_text(message)
        except ProtocolError as exc:
            return [SendError(exc.code, str(exc))]
        if isinstance(parsed, Start):
            return [SendError(ErrorCode.BAD_START, "the session has already started")]
        if isinstance(parsed, Flush):
            return [] if self.role is Role.LISTENER else [FlushInput()]
        if isinstance(parsed, Stop):
            return [StopInput()]
        if isinstance(parsed, Playout):  # the echo guard runs for a participant only
            return [ReportPlayout(parsed.played_s)] if self.role is Role.PARTICIPANT else []
        if isinstance(parsed, Offer):
            return [self._offer(parsed, peer)]
        if not peer:
            return [SendError(ErrorCode.BAD_MESSAGE, "'ice' before 'offer'")]
        return [AddIce(parsed)]

    def _offer(self, offer: Offer, peer: bool) -> Action:
        if self.stopping:
            return SendError(ErrorCode.STOPPING, "the session is stopping")
        if peer:
            return SendError(ErrorCode.WEBRTC_ACTIVE, "a WebRTC peer is already connected")
        if not self.webrtc:
            return SendError(ErrorCode.WEBRTC_FAILED, "WebRTC is disabled on this server")
        if self.max_sdp_bytes is not None:
            try:
                check_sdp_size(offer.sdp, self.max_sdp_bytes)
            except ProtocolError as exc:
                return SendError(exc.code, str(exc))
        return OpenPeer(offer)

    def quota_failure(self, exc: ProtocolError, read_check_s: float) -> Fail | CheckReads:
        """What a quota's failure while receiving (``QuotaGuard.recv``) means. A listener
        sends nothing: its idle timer running out only asks whether it still reads (the
        ping/pong is its liveness). Audio that stopped arriving is ``too_slow`` only for a
        client that still reads; one that does not answer the ping stopped reading."""
        not_reading = ProtocolError(ErrorCode.NOT_READING, "the client stopped reading: it did "
                                    f"not answer a ping within {read_check_s:g} s")
        if exc.code == ErrorCode.IDLE_TIMEOUT and self.listening:
            return CheckReads(None, fail(ProtocolError(
                ErrorCode.NOT_READING, "the listener did not answer a ping"),
                CloseCode.NOT_READING))
        if exc.code == ErrorCode.TOO_SLOW:
            return CheckReads(fail(exc), fail(not_reading, CloseCode.NOT_READING))
        return fail(exc)

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
