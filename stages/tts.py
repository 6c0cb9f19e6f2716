"""TTS stage: speak committed target text in phrase-sized pieces as soon as it is committed.

The stage only segments and stamps; synthesis (Piper, cached, resampled) is the injected
``speak`` coroutine, which runs the model off the event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from speechpipe.errors import SpeechpipeError
from speechpipe.stages.channels import Channel, ChannelClosed
from speechpipe.stages.clock import StreamClock, WallStreamClock
from speechpipe.stages.frames import (
    STREAM_RATE,
    ErrorEvent,
    OutputEvent,
    SpeechChunk,
    StageTiming,
    TextHypothesis,
    UtteranceEnd,
)
from speechpipe.stages.phrases import (
    JustInTimeSegmenter,
    PhraseOptions,
    PhraseSegmenter,
    make_segmenter,
)

__all__ = ["TtsStage", "Speak", "CatchUpOptions", "catch_up_speed"]

Speak = Callable[[str, float], Awaitable[NDArray[np.int16]]]


@dataclass(frozen=True, slots=True)
class CatchUpOptions:
    """Speak faster when the translated speech lags the speaker, as interpreters do.

    ``backlog`` is how far the end of the speech already queued lies ahead of the stream
    position now. Each step up the ladder multiplies the speaking rate."""

    backlog_s: tuple[float, ...] = (1.0, 2.0)
    speeds: tuple[float, ...] = (1.15, 1.3)


def catch_up_speed(backlog_s: float, options: CatchUpOptions) -> float:
    """The speaking rate for a backlog of ``backlog_s`` seconds."""
    speed = 1.0
    for threshold, step_speed in zip(options.backlog_s, options.speeds, strict=True):
        if backlog_s >= threshold:
            speed = step_speed
    return speed


class TtsStage:
    """Speaks committed target text in phrases, on the stream's timeline."""

    def __init__(
        self,
        speak: Speak,
        clock: StreamClock,
        sample_rate: int,
        phrase_options: PhraseOptions | None = None,
        catch_up: CatchUpOptions | None = None,
    ) -> None:
        self.speak = speak
        self.clock = clock
        self.sample_rate = sample_rate
        self.phrase_options = phrase_options or PhraseOptions()
        self.catch_up = catch_up or CatchUpOptions()
        self._queued_until = 0.0  # stream seconds where the speech sent so far ends
        self._segmenters: dict[int, PhraseSegmenter | JustInTimeSegmenter] = {}
        self._source_text: dict[int, str] = {}
        self._last_target: dict[int, TextHypothesis] = {}  # newest per open utterance

    async def run(self, inbox: Channel[TextHypothesis], outbox: Channel[OutputEvent]) -> None:
        """Speak the target hypotheses from ``inbox`` as ``SpeechChunk`` events into
        ``outbox``; close it when ``inbox`` is closed and drained (the stage contract)."""
        try:
            await self._run(inbox, outbox)
        finally:
            outbox.close()

    async def _run(self, inbox: Channel[TextHypothesis], events: Channel[OutputEvent]) -> None:
        while True:
            wake_in = self._wake_in()
            try:
                if wake_in is None:
                    hypothesis = await inbox.get()
                else:  # Channel.get is cancel-safe: a timeout loses no hypothesis
                    hypothesis = await asyncio.wait_for(inbox.get(), wake_in)
            except ChannelClosed:
                return
            except TimeoutError:
                await self._wake(events)
                continue
            if hypothesis.side == "source":
                if hypothesis.final:
                    self._source_text[hypothesis.utterance] = hypothesis.committed
                continue
            await self._on_target(hypothesis, events)

    def _wake_in(self) -> float | None:
        """Live sessions: seconds until held words must be cut (the queued speech is about to
        run out), or None when no words are held. Hypotheses can be seconds apart under load,
        so the just-in-time cut cannot wait for the next one. Replays paced by the basis
        clock have no wall-clock stream time: their cuts happen as hypotheses arrive."""
        if not isinstance(self.clock, WallStreamClock):
            return None
        held = [u for u, s in self._segmenters.items()
                if isinstance(s, JustInTimeSegmenter) and s.held and u in self._last_target]
        if not held:
            return None
        now_s = self.clock.stamp(0) / STREAM_RATE
        due = self._queued_until - self.phrase_options.lead_s - now_s
        if due < -0.05:  # fed since the cut point and still held (``no_end_words``): wait
            return None
        return max(0.01, due + 0.01)

    async def _wake(self, events: Channel[OutputEvent]) -> None:
        """Feed the held utterances' last hypotheses again, at the current stream time."""
        for utterance, segmenter in list(self._segmenters.items()):
            if isinstance(segmenter, JustInTimeSegmenter) and segmenter.held:
                hyp = self._last_target.get(utterance)
                if hyp is not None:
                    await self._on_target(hyp, events)

    async def _on_target(self, hyp: TextHypothesis, events: Channel[OutputEvent]) -> None:
        self._last_target[hyp.utterance] = hyp
        segmenter = self._segmenters.get(hyp.utterance)
        if segmenter is None:
            segmenter = self._segmenters[hyp.utterance] = make_segmenter(self.phrase_options)
        emitted_at = time.monotonic()
        now_s = self.clock.stamp(hyp.stream_pts) / STREAM_RATE
        phrases = segmenter.feed(hyp.committed, final=hyp.final, now_s=now_s,
                                 queued_until_s=self._queued_until)
        for phrase in phrases:
            queued = time.monotonic() - emitted_at
            t0 = time.perf_counter()
            now = self.clock.stamp(hyp.stream_pts) / STREAM_RATE
            speed = catch_up_speed(self._queued_until - now, self.catch_up)
            try:
                samples = await self.speak(phrase, speed)
            except SpeechpipeError as exc:
                await events.put(ErrorEvent(exc.code, str(exc), self.clock.stamp(hyp.stream_pts),
                                            hyp.utterance))
                continue
            if not len(samples):
                continue
            stamp = self.clock.stamp(hyp.stream_pts)
            self._queued_until = max(self._queued_until, stamp / STREAM_RATE) + (
                len(samples) / self.sample_rate
            )
            await events.put(
                SpeechChunk(
                    samples=samples,
                    sample_rate=self.sample_rate,
                    utterance=hyp.utterance,
                    text=phrase,
                    stream_pts=stamp,
                    timings=(StageTiming("queue.tts", queued),
                             StageTiming("tts", time.perf_counter() - t0)),
                )
            )
        if hyp.final:
            self._segmenters.pop(hyp.utterance, None)
            self._last_target.pop(hyp.utterance, None)
            await events.put(
                UtteranceEnd(
                    utterance=hyp.utterance,
                    stream_pts=self.clock.stamp(hyp.stream_pts),
                    source_text=self._source_text.pop(hyp.utterance, ""),
                    target_text=hyp.committed,
                )
            )
