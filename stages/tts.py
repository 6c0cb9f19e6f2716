"""TTS stage: speak committed target text in phrase-sized pieces as soon as it is committed.

The stage only segments and stamps; synthesis (Piper, cached, resampled) is the injected
``speak`` coroutine, which runs the model off the event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import numpy as np
from numpy.typing import NDArray

from speechpipe.errors import SpeechpipeError
from speechpipe.stages.catch_up_options import CatchUpOptions
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
    continuation_audio,
    is_continuation,
    make_segmenter,
    voice_text,
)

__all__ = ["TtsStage", "CaptionsOnly", "Speak", "CatchUpOptions", "catch_up_speed",
           "span_speed", "words_source_time", "phrase_speed"]

# speak(text, speed, due): ``due`` is the monotonic time the phrase's listener runs out of
# speech (a live session's queued speech ends then; None: not live, no deadline). One voice
# serves many sessions and takes the earliest due first (voices/tts_worker.py).
Speak = Callable[[str, float, float | None], Awaitable[NDArray[np.int16]]]


def catch_up_speed(backlog_s: float, options: CatchUpOptions) -> float:
    """The ``backlog`` rule: the speaking rate for a backlog of ``backlog_s`` seconds."""
    speed = 1.0
    for threshold, step_speed in zip(options.backlog_s, options.speeds, strict=True):
        if backlog_s >= threshold:
            speed = step_speed
    return speed


def span_speed(span_s: float, options: CatchUpOptions, finishing: bool = False) -> float:
    """The ``span`` rule: the speaking rate for an ear-voice span of ``span_s`` seconds
    (``finishing``: the speaker has stopped, the utterance's final hypothesis came)."""
    rise = min(1.0, max(0.0, (span_s - options.span_s) / options.ramp_s))
    speed = 1.0 + (options.max_speed - 1.0) * rise
    cap = max(options.max_speed, options.finish_speed if finishing else 1.0)
    if finishing:
        speed = max(speed, options.finish_speed)
    if options.speed_step > 0:
        speed = round(speed / options.speed_step) * options.speed_step
    return round(min(cap, max(1.0, speed)), 6)


def words_source_time(hyp: TextHypothesis, first_word: int, options: CatchUpOptions) -> float:
    """Stream seconds at which the speaker said word ``first_word`` of ``hyp.committed``:
    the hypothesis' text (committed, then tentative) spans ``audio_start..audio_end``; with
    ``source_time=words`` the word is placed in it by its position in the text."""
    end = hyp.audio_end / STREAM_RATE
    if options.source_time == "end":
        return end
    start = hyp.audio_start / STREAM_RATE
    total = len(hyp.committed.split()) + len(hyp.tentative.split())
    if total <= 0 or end <= start:
        return end
    return start + (end - start) * min(first_word, total) / total


def phrase_speed(options: CatchUpOptions, *, now_s: float, queued_until_s: float,
                 source_s: float, finishing: bool) -> float:
    """The speaking rate of the next phrase under ``options.mode`` (pure): ``source_s`` is
    when its words were said (``words_source_time``)."""
    if options.mode == "backlog":
        return catch_up_speed(queued_until_s - now_s, options)
    return span_speed(max(now_s, queued_until_s) - source_s, options, finishing)


class CaptionsOnly:
    """The TTS stage's place without speech (``SessionRequest.speech`` off): the captions
    reached the events from the ASR and MT stages already; it drains its inbox, then closes
    its outbox (the events channel) as the TTS stage does (the stage contract)."""

    async def run(self, inbox: Channel[TextHypothesis], outbox: Channel[OutputEvent],
                  events: Channel[OutputEvent] | None = None) -> None:
        """Read ``inbox`` to its end; close ``outbox``."""
        try:
            while True:
                try:
                    await inbox.get()
                except ChannelClosed:
                    return
        finally:
            outbox.close()


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
        self._handed: dict[int, int] = {}  # per open utterance: words cut into phrases so far

    async def run(self, inbox: Channel[TextHypothesis], outbox: Channel[OutputEvent],
                  events: Channel[OutputEvent] | None = None) -> None:
        """Speak the target hypotheses from ``inbox`` as ``SpeechChunk`` events into
        ``outbox``; close it when ``inbox`` is closed and drained (the stage contract,
        ``stages.stage``). The speech is the client's events: in a session ``outbox`` is
        the events channel, so closing it ends the session's events."""
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
        """Live sessions: seconds until held words may be cut without a new hypothesis (the
        queued speech is about to run out, or the output has been silent long enough for words
        that make no better phrase: ``JustInTimeSegmenter.wake_at``), or None when no words
        are held. Hypotheses can be seconds apart under load, and the final one comes only
        after the final decode, so held words cannot wait for the next one. Replays paced by
        the basis clock have no wall-clock stream time: their cuts happen as hypotheses
        arrive."""
        if not isinstance(self.clock, WallStreamClock):
            return None
        due = [at for u, s in self._segmenters.items()
               if isinstance(s, JustInTimeSegmenter) and u in self._last_target
               and (at := s.wake_at(self._queued_until)) is not None]
        if not due:
            return None
        now_s = self.clock.stamp(0) / STREAM_RATE
        return max(0.02, min(due) - now_s + 0.01)

    async def _wake(self, events: Channel[OutputEvent]) -> None:
        """Feed the held utterances' last hypotheses again, at the current stream time."""
        for utterance, segmenter in list(self._segmenters.items()):
            if isinstance(segmenter, JustInTimeSegmenter) and segmenter.held:
                hyp = self._last_target.get(utterance)
                if hyp is not None:
                    await self._on_target(hyp, events)

    def _runs_dry_at(self, now_s: float) -> float | None:
        """The monotonic time this session's listener will have heard all the speech sent
        so far (now, when nothing is queued): when the next phrase is needed. None when the
        stream has no wall clock (replays paced by the basis clock)."""
        if not isinstance(self.clock, WallStreamClock):
            return None
        return time.monotonic() + max(0.0, self._queued_until - now_s)

    async def _on_target(self, hyp: TextHypothesis, events: Channel[OutputEvent]) -> None:
        self._last_target[hyp.utterance] = hyp
        segmenter = self._segmenters.get(hyp.utterance)
        if segmenter is None:
            segmenter = self._segmenters[hyp.utterance] = make_segmenter(self.phrase_options)
        emitted_at = time.monotonic()
        now_s = self.clock.stamp(hyp.stream_pts) / STREAM_RATE
        caught_up = hyp.final or (not hyp.tentative.strip() and bool(hyp.committed))
        flush = hyp.final or (caught_up and self.phrase_options.flush_when_caught_up)
        finishing = hyp.final or (caught_up and self.catch_up.finish_when_caught_up)
        phrases = segmenter.feed(hyp.committed, final=flush, now_s=now_s,
                                 queued_until_s=self._queued_until)
        for index, phrase in enumerate(phrases):
            ends_utterance = hyp.final and index == len(phrases) - 1
            queued = time.monotonic() - emitted_at
            t0 = time.perf_counter()
            now = self.clock.stamp(hyp.stream_pts) / STREAM_RATE
            first_word = self._handed.get(hyp.utterance, 0)
            self._handed[hyp.utterance] = first_word + len(phrase.split())
            speed = phrase_speed(
                self.catch_up, now_s=now, queued_until_s=self._queued_until,
                source_s=words_source_time(hyp, first_word, self.catch_up), finishing=finishing)
            try:
                samples = await self.speak(voice_text(phrase, ends_utterance), speed,
                                           self._runs_dry_at(now))
            except SpeechpipeError as exc:
                await events.put(ErrorEvent(exc.code, str(exc), self.clock.stamp(hyp.stream_pts),
                                            hyp.utterance))
                continue
            if not len(samples):
                continue
            if is_continuation(phrase, ends_utterance):  # the sentence goes on: no pause
                samples = continuation_audio(samples, self.sample_rate,
                                             self.phrase_options.continuation_tail_s)
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
            self._handed.pop(hyp.utterance, None)
            await events.put(
                UtteranceEnd(
                    utterance=hyp.utterance,
                    stream_pts=self.clock.stamp(hyp.stream_pts),
                    source_text=self._source_text.pop(hyp.utterance, ""),
                    target_text=hyp.committed,
                )
            )
