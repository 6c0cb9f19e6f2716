"""Every code of the session protocol in one table: close codes and error-event codes.

``CloseCode`` (WebSocket close codes, each with its meaning) and ``ErrorCode`` (the ``code`` of
``error`` events, each with the close code that follows it, which makes it fatal, and what it
means) are the only place a code is defined — as websockets keeps ``CloseCode`` with its
explanations and httpx's ``codes`` carry their phrases. The quotas (``quota_error``), the
metrics' label set (``SERVER_CLOSE_CODES``) and the exception-to-close mapping
(``refusal_close``) derive from them, and ``tests/unit/transport/test_codes.py`` holds both against
the two tables of ``docs/protocol.md``. A new close code is one ``CloseCode`` row (with its
``ErrorCode`` row when an error event goes with it) plus its row in the docs.
"""

from __future__ import annotations

import enum

from speechpipe.errors import AdmissionError, SessionRedirect, SpeechpipeError

__all__ = ["CloseCode", "ErrorCode", "SERVER_CLOSE_CODES", "refusal_close"]


class CloseCode(enum.IntEnum):
    """WebSocket close codes the server uses (RFC 6455 ones, then application 4xxx ones);
    ``meaning`` is the row of docs/protocol.md's "Close codes" table."""

    meaning: str

    def __new__(cls, value: int, meaning: str) -> CloseCode:
        member = int.__new__(cls, value)
        member._value_ = value
        member.meaning = meaning
        return member

    NORMAL = 1000, "normal: after `stop`, everything was sent"
    GOING_AWAY = 1001, "the server is shutting down"
    POLICY = 1008, "policy: audio far faster than real time (`too_fast`)"
    TOO_BIG = 1009, "a message over 128 KiB (closed by the WebSocket layer, no error event)"
    INTERNAL = 1011, "internal server error"
    TRY_AGAIN = 1013, "try again later: over capacity"
    BAD_START = 4000, "bad `start`"
    UNSUPPORTED_FORMAT = 4001, "unsupported audio format"
    UNSUPPORTED_RATE = 4002, "unsupported sample rate"
    UNSUPPORTED_REQUEST = 4003, "request refused by the pipeline (language, voice, MT)"
    UNAUTHORIZED = 4004, "unauthorized (token)"
    START_TIMEOUT = 4005, "no `start` in time"
    SESSION_EXPIRED = 4006, "the session reached its maximum length (`session_expired`)"
    IDLE_TIMEOUT = 4007, "idle timeout (`idle_timeout`)"
    RATE_LIMITED = 4008, "rate limit (`rate_limited`)"
    TOO_MANY_SESSIONS = 4009, "too many sessions for this token or address (`too_many_sessions`)"
    TOO_SLOW = 4010, "audio fell behind real time (`too_slow`)"
    NOT_READING = 4011, "the client stopped reading (`not_reading`): no pong to a ping in time"
    LISTENER_TOO_SLOW = 4012, ("rooms: a listener's outbox overflowed: it did not read the room's "
                               "messages fast enough (`listener_too_slow`)")
    ROOM_FULL = 4013, "rooms: the room or the server has its maximum of listeners (`room_full`)"
    NO_ROOM = 4014, "rooms: no such room (`no_room`): it ended, or the link is wrong"
    NOT_A_SPEAKER = 4015, ("rooms: a speaking role in a room that did not give this client the "
                           "right to speak (`not_a_speaker`; with tokens: 4004)")
    TOO_MANY_JOINS = 4016, ("rooms: joins from this address or into this room faster than the "
                            "join rate (`too_many_joins`): retry after `retry_after_s`")
    REDIRECT = 4020, ("cluster: admitted on another node (`redirect`): reconnect to `url` with "
                      "`start.ticket`")
    NODE_DRAINED = 4021, ("cluster: the node was drained (`node_drained`): reconnect anywhere "
                          "with `start.resume`")
    ABNORMAL = 1006, ("(not sent: seen by the client when the server process died) cluster: "
                      "reconnect anywhere with `start.resume`")

    @property
    def sent(self) -> bool:
        """False for the one code the server never sends (1006: the TCP connection dropped)."""
        return self is not CloseCode.ABNORMAL


