"""TEST ONLY: a scripted pipeline for cluster tests, where the model is not the point.

``speechpipe serve --scripted-pipeline`` (a hidden flag) serves sessions that answer every
second of audio received with one ``target`` hypothesis and a short tone, without loading
any model, so a test can run several nodes on a 2-core machine and look only at admission,
routing and failure handling. Never use it to serve users.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from types import SimpleNamespace

import numpy as np

from speechpipe.stages.frames import (
    STREAM_RATE,
    AudioFrame,
    OutputEvent,
    SpeechChunk,
    TextHypothesis,
)
from speechpipe.transport.session_api import SessionRequest

__all__ = ["ScriptedPipeline"]


class _ScriptedSession:
    def __init__(self) -> None:
        self._events: asyncio.Queue[OutputEvent | None] = asyncio.Queue(maxsize=256)
        self._received = 0
        self._said = 0

    async def push(self, frame: AudioFrame) -> None:
        self._received = frame.end
        while self._received >= (self._said + 1) * STREAM_RATE:
            self._said += 1
            pts = self._said * STREAM_RATE
            await self._events.put(TextHypothesis(
                "target", 0, self._said, f"second {self._said}", "", "en",
                0, pts, pts))
            tone = (3000 * np.sin(np.arange(1600) * 0.2)).astype(np.int16)
            await self._events.put(SpeechChunk(tone, STREAM_RATE, 0, "tone", pts))

    def flush(self) -> None:
        pass

    async def finish(self) -> None:
        await self._events.put(None)

    async def events(self) -> AsyncIterator[OutputEvent]:
        while (event := await self._events.get()) is not None:
            yield event


class ScriptedPipeline:
    """Stands in for ``speechpipe.session.Pipeline`` in ``ServerApp`` (test only)."""

    def __init__(self) -> None:
        self.whisper = SimpleNamespace(observer=None)
        self.live_sessions: set[_ScriptedSession] = set()

    def warm_up(self) -> None:
        """Nothing to warm up."""
        pass

    def close(self) -> None:
        """Nothing to close."""

    def stop_workers(self) -> None:
        """No worker threads to join."""

    def worker_health(self) -> list[object]:
        """No shared model workers (``/readyz`` and the worker metrics read this)."""
        return []

    async def aclose(self) -> None:
        """Nothing to close (the server's shutdown path calls it)."""

    @contextlib.asynccontextmanager
    async def session(self, request: SessionRequest) -> AsyncIterator[_ScriptedSession]:
        """A scripted session, tracked in ``live_sessions`` while open."""
        del request
        session = _ScriptedSession()
        self.live_sessions.add(session)
        try:
            yield session
        finally:
            self.live_sessions.discard(session)
