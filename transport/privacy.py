"""Logs carry session ids, sizes, timings and codes: never audio, captions, translations or
tokens, unless the operator turns on ``log_content`` (``speechpipe serve --log-content``) to
debug, and even then never tokens.

Our own log calls follow that rule by construction. Two libraries we run would break it at
DEBUG level, so the server guards them:

- websockets logs every frame (``< TEXT '{"type":"target","committed":...'``) and every
  request header (``Authorization``) and path (``?token=``). The server hands websockets a
  ``ContentFreeLogger``, which reports DEBUG as disabled: websockets checks that once per
  connection and then skips those calls entirely. Its INFO and above (connection errors)
  still flow. This holds with ``log_content`` too: headers carry tokens.
- TTS engines may log the text they speak: Piper does (``text=..., phonemes=...``) at DEBUG.
  Each engine declares those loggers (``TtsEngine.text_loggers``, ``voices/engines.py``);
  ``guard_library_logs`` caps them at INFO unless ``log_content`` is on.
"""

from __future__ import annotations

import logging
from typing import Any

from speechpipe.stages.frames import OutputEvent, SpeechChunk, TextHypothesis, UtteranceEnd
from speechpipe.voices.engines import text_loggers

__all__ = ["ContentFreeLogger", "guard_library_logs", "content_loggers", "describe_content"]


def content_loggers() -> tuple[str, ...]:
    """Third-party loggers that log spoken or recognized text at DEBUG: every registered TTS
    engine's ``text_loggers``."""
    return text_loggers()


class ContentFreeLogger(logging.LoggerAdapter):
    """A logger whose DEBUG level is always off (websockets' frame and header dumps)."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__(logger, {})

    def isEnabledFor(self, level: int) -> bool:  # noqa: N802 - logging's API name
        """True for levels above DEBUG that the wrapped logger has enabled."""
        return level > logging.DEBUG and self.logger.isEnabledFor(level)

    def debug(self, msg: object, *args: Any, **kwargs: Any) -> None:
        """Discard the message: debug records may carry content."""
        return None


def guard_library_logs(log_content: bool = False) -> None:
    """Cap the ``content_loggers()`` at INFO (idempotent; left alone with ``log_content``).
    A level an operator set above DEBUG is kept."""
    if log_content:
        return
    for name in content_loggers():
        logger = logging.getLogger(name)
        if logger.level < logging.INFO:
            logger.setLevel(logging.INFO)


def describe_content(event: OutputEvent) -> str | None:
    """The text of an event, for ``log_content`` debug logging only (None: no text)."""
    if isinstance(event, TextHypothesis):
        return f"{event.side} u{event.utterance} r{event.revision}: {event.committed!r} + " \
               f"{event.tentative!r}"
    if isinstance(event, SpeechChunk):
        return f"audio u{event.utterance}: {event.text!r}"
    if isinstance(event, UtteranceEnd):
        return f"utterance_end u{event.utterance}: {event.source_text!r} -> {event.target_text!r}"
    return None
