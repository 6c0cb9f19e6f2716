"""The ``/ws`` session protocol, sans I/O: parse client messages, encode server events.

Nothing here touches a socket or the event loop, so every rule of the protocol is unit tested
as plain functions (the websockets library's sans-I/O idea). ``docs/protocol.md`` is the
reference for clients; the constants below are the single source of its numbers
(``MAX_MESSAGE_BYTES`` sits in the options leaf ``transport.limits``, re-exported here).

Client -> server: JSON text messages (``start``, ``flush``, ``stop``, ``offer``, ``ice``,
``playout``) and
binary messages of little-endian int16 mono PCM at the rate declared in ``start``.

Server -> client: JSON text events (``started``, ``vad``, ``source``, ``target``, ``audio``,
``utterance_end``, ``status``, ``error``, ``answer``, ``end``); each ``audio`` event is
followed by exactly one binary message holding its PCM (unless it says ``"via": "webrtc"``).
This module parses and validates the client's messages and encodes ``started``; the other
events are encoded in ``transport.protocol_events`` (named here too: one codec to import).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from speechpipe.errors import InputError
from speechpipe.stages.frames import STREAM_RATE
from speechpipe.stages.request import SessionRequest
from speechpipe.transport.codes import CloseCode, ErrorCode
from speechpipe.transport.limits import MAX_MESSAGE_BYTES
from speechpipe.transport.protocol_events import (
    dumps,
    encode_answer,
    encode_end,
    encode_error,
    encode_event,
)
from speechpipe.voices.registry import is_voice_name

__all__ = [
    "PROTOCOL_VERSION",
    "MAX_MESSAGE_BYTES",
    "MIN_SAMPLE_RATE",
    "MAX_SAMPLE_RATE",
    "ProtocolError",
    "Start",
    "Flush",
    "Stop",
    "Offer",
    "Ice",
    "Playout",
    "ClientMessage",
    "parse_text",
    "parse_start",
    "validate_audio",
    "encode_event",
    "encode_error",
    "encode_started",
    "encode_answer",
    "encode_end",
    "dumps",
]

PROTOCOL_VERSION = 1

MIN_SAMPLE_RATE = 8_000
MAX_SAMPLE_RATE = 48_000
SAMPLE_WIDTH = 2  # bytes per int16 sample
FORMATS = ("pcm_s16le",)
MODES = ("balanced", "fast", "quality")
ROLES = ("speaker", "listener", "participant")


class ProtocolError(InputError):
    """A client message broke the protocol. ``close_code`` is set when it ends the connection."""

    def __init__(self, code: str, message: str, *, close_code: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.close_code = close_code

    @property
    def fatal(self) -> bool:
        """True when the server closes the connection after this error."""
        return self.close_code is not None


# --------------------------------------------------------------------------- client messages


@dataclass(frozen=True, slots=True)
class Start:
    """A client's ``start`` message: the session request and the audio format."""
    request: SessionRequest
    sample_rate: int
    format: str = "pcm_s16le"
    token: str | None = None
    ticket: str | None = None  # cluster: the ticket of a redirect (close 4020)
    resume: str | None = None  # cluster: the ``session`` of a session its node lost
    room: str | None = None  # rooms: the room to join (None with a speaking role: a new one)
    role: str | None = None  # rooms: ``speaker``, ``listener`` or ``participant``; None: solo
    invite: str | None = None  # rooms: the right to speak in ``room`` (``started.invite``)
    history: bool = False  # rooms: a conversation's opener lets its listeners get history
    turn: str | None = None  # rooms: the ``turn`` a ``too_many_joins`` refusal booked for it


@dataclass(frozen=True, slots=True)
class Flush:
    """A client's ``flush`` message: end the utterance now."""
    pass


@dataclass(frozen=True, slots=True)
class Stop:
    """A client's ``stop`` message: no more audio."""
    pass


@dataclass(frozen=True, slots=True)
class Offer:
    """A client's WebRTC ``offer``."""
    sdp: str


@dataclass(frozen=True, slots=True)
class Ice:
    """A trickled ICE candidate (``candidate`` None or "" means end of candidates)."""

    candidate: str | None
    sdp_mid: str | None = None
    sdp_mline_index: int | None = None


@dataclass(frozen=True, slots=True)
class Playout:
    """A participant's playout clock: it has played (or skipped) ``played_s`` seconds of the
    speech the room sent it (``transport.echo_guard`` checks the value against what was sent)."""

    played_s: object


ClientMessage = Start | Flush | Stop | Offer | Ice | Playout


