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
from typing import Protocol

from speechpipe.stages.frames import AudioFrame, OutputEvent
from speechpipe.stages.request import SessionRequest

__all__ = ["SessionRequest", "LiveSession", "SessionFactory"]


class LiveSession(Protocol):
    """What a transport drives: push audio, flush, finish, read events."""

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
