"""Streaming ASR (and Whisper speech translation) over VAD-labeled audio.

``UtteranceDecoder`` (``stages/utterance.py``) is the synchronous core for one utterance: it
holds the utterance's audio and decode window, decides when a decode is due, builds the
request and applies results through the commit policies, so captions only ever grow.
``AsrStage`` is the async shell: it coalesces all audio that arrived during a decode into the
next one, so a slow model raises latency, not memory.

Decode schedule (stream time):
- every ``step_s`` of new audio while the speaker talks (partials, greedy);
- at a VAD ``hush`` (``vad.hush_ms`` of silence): at once, so that when the silence becomes
  a ``pause``, its decode is already done or under way;
- at a VAD ``pause``: everything heard so far is committed (a pause is a phrase boundary);
- ``cut``: a window ``max_window_s`` long without a pause, at a quiet moment: everything is
  committed and the next window starts there (``docs/design.md``, "Bounded windows");
- at the VAD ``end``: the final decode (``final_beam_size``). When the last decode already
  covered all voiced audio, its hypothesis is committed without decoding again.

Options are read per decode from a provider (``AsrOptionsProvider``), so a server can step a
live session down its degrade ladder and back. With a shared worker that can supersede
queued work (``QueuedDecodes``), a partial decode runs *in flight*: the stage keeps taking
audio meanwhile, and when the utterance is due again while that decode still waits in the
queue, a newer request replaces it (the old one is never computed). At most one decode per
session is outstanding, so every result applies to the committed text it was asked with.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from speechpipe.errors import SpeechpipeError, Superseded
from speechpipe.stages.asr_options import AsrOptions, AsrOptionsProvider, FixedOptions
from speechpipe.stages.channels import Channel, ChannelClosed
from speechpipe.stages.clock import StreamClock
from speechpipe.stages.commit import align_commit_count
from speechpipe.stages.faithfulness import FaithfulnessOptions, SpeechClassifier, count_words
from speechpipe.stages.frames import (
    STREAM_RATE,
    ErrorEvent,
    OutputEvent,
    StageTiming,
    TextHypothesis,
    VadEvent,
)
from speechpipe.stages.language_vote import LanguageVote
from speechpipe.stages.model_api import (
    DecodeKind,
    WhisperRequest,
    WhisperResult,
)
from speechpipe.stages.utterance import UtteranceDecoder
from speechpipe.stages.vad import LabeledAudio

__all__ = [
    "AsrOptions", "AsrOptionsProvider", "FixedOptions", "QueuedDecodes", "UtteranceDecoder",
    "AsrStage", "Recognize", "align_commit_count", "overtakes_partial",
]

Recognize = Callable[[WhisperRequest], Awaitable[WhisperResult]]

# decode kinds that run in flight on a shared worker while the stage goes on taking audio
_IN_FLIGHT_KINDS = (DecodeKind.PARTIAL, DecodeKind.HUSH)


class QueuedDecodes(Protocol):
    """A shared worker's hold on requests still waiting in its queue (``SessionAsr``)."""

    def replace(
        self, old: WhisperRequest, new: WhisperRequest
    ) -> Awaitable[WhisperResult] | None:
        """Swap a still-queued partial for ``new`` (``old``'s caller gets ``Superseded``);
        None when ``old`` is already being computed."""
        ...

    def withdraw(self, old: WhisperRequest) -> bool:
        """Drop a still-queued partial; False when it is already being computed."""
        ...


@dataclass(eq=False)
class _InFlight:
    """A partial (or hush) decode submitted while the stage goes on taking audio."""

    decoder: UtteranceDecoder
    request: WhisperRequest
    basis: int
    pending: asyncio.Future[WhisperResult]
    queued: float
    kind: DecodeKind = DecodeKind.PARTIAL


