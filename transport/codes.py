"""Every code of the session protocol in one table: close codes and error-event codes.

``CloseCode`` (WebSocket close codes, with their meaning) and ``ErrorCode`` (the ``code`` of
``error`` events, each with the close code it ends the connection with, if any: that makes it
fatal) are the only place a code is defined; the quotas, the metrics' label set and the
exception-to-close mapping derive from them, and ``tests/transport/test_codes.py`` holds them
against the two tables of ``docs/protocol.md``. Adding a close code is one row here (and one
``ErrorCode`` row when an error event goes with it) plus its row in the docs.
"""

from __future__ import annotations

__all__ = ["CloseCode", "ErrorCode"]


class CloseCode:
    """WebSocket close codes the server uses (RFC 6455 ones, then application 4xxx ones)."""

    NORMAL = 1000  # after ``stop``: every event and all audio were sent
    GOING_AWAY = 1001  # the server is shutting down
    ABNORMAL = 1006  # never sent: the TCP connection dropped without a close frame
    POLICY = 1008  # audio far faster than real time
    TOO_BIG = 1009  # a message over MAX_MESSAGE_BYTES (sent by the websockets library)
    INTERNAL = 1011  # an unexpected server error ended the session
    TRY_AGAIN = 1013  # over capacity or still loading: retry later
    BAD_START = 4000  # ``start`` missing, malformed or sent twice
    UNSUPPORTED_FORMAT = 4001  # ``format`` other than pcm_s16le
    UNSUPPORTED_RATE = 4002  # sample rate outside 8000-48000
    UNSUPPORTED_REQUEST = 4003  # the pipeline refused the request (language, voice ...)
    UNAUTHORIZED = 4004  # the server wants a token and did not get the right one
    START_TIMEOUT = 4005  # no ``start`` within the server's start timeout
    SESSION_EXPIRED = 4006  # the session reached its maximum length (after a graceful finish)
    IDLE_TIMEOUT = 4007  # no message from the client for the idle timeout
    RATE_LIMITED = 4008  # messages faster than the rate limit allows (after the burst)
    TOO_MANY_SESSIONS = 4009  # too many sessions for this token or address
    TOO_SLOW = 4010  # audio fell far behind real time for a sustained period
    NOT_READING = 4011  # the client stopped reading what the server sends (no pong either)
    REDIRECT = 4020  # cluster: admitted on another node; reconnect there with the ticket
    NODE_DRAINED = 4021  # cluster: this node was drained; resume on another node


class ErrorCode:
    """``code`` values of ``error`` events. Recoverable unless the table in the docs says so."""

    BAD_JSON = "bad_json"
    UNKNOWN_TYPE = "unknown_type"
    BAD_MESSAGE = "bad_message"
    NOT_STARTED = "not_started"
    BAD_START = "bad_start"
    UNSUPPORTED_FORMAT = "unsupported_format"
    UNSUPPORTED_RATE = "unsupported_rate"
    UNAUTHORIZED = "unauthorized"
    START_TIMEOUT = "start_timeout"
    BAD_FRAME = "bad_frame"
    TOO_FAST = "too_fast"
    STOPPING = "stopping"
    BAD_SDP = "bad_sdp"
    WEBRTC_ACTIVE = "webrtc_active"
    WEBRTC_TIMEOUT = "webrtc_timeout"
    WEBRTC_FAILED = "webrtc_failed"
    INTERNAL = "internal"
    OVER_CAPACITY = "over_capacity"  # speechpipe.errors.AdmissionError
    NOT_READY = "not_ready"
    NO_VOICE = "no_voice"  # speechpipe.errors.VoiceError; also a voice that is not a name
    NOT_READING = "not_reading"  # close 4011, or 1006 when nothing could be sent any more
    TOO_SLOW = "too_slow"
    # quotas (transport/quotas.py)
    SESSION_EXPIRED = "session_expired"
    IDLE_TIMEOUT = "idle_timeout"
    RATE_LIMITED = "rate_limited"
    TOO_MANY_SESSIONS = "too_many_sessions"
    SDP_TOO_LARGE = "sdp_too_large"
    # cluster mode (speechpipe.cluster; docs/protocol.md "Cluster")
    REDIRECT = "redirect"
    NODE_DRAINED = "node_drained"