def parse_text(text: str) -> ClientMessage:
    """Decode one JSON text message; raises ``ProtocolError`` (recoverable unless ``start``)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise ProtocolError(ErrorCode.BAD_JSON, "message is not valid JSON") from None
    if not isinstance(data, dict):
        raise ProtocolError(ErrorCode.BAD_JSON, "message must be a JSON object")
    kind = data.get("type")
    if kind == "start":
        return parse_start(data)
    if kind == "flush":
        return Flush()
    if kind == "stop":
        return Stop()
    if kind == "playout":
        return Playout(data.get("played_s"))
    if kind == "offer":
        sdp = data.get("sdp")
        if not isinstance(sdp, str) or not sdp:
            raise ProtocolError(ErrorCode.BAD_SDP, "offer needs a non-empty string 'sdp'")
        return Offer(sdp)
    if kind == "ice":
        cand = data.get("candidate")
        mid = data.get("sdpMid")
        index = data.get("sdpMLineIndex")
        if isinstance(cand, dict):  # the browser's RTCIceCandidate.toJSON()
            mid, index, cand = cand.get("sdpMid"), cand.get("sdpMLineIndex"), cand.get("candidate")
        if not (cand is None or isinstance(cand, str)):
            raise ProtocolError(ErrorCode.BAD_MESSAGE, "ice 'candidate' must be a string")
        if not (mid is None or isinstance(mid, str)):
            raise ProtocolError(ErrorCode.BAD_MESSAGE, "ice 'sdpMid' must be a string")
        if not (index is None or (isinstance(index, int) and not isinstance(index, bool))):
            raise ProtocolError(ErrorCode.BAD_MESSAGE, "ice 'sdpMLineIndex' must be an integer")
        return Ice(cand or None, mid, index)
    if not isinstance(kind, str):
        raise ProtocolError(ErrorCode.UNKNOWN_TYPE, "message needs a string 'type'")
    raise ProtocolError(ErrorCode.UNKNOWN_TYPE, f"unknown message type {kind[:40]!r}")


def _bad_start(message: str) -> ProtocolError:
    return ProtocolError(ErrorCode.BAD_START, message, close_code=CloseCode.BAD_START)


# Every string field of ``start`` passes ``_text`` (a string, no longer than its limit, no
# lone surrogate, no control character: anything else could not be echoed in ``started``,
# logged or compared), then its own syntax below. A field that fails is ``bad_start`` (4000),
# whatever the role: one rule for speakers, listeners, participants and solo sessions.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_LANG = re.compile(r"auto|[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{1,8}){0,3}")  # BCP 47-like: es, pt-BR
_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # room ids, cluster tickets and session ids
_TOKEN = re.compile(r"[\x21-\x7e]{1,4096}")  # a JWT or a shared token: visible ASCII
_SYNTAX: dict[str, tuple[re.Pattern[str], str]] = {
    "source_lang": (_LANG, "a language code ('es', 'pt-BR') or 'auto'"),
    "target_lang": (_LANG, "a language code ('es', 'pt-BR')"),
    "room": (_ID, "a room id (letters, digits, '-' and '_', at most 64)"),
    "ticket": (_ID, "a ticket from a redirect"),
    "resume": (_ID, "the session id of a lost session"),
    "turn": (_ID, "the turn of a too_many_joins refusal"),
    "invite": (_ID, "the invite of a room (from a conversation link)"),
    "token": (_TOKEN, "a token (visible ASCII, at most 4096 characters)"),
}


def _text(data: dict[str, Any], key: str, default: str | None, limit: int = 64) -> str | None:
    """``start[key]``: None, or a string within ``limit`` with no control character or lone
    surrogate, matching the field's syntax (``_SYNTAX``) when it has one. The message never
    repeats the value."""
    value = data.get(key, default)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit or _CONTROL.search(value):
        raise _bad_start(f"'{key}' must be a short string of printable characters")
    syntax = _SYNTAX.get(key)
    if value and syntax is not None and not syntax[0].fullmatch(value):
        raise _bad_start(f"'{key}' must be {syntax[1]}")
    return value


def _opt_str(data: dict[str, Any], key: str, default: str | None) -> str | None:
    return _text(data, key, default)


def _rate(data: dict[str, Any], key: str, default: int, *, code: str, close: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad_start(f"'{key}' must be an integer number of Hz")
    if isinstance(value, float):
        if not value.is_integer():
            raise ProtocolError(code, f"'{key}' must be a whole number of Hz", close_code=close)
        value = int(value)
    if not MIN_SAMPLE_RATE <= value <= MAX_SAMPLE_RATE:
        raise ProtocolError(
            code,
            f"'{key}' {value} Hz is outside {MIN_SAMPLE_RATE}-{MAX_SAMPLE_RATE} Hz",
            close_code=close,
        )
    return value


def _voice_name(data: dict[str, Any]) -> str | None:
    """``start.voice``: the name of a voice the server offers (``GET /voices``), never a path.
    Anything that is not a plain name is refused here, before the server looks at any file,
    with one fixed message: the answer says nothing about the server's files."""
    value = data.get("voice")
    if value is None or value == "":
        return None
    _text(data, "voice", None, limit=4096)  # printable characters first (bad_start)
    if not is_voice_name(value):  # the rule GET /voices lists by (voices.registry)
        raise ProtocolError(
            ErrorCode.NO_VOICE,
            "'voice' must be the name of a voice this server offers (see GET /voices)",
            close_code=CloseCode.UNSUPPORTED_REQUEST,
        )
    return value