class ErrorCode(enum.StrEnum):
    """``code`` values of ``error`` events the transport sends, each with the close code that
    follows it (``close``; None: recoverable, the session goes on) and what it means. The
    pipeline's own codes (``speechpipe.errors``) end a session at ``start`` with 4003
    (``refusal_close``) and mid-session with 1011."""

    close: CloseCode | None
    meaning: str

    def __new__(cls, value: str, close: CloseCode | None, meaning: str) -> ErrorCode:
        member = str.__new__(cls, value)
        member._value_ = value
        member.close = close
        member.meaning = meaning
        return member

    @classmethod
    def lookup(cls, code: str) -> ErrorCode | None:
        """The row of ``code``; None for a code that is not the transport's."""
        return next((member for member in cls if member.value == code), None)

    @property
    def fatal(self) -> bool:
        """True when the server closes the connection after this error."""
        return self.close is not None

    BAD_JSON = "bad_json", None, "a text message is not a JSON object"
    UNKNOWN_TYPE = "unknown_type", None, "`type` missing or unknown"
    BAD_MESSAGE = "bad_message", None, "a known message with malformed fields"
    NOT_STARTED = "not_started", None, "audio or another message before `start`"
    BAD_START = "bad_start", CloseCode.BAD_START, "`start` with a malformed field"
    UNSUPPORTED_FORMAT = "unsupported_format", CloseCode.UNSUPPORTED_FORMAT, "not pcm_s16le"
    UNSUPPORTED_RATE = "unsupported_rate", CloseCode.UNSUPPORTED_RATE, "rate out of range"
    UNAUTHORIZED = "unauthorized", CloseCode.UNAUTHORIZED, "no valid token"
    START_TIMEOUT = "start_timeout", CloseCode.START_TIMEOUT, "no `start` in time"
    BAD_FRAME = "bad_frame", None, "an empty or odd-length binary frame (dropped)"
    TOO_FAST = "too_fast", CloseCode.POLICY, "audio far ahead of real time"
    STOPPING = "stopping", None, "audio or `offer` after `stop`"
    BAD_SDP = "bad_sdp", None, "an offer that cannot be applied or answered"
    WEBRTC_ACTIVE = "webrtc_active", None, "binary audio or a second offer during a peer"
    WEBRTC_TIMEOUT = "webrtc_timeout", None, "ICE + DTLS did not complete in time"
    WEBRTC_FAILED = "webrtc_failed", None, "the peer failed later, or WebRTC is disabled"
    INTERNAL = "internal", CloseCode.INTERNAL, "an unexpected server error"
    OVER_CAPACITY = "over_capacity", CloseCode.TRY_AGAIN, "full (speechpipe.errors.AdmissionError)"
    NOT_READY = "not_ready", CloseCode.UNSUPPORTED_REQUEST, "the models are still loading"
    NO_VOICE = "no_voice", CloseCode.UNSUPPORTED_REQUEST, "not a voice the server offers"
    NOT_READING = "not_reading", CloseCode.NOT_READING, "the client stopped reading"
    TOO_SLOW = "too_slow", CloseCode.TOO_SLOW, "audio fell behind real time"
    # rooms (transport/room.py)
    LISTENER_TOO_SLOW = "listener_too_slow", CloseCode.LISTENER_TOO_SLOW, "a listener not reading"
    ROOM_FULL = "room_full", CloseCode.ROOM_FULL, "the listener limit (room or server)"
    NO_ROOM = "no_room", CloseCode.NO_ROOM, "an unknown room"
    NOT_A_SPEAKER = "not_a_speaker", CloseCode.NOT_A_SPEAKER, "no right to speak in this room"
    TOO_MANY_JOINS = "too_many_joins", CloseCode.TOO_MANY_JOINS, "the join rate (address, room)"
    LISTENER_CANNOT_SPEAK = "listener_cannot_speak", None, "audio from a listener (dropped)"
    # quotas (transport/quotas.py)
    SESSION_EXPIRED = "session_expired", CloseCode.SESSION_EXPIRED, "maximum length reached"
    IDLE_TIMEOUT = "idle_timeout", CloseCode.IDLE_TIMEOUT, "nothing received for too long"
    RATE_LIMITED = "rate_limited", CloseCode.RATE_LIMITED, "frames faster than the rate limit"
    TOO_MANY_SESSIONS = "too_many_sessions", CloseCode.TOO_MANY_SESSIONS, "per token / address"
    SDP_TOO_LARGE = "sdp_too_large", None, "an offer over the SDP size limit"
    # cluster mode (speechpipe.cluster; docs/protocol.md "Cluster")
    REDIRECT = "redirect", CloseCode.REDIRECT, "a slot on another node (SessionRedirect)"
    NODE_DRAINED = "node_drained", CloseCode.NODE_DRAINED, "this node was drained"


# Close codes the server sends; ``speechpipe.server.metrics`` labels anything else ``other``.
SERVER_CLOSE_CODES = frozenset(int(code) for code in CloseCode if code.sent)

# A session refused at ``start``: its close code by the exception that refused it (the first
# match wins; any other SpeechpipeError is the pipeline refusing the request: 4003).
_REFUSALS: tuple[tuple[type[SpeechpipeError], ErrorCode], ...] = (
    (SessionRedirect, ErrorCode.REDIRECT),
    (AdmissionError, ErrorCode.OVER_CAPACITY),
)


def refusal_close(exc: SpeechpipeError) -> CloseCode:
    """The close code for a session that ``exc`` refused at ``start``."""
    for kind, code in _REFUSALS:
        if isinstance(exc, kind) and code.close is not None:
            return code.close
    return CloseCode.UNSUPPORTED_REQUEST
