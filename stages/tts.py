"""TTS stage: speak committed target text in phrase-sized pieces as soon as it is committed.

The stage only segments and stamps; synthesis (Piper, cached, resampled) is the injected
``speak`` coroutine, which runs the model off the event loop.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import numpy as np
from numpy.typing import NDArray

from speechpipe.errors import SpeechpipeError
from speechpipe.stages.channels import Channel
from speechpipe.stages.clock import StreamClock
from speechpipe.stages.frames import (
    ErrorEvent,
    OutputEvent,
    SpeechChunk,
    StageTiming,
    TextHypothesis,
    UtteranceEnd,
)
from speechpipe.stages.phrases import PhraseOptions, PhraseSegmenter

__all__ = ["TtsStage", "Speak"]

Speak = Callable[[str], Awaitable[NDArray[np.int16]]]


class TtsStage:
    def __init__(
        self,
        speak: Speak,
        clock: StreamClock,
        sample_rate: int,
        phrase_options: PhraseOptions = PhraseOptions(),
    ) -> None:
        self.speak = speak
        self.clock = clock
        self.sample_rate = sample_rate
        self.phrase_options = phrase_options
        self._segmenters: dict[int, PhraseSegmenter] = {}
        self._source_text: dict[int, str] = {}

    async def run(self, inbox: Channel[TextHypothesis], events: Channel[OutputEvent]) -> None:
        async for hypothesis in inbox:
            if hypothesis.side == "source":
                if hypothesis.final:
                    self._source_text[hypothesis.utterance] = hypothesis.committed
                continue
            await self._on_target(hypothesis, events)

    async def _on_target(self, hyp: TextHypothesis, events: Channel[OutputEvent]) -> None:
        segmenter = self._segmenters.setdefault(hyp.utterance, PhraseSegmenter(self.phrase_options))
        emitted_at = time.monotonic()
        for phrase in segmenter.feed(hyp.committed, final=hyp.final):
            queued = time.monotonic() - emitted_at
            t0 = time.perf_counter()
            try:
                samples = await self.speak(phrase)
            except SpeechpipeError as exc:
                await events.put(ErrorEvent(exc.code, str(exc), self.clock.stamp(hyp.stream_pts),
                                            hyp.utterance))
                continue
            if not len(samples):
                continue
            await events.put(
                SpeechChunk(
                    samples=samples,
                    sample_rate=self.sample_rate,
                    utterance=hyp.utterance,
                    text=phrase,
                    stream_pts=self.clock.stamp(hyp.stream_pts),
                    timings=(StageTiming("queue.tts", queued),
                             StageTiming("tts", time.perf_counter() - t0)),
                )
            )
        if hyp.final:
            self._segmenters.pop(hyp.utterance, None)
            await events.put(
                UtteranceEnd(
                    utterance=hyp.utterance,
                    stream_pts=self.clock.stamp(hyp.stream_pts),
                    source_text=self._source_text.pop(hyp.utterance, ""),
                    target_text=hyp.committed,
                )
            )