def parse_start(data: dict[str, Any]) -> Start:
    """Validate a ``start`` message (already a dict). Unknown fields are ignored."""
    fmt = data.get("format", "pcm_s16le")
    if fmt not in FORMATS:
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_FORMAT,
            f"format must be one of {', '.join(FORMATS)}",
            close_code=CloseCode.UNSUPPORTED_FORMAT,
        )
    rate = _rate(
        data, "sample_rate", STREAM_RATE,
        code=ErrorCode.UNSUPPORTED_RATE, close=CloseCode.UNSUPPORTED_RATE,
    )
    out_rate = _rate(
        data, "output_sample_rate", STREAM_RATE,
        code=ErrorCode.UNSUPPORTED_RATE, close=CloseCode.UNSUPPORTED_RATE,
    )
    mode = data.get("mode", "balanced")
    if mode not in MODES:
        raise _bad_start(f"mode must be one of {', '.join(MODES)}")
    source = _opt_str(data, "source_lang", "auto") or "auto"
    target = _opt_str(data, "target_lang", "en") or "en"
    voice = _voice_name(data)
    token = _text(data, "token", None, limit=4096) or None
    ticket = _opt_str(data, "ticket", None) or None
    resume = _opt_str(data, "resume", None) or None
    turn = _opt_str(data, "turn", None) or None
    room = _opt_str(data, "room", None) or None
    role = _opt_str(data, "role", None) or None
    if role is not None and role not in ROLES:
        raise _bad_start(f"role must be one of {', '.join(ROLES)}")
    if room is not None and role is None:
        role = "listener"
    if role == "listener" and room is None:
        raise _bad_start("a listener needs the 'room' to join")
    invite = _text(data, "invite", None) or None
    history = data.get("history", False)
    if not isinstance(history, bool):
        raise _bad_start("'history' must be true or false")
    request = SessionRequest(
        source_lang=source,
        target_lang=target,
        voice=voice or None,
        output_sample_rate=out_rate,
        mode=mode,
        priority="live",
        pace="realtime",
    )
    return Start(request=request, sample_rate=rate, format=fmt, token=token, ticket=ticket,
                 resume=resume, room=room, role=role, invite=invite, history=history,
                 turn=turn)


def validate_audio(data: bytes, *, max_bytes: int = MAX_MESSAGE_BYTES) -> NDArray[np.int16]:
    """Check one binary message and view it as int16 samples (raises a recoverable error)."""
    if len(data) == 0:
        raise ProtocolError(ErrorCode.BAD_FRAME, "empty audio frame")
    if len(data) % SAMPLE_WIDTH:
        raise ProtocolError(
            ErrorCode.BAD_FRAME,
            f"audio frame of {len(data)} bytes is not a whole number of int16 samples",
        )
    if len(data) > max_bytes:
        raise ProtocolError(ErrorCode.BAD_FRAME, f"audio frame over {max_bytes} bytes")
    return np.frombuffer(data, dtype="<i2").astype(np.int16, copy=False)


# --------------------------------------------------------------------------- server events
# (the pipeline's events: ``transport.protocol_events``)


def encode_started(session: str, start: Start, *, output_sample_rate: int,
                   room: str | None = None, invite: str | None = None,
                   engines: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``started`` event for a session (``room``: the room it is in; ``invite``: the
    right to speak there, for a speaking member; ``engines``: what translates and speaks,
    labelled honestly, e.g. ``{"mt": "rule-based MT (Apertium eng-spa)", "voice": "robotic
    voice (espeak-ng es)"}``)."""
    req = start.request
    extra: dict[str, Any] = {"engines": dict(engines)} if engines else {}
    if room is not None:
        extra |= {"room": room, "role": start.role}
        if invite is not None:
            extra["invite"] = invite
    return {
        "type": "started",
        "protocol": PROTOCOL_VERSION,
        "session": session,
        "source_lang": req.source_lang,
        "target_lang": req.target_lang,
        "sample_rate": start.sample_rate,
        "output_sample_rate": output_sample_rate,
        "mode": req.mode,
        "max_message_bytes": MAX_MESSAGE_BYTES,
    } | extra
