"""The ``/ws`` protocol's server events, encoded: a pipeline's ``OutputEvent`` (and the
server's own ``error``, ``answer`` and ``end``) as the JSON-ready dicts ``docs/protocol.md``
documents, and ``dumps`` for the text on the wire. Pure functions, no I/O; the client
messages (parsing, validation) and the ``started`` handshake are ``transport.protocol``,
which names all of these too.
"""

from __future__ import annotations

import json
import math
from typing import Any

from speechpipe.stages.frames import (
    STREAM_RATE,
    ErrorEvent,
    OutputEvent,
    SpeechChunk,
    StatusEvent,
    TextHypothesis,
    UtteranceEnd,
    VadEvent,
)

__all__ = ["dumps", "encode_error", "encode_answer", "encode_end", "encode_event"]


def _t(pts: int) -> float:
    return round(pts / STREAM_RATE, 3)


def dumps(message: dict[str, Any]) -> str:
    """Compact JSON for one event."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))


def encode_error(
    code: str, message: str, *, fatal: bool = False, utterance: int | None = None,
    stream_pts: int | None = None, **extra: Any,
) -> dict[str, Any]:
    """An ``error`` event (``fatal``: the server closes afterwards)."""
    out: dict[str, Any] = {"type": "error", "code": code, "message": message, "fatal": fatal}
    if utterance is not None:
        out["utterance"] = utterance
    if stream_pts is not None:
        out["stream_t"] = _t(stream_pts)
    out.update(extra)
    return out


def encode_answer(sdp: str) -> dict[str, Any]:
    """The WebRTC ``answer`` event."""
    return {"type": "answer", "sdp": sdp, "sdp_type": "answer"}


def encode_end(stream_pts: int) -> dict[str, Any]:
    """The ``end`` event: the session finished."""
    return {"type": "end", "stream_t": _t(stream_pts)}


def encode_event(event: OutputEvent) -> dict[str, Any]:
    """One OutputEvent as a JSON-ready dict. ``SpeechChunk`` gives the ``audio`` header only:
    the caller sends its PCM (see ``OutputResampler``) as the next binary message."""
    if isinstance(event, TextHypothesis):
        return {
            "type": event.side,
            "utterance": event.utterance,
            "revision": event.revision,
            "committed": event.committed,
            "tentative": event.tentative,
            "final": event.final,
            "language": event.language,
            "stream_t": _t(event.stream_pts),
            "audio_start": _t(event.audio_start),
            "audio_end": _t(event.audio_end),
            # source captions of a detected language only: how sure the detection is
            **({"language_confidence": round(event.language_confidence, 2)}
               if event.language_confidence is not None else {}),
        }
    if isinstance(event, SpeechChunk):
        return {
            "type": "audio",
            "utterance": event.utterance,
            "stream_t": _t(event.stream_pts),
            "sample_rate": event.sample_rate,
            "samples": int(len(event.samples)),
            "text": event.text,
            "via": "websocket",
        }
    if isinstance(event, VadEvent):
        return {
            "type": "vad",
            "kind": event.kind,
            "utterance": event.utterance,
            "t": _t(event.pts),
            "stream_t": _t(event.detected_at),
            "forced": event.forced,
        }
    if isinstance(event, UtteranceEnd):
        return {
            "type": "utterance_end",
            "utterance": event.utterance,
            "stream_t": _t(event.stream_pts),
            "source": event.source_text,
            "target": event.target_text,
        }
    if isinstance(event, StatusEvent):
        return {
            "type": "status",
            "status": event.status,
            "message": event.message,
            "stream_t": _t(event.stream_pts),
            "detail": _jsonable(event.detail),
        }
    if isinstance(event, ErrorEvent):
        return encode_error(
            event.code, event.message, utterance=event.utterance, stream_pts=event.stream_pts
        )
    raise TypeError(f"not an OutputEvent: {type(event).__name__}")


def _jsonable(detail: dict[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in detail.items():
        if isinstance(value, str | int | bool) or value is None:
            out[str(key)] = value
        elif isinstance(value, float):
            out[str(key)] = value if math.isfinite(value) else None
        else:
            out[str(key)] = str(value)
    return out
