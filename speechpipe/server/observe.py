"""What the listener experiences, per session: commit latency and speech Start/EndOffset.

``ListenerLatency`` is a pure core fed with one session's output events in order; it answers
the figures each event completes (stream seconds, so computation-aware in a live session,
whose stream clock is the wall clock):

- ``commit``: stream time the committed text of a side grew, minus the end of the audio it
  covers (what ``speechpipe bench load`` calls commit latency);
- ``start_offset``: first translated speech of an utterance minus its VAD speech start;
- ``end_offset``: end of the utterance's translated speech, every chunk laid back to back
  after the one before (a listener cannot hear two at once), minus its VAD speech end.

``ObservedSession`` wraps a pipeline session for the server (``speechpipe.server.serve``): it feeds
every event to the core, the Prometheus histograms and (when on) the session's trace.
Instrumentation failures are logged and never reach the session.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from speechpipe.stages.frames import (
    STREAM_RATE,
    AudioFrame,
    OutputEvent,
    SpeechChunk,
    TextHypothesis,
    UtteranceEnd,
    VadEvent,
)

if TYPE_CHECKING:
    from speechpipe.server.metrics import ListenerMetrics
    from speechpipe.server.tracing import SessionTrace, SessionTracing
    from speechpipe.transport.session_api import LiveSession, SessionRequest

__all__ = ["Observation", "ListenerLatency", "ObservedSession"]

log = logging.getLogger("speechpipe.observe")


@dataclass(frozen=True, slots=True)
class Observation:
    """One listener-latency measurement of an utterance, in seconds."""
    kind: Literal["commit", "start_offset", "end_offset"]
    seconds: float
    utterance: int
    side: str = ""


class ListenerLatency:
    """One session's listener latency (see the module docs); state is freed per utterance."""

    def __init__(self) -> None:
        self._speech_start: dict[int, int] = {}
        self._speech_end: dict[int, int] = {}
        self._committed: dict[tuple[str, int], int] = {}
        self._heard: set[int] = set()
        self._laid_end: dict[int, float] = {}
        self._cursor = 0.0  # stream seconds where the speech sent so far ends, back to back

    def feed(self, event: OutputEvent) -> list[Observation]:
        """The latency observations this event completes (often none)."""
        if isinstance(event, VadEvent):
            if event.kind == "start":
                self._speech_start[event.utterance] = event.pts
            elif event.kind == "end":
                self._speech_end[event.utterance] = event.pts
        elif isinstance(event, TextHypothesis):
            key = (event.side, event.utterance)
            if len(event.committed) > self._committed.get(key, 0):
                self._committed[key] = len(event.committed)
                lag = (event.stream_pts - event.audio_end) / STREAM_RATE
                return [Observation("commit", max(0.0, lag), event.utterance, event.side)]
        elif isinstance(event, SpeechChunk):
            at = event.stream_pts / STREAM_RATE
            self._cursor = max(self._cursor, at) + event.duration
            self._laid_end[event.utterance] = self._cursor
            start = self._speech_start.get(event.utterance)
            if event.utterance not in self._heard and start is not None:
                self._heard.add(event.utterance)
                return [Observation("start_offset", at - start / STREAM_RATE, event.utterance)]
        elif isinstance(event, UtteranceEnd):
            return self._end(event.utterance)
        return []

    def _end(self, utterance: int) -> list[Observation]:
        self._speech_start.pop(utterance, None)
        self._heard.discard(utterance)
        for side in ("source", "target"):
            self._committed.pop((side, utterance), None)
        end = self._speech_end.pop(utterance, None)
        laid = self._laid_end.pop(utterance, None)
        if end is None or laid is None:
            return []
        return [Observation("end_offset", laid - end / STREAM_RATE, utterance)]


class ObservedSession:
    """A ``LiveSession`` (and its async context manager) around a pipeline session."""

    def __init__(
        self,
        inner: AbstractAsyncContextManager[LiveSession],
        metrics: ListenerMetrics,
        request: SessionRequest,
        tracing: SessionTracing | None = None,
    ) -> None:
        self._inner_cm = inner
        self._metrics = metrics
        self._request = request
        self._tracing = tracing
        self._session: LiveSession | None = None
        self._latency = ListenerLatency()
        self._trace: SessionTrace | None = None
        self._failed = False

    async def __aenter__(self) -> ObservedSession:
        if self._tracing is not None:
            self._trace = self._guard(self._tracing.begin, self._request, self._degrade_level)
        try:
            self._session = await self._inner_cm.__aenter__()
        except BaseException as exc:
            self._end_trace(exc)
            raise
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> bool | None:
        try:
            return await self._inner_cm.__aexit__(exc_type, exc, tb)
        finally:
            self._end_trace(exc)

    @property
    def engines(self) -> dict[str, str] | None:
        """The inner session's engines (``PipelineSession.engines``), for the started event."""
        return getattr(self._session, "engines", None)

    # -- LiveSession -----------------------------------------------------------------------
    async def push(self, frame: AudioFrame) -> None:
        """Push an audio frame into the session."""
        assert self._session is not None
        await self._session.push(frame)

    def flush(self) -> None:
        """End the current utterance now, as if the speaker paused."""
        assert self._session is not None
        self._session.flush()

    async def finish(self) -> None:
        """Finish the session's input."""
        assert self._session is not None
        await self._session.finish()

    async def events(self) -> AsyncIterator[OutputEvent]:
        """The session's events, each observed on the way."""
        assert self._session is not None
        async for event in self._session.events():
            self._guard(self._observe, event)
            yield event

    # -- instrumentation -------------------------------------------------------------------
    def _observe(self, event: OutputEvent) -> None:
        metrics = self._metrics
        for obs in self._latency.feed(event):
            if obs.kind == "commit":
                metrics.commit_latency.labels(obs.side).observe(obs.seconds)
            elif obs.kind == "start_offset":
                metrics.start_offset.observe(max(0.0, obs.seconds))
            else:
                metrics.end_offset.observe(max(0.0, obs.seconds))
            if self._trace is not None and obs.kind != "commit":
                self._trace.observe(obs.utterance, f"{obs.kind}_s", obs.seconds)
        if self._trace is not None:
            self._trace.event(event)

    def _degrade_level(self) -> int:
        ladder = getattr(self._session, "ladder", None)
        return int(ladder.level()) if ladder is not None else 0

    def _end_trace(self, exc: BaseException | None) -> None:
        trace, self._trace = self._trace, None
        if trace is None:
            return
        code = None if exc is None else str(getattr(exc, "code", type(exc).__name__))
        self._guard(trace.end, code)

    def _guard(self, call: Any, *args: Any) -> Any:
        """Run an instrumentation call; a failure is logged (once) and never reaches the
        session."""
        try:
            return call(*args)
        except Exception:
            if not self._failed:
                self._failed = True
                log.exception("session instrumentation failed (the session goes on)")
            return None