def _marked(decoder: UtteranceDecoder, kind: DecodeKind) -> WhisperRequest:
    """``decoder``'s request, marked ``opening`` when it is a partial of an utterance with
    nothing committed yet on the side the listener hears: its first words, which a shared
    worker serves with the finals, ahead of partials that only refresh tentative text
    (``models.workers.batching.decode_deadline_s``). Only the order decodes run in changes, never
    what they compute or commit."""
    request = decoder.request(kind)
    if request.partial and not decoder.text("target" if decoder.translate else "source"):
        return dataclasses.replace(request, opening=True)
    return request


def overtakes_partial(decoder: UtteranceDecoder, partial_basis: int) -> bool:
    """Does the decode now due for ``decoder`` go ahead without the partial that is running
    up to ``partial_basis`` (pure)? Only a pause or final decode does, and only when that
    partial will not have heard every voiced sample and the silence after it (``covered``):
    then the decode now due runs whatever the partial says, and waiting for it only adds
    its remaining time to the commit (``asr.commit_overtakes_partial``)."""
    return (decoder.options.commit_overtakes_partial
            and decoder.due() in (DecodeKind.PAUSE, DecodeKind.FINAL)
            and not decoder.hears_voice_end(partial_basis))


def _consume(future: asyncio.Future[WhisperResult]) -> None:
    """Done-callback for a dropped decode: retrieve its outcome so nothing is logged."""
    if not future.cancelled():
        future.exception()


