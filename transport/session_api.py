"""What a transport needs from a session: the boundary between the edges and the pipeline.

Transports (file replay, WebSocket, WebRTC) are handed a ``SessionFactory`` and never import
``speechpipe``'s application layer. A transport converts its input to 16 kHz mono int16,
pushes it as ``AudioFrame``s, and forwards the session's ``OutputEvent``s to its client.

Usage::

    async with factory(SessionRequest(source_lang="es")) as session:
        await session.push(frame)        # repeatedly; cancel-safe
        session.flush()                  # optional: end the current utterance now
        await session.finish()           # no more audio; outputs drain
        async for event in session.events():
            ...                          # ends after the last event once finished

``push`` and reading ``events()`` usually run in two tasks. Leaving the ``async with`` block
cancels whatever is still running in the session and frees it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Literal, Protocol

from speechpipe.stages.frames import AudioFrame, OutputEvent

__all__ = ["SessionRequest", "LiveSession", "SessionFactory"]


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """What a client asks for. Validation (languages, voice, rates) happens in the factory,
    which raises ``speechpipe.errors.InputError`` subclasses for a bad request."""

    source_lang: str = "auto"
    target_lang: str = "en"
    voice: str | None = None
    output_sample_rate: int = 16_000
    mode: Literal["balanced", "fast", "quality"] = "balanced"
    mt: str = "whisper"
    priority: Literal["live", "replay"] = "live"
    pace: Literal["realtime", "fast"] = "realtime"
    client_id: str = ""


class LiveSession(Protocol):
    async def push(self, frame: AudioFrame) -> None:
        """Queue 16 kHz mono int16 audio. Frames must be contiguous (``pts`` increasing)."""

    def flush(self) -> None:
        """End the current utterance now (as if the speaker paused)."""

    async def finish(self) -> None:
        """No more audio: finish the current utterance; ``events()`` ends after the last."""

    def events(self) -> AsyncIterator[OutputEvent]:
        """Events in the order they were produced; ends after ``finish`` has drained."""
        ...


SessionFactory = Callable[[SessionRequest], AbstractAsyncContextManager[LiveSession]]