class AsrStage:
    """Async shell around ``UtteranceDecoder``; one utterance at a time, in stream order."""

    def __init__(
        self,
        recognize: Recognize,
        clock: StreamClock,
        *,
        options: AsrOptions | AsrOptionsProvider | None = None,
        language: str | None = None,
        translate: bool = True,
        target_language: str = "en",
        queue: QueuedDecodes | None = None,
        faithfulness: FaithfulnessOptions | None = None,
        speech: SpeechClassifier | None = None,
    ) -> None:
        self.recognize = recognize
        self.faithfulness = faithfulness or FaithfulnessOptions()
        self.speech = speech  # speech probability per 32 ms window (None: no speech rule)
        self.incomplete = 0  # utterances whose translation stayed short (error events sent)
        self.clock = clock
        options = AsrOptions() if options is None else options
        self.provider: AsrOptionsProvider = (
            FixedOptions(options) if isinstance(options, AsrOptions) else options
        )
        self.language = language
        self.translate = translate
        self.target_language = target_language
        self.queue = queue  # set: partials run in flight and can be superseded
        self._history: deque[np.ndarray] = deque()
        self._history_samples = 0
        self._history_end = 0
        self._current: UtteranceDecoder | None = None
        self._closed: deque[UtteranceDecoder] = deque()
        self._inflight: _InFlight | None = None
        self._last_arrival = time.monotonic()
        # ``source_lang=auto``: the language the session keeps (found with confidence), and
        # the votes of its utterances so far (``stages.language_vote``), which an utterance
        # that must detect again starts from
        self.detected_language: str | None = None
        self.detected_confidence: float | None = None
        self.language_evidence = LanguageVote()
        self.superseded = 0  # partial decodes dropped before they were computed
        self.overtaken = 0  # running partials a pause or final decode did not wait for

    @property
    def options(self) -> AsrOptions:
        """The effective options, read from the provider on each access."""
        return self.provider.current()

    async def run(
        self,
        inbox: Channel[LabeledAudio],
        outbox: Channel[TextHypothesis],
        events: Channel[OutputEvent],
    ) -> None:
        """Decode labeled audio into hypotheses until the inbox closes; then close the outbox."""
        try:
            finished = False
            while not finished:
                try:
                    batch = await self._next_audio(inbox)
                except ChannelClosed:
                    finished = True
                    batch = []
                for item in batch:
                    await self._intake(item, events)
                if finished and self._current is not None:
                    self._end_current(self._current.end)
                await self._decode_due(outbox, events)
        finally:
            if self._inflight is not None:
                self._inflight.pending.cancel()
                self._inflight = None
            outbox.close()

    async def _next_audio(self, inbox: Channel[LabeledAudio]) -> list[LabeledAudio]:
        """The audio that arrived; with a partial in flight, also returns (maybe empty) when
        that decode finishes first. Cancel-safe: ``Channel.get_batch`` loses nothing."""
        inflight = self._inflight
        if inflight is None:
            return await inbox.get_batch()
        if inflight.pending.done():
            return await inbox.get_batch() if len(inbox) else []
        getter = asyncio.ensure_future(inbox.get_batch())
        try:
            await asyncio.wait((getter, inflight.pending), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not getter.done():
                getter.cancel()
        if getter.done() and not getter.cancelled():
            return getter.result()
        return []

    # -- intake --------------------------------------------------------------------------
    async def _intake(self, item: LabeledAudio, events: Channel[OutputEvent]) -> None:
        self._last_arrival = item.arrived
        cursor = item.pts
        for event in item.events:
            offset = max(0, min(len(item.samples), event.detected_at - item.pts))
            self._add_audio(item.samples[cursor - item.pts : offset], cursor, item)
            cursor = item.pts + offset
            await self._on_vad(event, events)
        self._add_audio(item.samples[cursor - item.pts :], cursor, item)

    def _add_audio(self, samples: np.ndarray, pts: int, item: LabeledAudio) -> None:
        if not len(samples):
            return
        # voiced share is only known per labeled chunk: spread it proportionally
        voiced = int(item.voiced_samples * len(samples) / max(1, len(item.samples)))
        if self._current is not None:
            self._current.add(samples, voiced)
        self._history.append(samples)
        self._history_samples += len(samples)
        self._history_end = pts + len(samples)
        keep = int(self.options.pre_roll_s * STREAM_RATE) + int(1.0 * STREAM_RATE)
        while self._history and self._history_samples - len(self._history[0]) >= keep:
            self._history_samples -= len(self._history.popleft())

    async def _on_vad(self, event: VadEvent, events: Channel[OutputEvent]) -> None:
        if event.kind == "hush":  # the stage's own cue, not a boundary anyone else sees
            if self._current is not None and event.utterance == self._current.utterance:
                self._current.hush_pending = True
                self._current.hush_at = event.detected_at
            return
        await events.put(event)
        if event.kind == "start":
            if self._current is not None:
                self._end_current(event.pts)
            decoder = UtteranceDecoder(
                utterance=event.utterance,
                start_pts=event.pts,
                options=self.options,
                language=self.language or self.detected_language,
                language_confidence=(self.detected_confidence if self.language is None
                                     else None),
                vote=(self.language_evidence.copy()
                      if self.options.keep_detected_language else LanguageVote()),
                watch_switch=self.language is None and self.detected_language is not None,
                translate=self.translate,
                faithfulness=self.faithfulness,
                speech=self.speech if self.faithfulness.guard else None,
            )
            # seed with history from the start (pre-roll and detection delay)
            seed = self._history_audio(event.pts - int(self.options.pre_roll_s * STREAM_RATE))
            decoder.start_pts = self._history_end - len(seed)
            # only the VAD's start window is known to be voiced
            decoder.add(seed, min(len(seed), max(0, event.detected_at - event.pts)))
            self._current = decoder
        elif self._current is not None and event.utterance == self._current.utterance:
            if event.kind == "pause":
                current = self._current
                current.last_voiced_end = event.pts
                # a pause before enough speech is no phrase boundary; never a stale one either
                current.pause_pending = current.voiced_samples >= (
                    self.options.min_voiced_s * STREAM_RATE
                )
                current.pause_pts = event.pts
            elif event.kind == "end":
                self._current.last_voiced_end = event.pts
                self._end_current(event.detected_at)

    def _history_audio(self, from_pts: int) -> np.ndarray:
        if not self._history:
            return np.zeros(0, np.int16)
        audio = np.concatenate(self._history)
        start = self._history_end - len(audio)
        return audio[max(0, from_pts - start) :]

    def _end_current(self, end_pts: int) -> None:
        assert self._current is not None
        self._current.ended = True
        self._current.end_pts = end_pts
        if self._current.last_voiced_end == 0:
            self._current.last_voiced_end = self._current.end
        self._closed.append(self._current)
        self._current = None

    # -- decoding ------------------------------------------------------------------------
    async def _decode_due(
        self, outbox: Channel[TextHypothesis], events: Channel[OutputEvent]
    ) -> None:
        if self._inflight is not None and self._inflight.pending.done():
            await self._land(outbox, events)
        while self._closed:
            decoder = self._closed.popleft()
            await self._retire(decoder, outbox, events)
            decoder.options = self.options
            await self._step(decoder, outbox, events)
        current = self._current
        if current is None:
            return
        current.options = self.options
        kind = current.due()
        if kind is None:
            return
        if self.queue is not None and kind in _IN_FLIGHT_KINDS:
            self._launch(current, kind)
        else:
            await self._retire(current, outbox, events)
            await self._step(current, outbox, events)

    def _launch(self, decoder: UtteranceDecoder, kind: DecodeKind = DecodeKind.PARTIAL) -> None:
        """Submit a partial (or hush) decode in flight, or supersede the partial still queued
        when a step's worth of newer audio (or a hush) has arrived since."""
        assert self.queue is not None
        inflight = self._inflight
        basis = decoder.basis(kind)
        queued = max(0.0, time.monotonic() - self._last_arrival)
        if inflight is None:
            request = _marked(decoder, kind)
            pending = asyncio.ensure_future(self.recognize(request))
            self._inflight = _InFlight(decoder, request, basis, pending, queued, kind)
            return
        if inflight.decoder is not decoder or not self._due_since(decoder, inflight.basis):
            return  # wait for it
        request = _marked(decoder, kind)
        newer = self.queue.replace(inflight.request, request)
        if newer is None:
            return  # already being computed (or a hush decode): its result comes first
        inflight.pending.add_done_callback(_consume)
        self.superseded += 1
        self._inflight = _InFlight(decoder, request, basis, asyncio.ensure_future(newer), queued,
                                   kind)

    @staticmethod
    def _due_since(decoder: UtteranceDecoder, basis: int) -> bool:
        """Would a partial be due if the decode in flight (up to ``basis``) had landed?"""
        landed = decoder.last_decode_end
        decoder.last_decode_end = max(landed, basis)
        try:
            return decoder.due() in _IN_FLIGHT_KINDS
        finally:
            decoder.last_decode_end = landed

    async def _retire(
        self, decoder: UtteranceDecoder, outbox: Channel[TextHypothesis],
        events: Channel[OutputEvent],
    ) -> None:
        """Nothing may be in flight before a sequential decode: withdraw this decoder's
        queued partial (the pause/final decode supersedes it), or wait for its result."""
        inflight = self._inflight
        if inflight is None:
            return
        if (inflight.decoder is decoder and not inflight.pending.done()
                and self.queue is not None):
            if self.queue.withdraw(inflight.request):
                self.superseded += 1
            elif inflight.kind == DecodeKind.PARTIAL and overtakes_partial(decoder, inflight.basis):
                # already running, and it did not hear up to the pause: its result would be
                # decoded over at once, so the commit does not wait for it
                self.overtaken += 1
            else:
                await self._land(outbox, events)
                return
            self._inflight = None
            inflight.pending.add_done_callback(_consume)
            return
        await self._land(outbox, events)

    async def _land(self, outbox: Channel[TextHypothesis], events: Channel[OutputEvent]) -> None:
        """Wait for the in-flight partial and apply it."""
        inflight = self._inflight
        assert inflight is not None
        try:
            result: WhisperResult | SpeechpipeError = await inflight.pending
        except Superseded:
            self._inflight = None
            return
        except SpeechpipeError as exc:
            result = exc
        self._inflight = None
        decoder = inflight.decoder
        kind = inflight.kind
        outcome = await self._apply(decoder, kind, inflight.basis, result, inflight.queued,
                                    events)
        if outcome is None:
            return
        changed, timings = outcome
        if (kind == DecodeKind.HUSH and decoder.due() == DecodeKind.PAUSE and decoder.covered()
                and decoder.language_to_redecode() is None):
            # the pause came while the hush decode ran: commit its hypothesis now, in one
            # hypothesis with nothing tentative (what the voice speaks as the finish), not as
            # a partial first and the commit a moment later
            kind, changed = DecodeKind.PAUSE, decoder.commit_last(pause=True)
        await self._emit(decoder, kind, inflight.basis, changed, timings, outbox, events)

    async def _step(
        self,
        decoder: UtteranceDecoder,
        outbox: Channel[TextHypothesis],
        events: Channel[OutputEvent],
    ) -> None:
        kind = decoder.due()
        if kind is None:
            return
        too_little_voice = (
            decoder.voiced_samples < self.options.min_utterance_voiced_s * STREAM_RATE
            or decoder.window_too_quiet()
        )
        basis = decoder.basis(kind)
        timings: tuple[StageTiming, ...] = ()
        # a last hypothesis in another language than the vote's leader is decoded again in it
        commits = kind in (DecodeKind.FINAL, DecodeKind.PAUSE)
        redecode = (decoder.language_to_redecode() if commits and not too_little_voice
                    else None)
        covered = decoder.covered() and redecode is None
        if commits and (covered or too_little_voice):
            changed = decoder.commit_last(kind == DecodeKind.PAUSE) if covered else [
                ("source", decoder.text("source"), ""),
                ("target", decoder.text("target"), ""),
            ][: 2 if decoder.translate else 1]
            if kind == DecodeKind.PAUSE:
                decoder.pause_pending = False
        else:
            decoder.commit_in = decoder.commit_in or redecode
            outcome = await self._decode(decoder, kind, basis, events)
            if outcome is not None and decoder.commit_in is not None:
                # it came out in another language than the vote's leader: once more, in it
                first = {change[0]: change for change in outcome[0]}
                outcome = await self._decode(decoder, kind, basis, events)
                if outcome is not None:
                    first.update({change[0]: change for change in outcome[0]})
                    outcome = (list(first.values()), outcome[1])
            if outcome is None:
                return
            changed, timings = outcome
        await self._emit(decoder, kind, basis, changed, timings, outbox, events)

    async def _decode(
        self, decoder: UtteranceDecoder, kind: DecodeKind, basis: int,
        events: Channel[OutputEvent],
    ) -> tuple[list[tuple[str, str, str]], tuple[StageTiming, ...]] | None:
        """One sequential decode of ``kind``, applied; None when it was dropped or failed
        (a partial's failure; a final's commits its last hypothesis)."""
        request = _marked(decoder, kind)
        queued = max(0.0, time.monotonic() - self._last_arrival)
        try:
            result: WhisperResult | SpeechpipeError = await self.recognize(request)
        except Superseded:
            return None  # dropped as stale: the next step decodes newer audio
        except SpeechpipeError as exc:
            result = exc
        return await self._apply(decoder, kind, basis, result, queued, events)

    async def _apply(
        self,
        decoder: UtteranceDecoder,
        kind: DecodeKind,
        basis: int,
        result: WhisperResult | SpeechpipeError,
        queued: float,
        events: Channel[OutputEvent],
    ) -> tuple[list[tuple[str, str, str]], tuple[StageTiming, ...]] | None:
        if isinstance(result, SpeechpipeError):
            await events.put(ErrorEvent(result.code, str(result), self.clock.stamp(basis),
                                        decoder.utterance))
            if kind != DecodeKind.FINAL:
                decoder.last_decode_end = basis
                decoder.pause_pending = False
                return None
            return decoder.commit_last(), ()
        timings = (
            StageTiming("queue.asr", queued),
            *(StageTiming(k, v) for k, v in result.timings.items()),
        )
        if decoder.evidence is not None:
            await asyncio.to_thread(decoder.evidence.update)
        wrong_before = decoder.wrong_language
        changed = decoder.apply(result, kind, basis)
        if decoder.wrong_language > wrong_before:
            # word counts only: nothing spoken goes into the message
            await events.put(ErrorEvent(
                "translation_wrong_language",
                "a translation came out in the spoken language, not English, and was not "
                "spoken", self.clock.stamp(basis), decoder.utterance))
        if decoder.detecting:
            self._learn_language(decoder, kind)
        return changed, timings

    def _learn_language(self, decoder: UtteranceDecoder, kind: DecodeKind) -> None:
        """What the session keeps of an utterance that detected its language: the language,
        once found with confidence (``asr.keep_detected_language``: later utterances are
        decoded in it from their first words); else, at the utterance's end, its votes, so
        the next utterance detects again from them instead of from nothing."""
        options = self.options
        if not options.keep_detected_language:
            return
        confidence = decoder.language_confidence or 0.0
        if decoder.language_locked and confidence >= options.language_confident:
            self.detected_language = decoder.language
            self.detected_confidence = confidence
        elif kind == DecodeKind.FINAL:
            if decoder.switched:  # the kept language is no longer spoken: detect again
                self.detected_language = self.detected_confidence = None
            self.language_evidence = decoder.vote.carried()

    async def _retranslate_missing(self, decoder: UtteranceDecoder) -> bool:
        """An utterance whose final translation is still much shorter than its captions
        (``translation_incomplete``): translate its whole audio again in one decode (beam,
        the engine's own recovery) and commit what that says after the words already
        committed (``stages.coverage.missing_tail``), so the listener hears it instead of
        only being told. Returns whether words were added. At most one decode per utterance;
        a failure only means the utterance stays short."""
        if (not decoder.translate or not self.faithfulness.recover
                or decoder.coverage() != "dropped"):
            return False
        request = decoder.retranslation_request()
        try:
            result = await self.recognize(request)
        except SpeechpipeError:
            return False
        decode = next((d for d in result.decodes if d.task == "translate"), None)
        if decode is None or decode.suppressed or decode.wrong_language:
            return False
        fresh = f"{decode.glued} {decode.continuation}".strip()
        return decoder.append_missing(fresh)

    async def _report_coverage(
        self, decoder: UtteranceDecoder, basis: int, events: Channel[OutputEvent]
    ) -> None:
        """Never drop a span silently: a final translation still much shorter than its
        captions (after recovery) is reported as a ``translation_incomplete`` error event
        (word counts only: nothing spoken goes into the message)."""
        if not decoder.translate or decoder.coverage() != "dropped":
            return
        self.incomplete += 1
        await events.put(ErrorEvent(
            "translation_incomplete",
            f"the translation covers {count_words(decoder.text('target'))} words of "
            f"{count_words(decoder.text('source'))} heard",
            self.clock.stamp(basis), decoder.utterance,
        ))

    async def _emit(
        self,
        decoder: UtteranceDecoder,
        kind: DecodeKind,
        basis: int,
        changed: list[tuple[str, str, str]],
        timings: tuple[StageTiming, ...],
        outbox: Channel[TextHypothesis],
        events: Channel[OutputEvent],
    ) -> None:
        final = kind == DecodeKind.FINAL
        if final:
            decoder.revision += 1
            if await self._retranslate_missing(decoder):
                changed = [c for c in changed if c[0] != "target"] + [
                    ("target", decoder.text("target"), "")]
            await self._report_coverage(decoder, basis, events)
        stamp = self.clock.stamp(basis)
        for side, committed, tentative in changed:
            if not final:
                decoder.revision += 1
            hypothesis = TextHypothesis(
                side=side,  # type: ignore[arg-type]
                utterance=decoder.utterance,
                revision=decoder.revision,
                committed=committed,
                tentative=tentative,
                language=(decoder.language or "") if side == "source" else self.target_language,
                language_confidence=decoder.language_confidence if side == "source" else None,
                audio_start=decoder.start_pts,
                audio_end=basis,
                stream_pts=stamp,
                final=final,
                timings=timings if side == "source" else (),
            )
            await events.put(hypothesis)
            await outbox.put(hypothesis)
        await asyncio.sleep(0)
