"""Streaming ASR (and Whisper speech translation) over VAD-labeled audio.

``UtteranceDecoder`` is the synchronous core for one utterance: it holds the utterance's
audio, decides when a decode is due, builds the request (committed text forced as prefix) and
applies results through LocalAgreement, so captions only ever grow. ``AsrStage`` is the async
shell: it coalesces all audio that arrived during a decode into the next one, so a slow model
raises latency, not memory.

Decode schedule (stream time):
- every ``step_s`` of new audio while the speaker talks (partials, greedy);
- at a VAD ``pause``: everything heard so far is committed (a pause is a phrase boundary);
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
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from speechpipe.errors import SpeechpipeError, Superseded
from speechpipe.stages.agreement import normalize_word
from speechpipe.stages.channels import Channel, ChannelClosed
from speechpipe.stages.clock import StreamClock
from speechpipe.stages.commit import CommitPolicy, CommitPolicyName, align_commit_count
from speechpipe.stages.faithfulness import (
    FaithfulnessOptions,
    SpeechClassifier,
    SpeechEvidence,
    classify_utterance,
    count_words,
    guard_decodes,
)
from speechpipe.stages.frames import (
    STREAM_RATE,
    ErrorEvent,
    OutputEvent,
    StageTiming,
    TextHypothesis,
    VadEvent,
)
from speechpipe.stages.model_api import (
    DecodeTask,
    WhisperRequest,
    WhisperResult,
)
from speechpipe.stages.vad import LabeledAudio
from speechpipe.stages.window import quiet_tail

__all__ = [
    "AsrOptions", "AsrOptionsProvider", "FixedOptions", "QueuedDecodes", "UtteranceDecoder",
    "AsrStage", "Recognize", "align_commit_count",
]

Recognize = Callable[[WhisperRequest], Awaitable[WhisperResult]]


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


@dataclass(frozen=True, slots=True)
class AsrOptions:
    """Settings of the ASR stage: decode cadence, commit agreement, beams and caps."""
    step_s: float = 1.0  # re-decode cadence while speaking (see README: 0.5 vs 1.0)
    early_step_s: float = 0.5  # cadence until the first translated words are committed ...
    early_words: int = 2  # ... this many of them (the first phrase the listener hears)
    min_voiced_s: float = 0.3  # no decode before this much voiced audio
    agreement: int = 2  # LocalAgreement-n for source captions
    target_agreement: int = 2  # LocalAgreement-n for the translation (what gets spoken)
    agreement_lookback: int = 2  # also agree with up to this many older hypotheses
    pause_commit_margin_s: float = 0.15  # a decode this far past the pause heard the word end
    beam_size: int = 1  # partial decodes
    final_beam_size: int = 1  # decodes that commit everything (pause, end); see README
    tokens_per_second: float = 7.0  # decode length cap per second of uncommitted audio
    commit_on_pause: bool = True  # source captions: commit everything heard at a pause
    commit_target_on_pause: bool = True  # translation too (measured: BLEU and AL both better)
    language_lock_s: float = 1.5  # auto-detected language is fixed after this much audio
    keep_detected_language: bool = True  # later utterances reuse the language found first
    pre_roll_s: float = 0.3  # audio kept before the VAD's speech start
    min_utterance_voiced_s: float = 0.5  # shorter "utterances" are treated as noise
    partial_max_new_tokens: int = 16  # partials only need the next few words
    source_partials: bool = True  # False: partials decode the translation only (degrade)
    # what commits the translation between pauses (stages.commit): "agreement"
    # (LocalAgreement only) or "align" (also the words a single decode's alignment puts this
    # far before its audio end)
    commit_policy: CommitPolicyName = "agreement"
    align_margin_s: float = 1.0
    # bounded windows (docs/design.md, "Bounded windows"): after a pause or a cut has
    # committed everything, later decodes hear only the audio after it, with the committed
    # text as <|startofprev|> context; False: every decode hears the whole utterance
    windowing: bool = True
    # a window longer than this moves on to its latest full commit (a pause); without one
    # it is cut at a quiet moment. Shorter windows are re-decoded whole: later words
    # translate better while Whisper still hears the start of the sentence (docs/design.md)
    max_window_s: float = 10.0
    cut_grace_s: float = 2.0  # ... or this much later, whatever the audio
    context_tokens: int = 32  # committed-text tokens given as context (multiples of 8)
    cap_by_window: bool = True  # partials: new-token cap less the forced prefix's tokens

    def __post_init__(self) -> None:
        if self.commit_policy not in ("agreement", "align"):
            raise ValueError(
                f"asr.commit_policy must be agreement or align, not {self.commit_policy!r}")
        if self.windowing and not (self.max_window_s > 0 and self.cut_grace_s >= 0):
            raise ValueError("asr.max_window_s must be > 0 and asr.cut_grace_s >= 0")


class AsrOptionsProvider(Protocol):
    """Where a stage reads its effective options, once per decode."""

    def current(self) -> AsrOptions:
        """The options to use for the next decode."""
        ...


@dataclass(frozen=True, slots=True)
class FixedOptions:
    """An ``AsrOptionsProvider`` that always returns the same options."""
    options: AsrOptions = AsrOptions()

    def current(self) -> AsrOptions:
        """The fixed options."""
        return self.options


@dataclass
class UtteranceDecoder:
    """One utterance: audio, agreement state for source (and target) text, revisions."""

    utterance: int
    start_pts: int
    options: AsrOptions
    language: str | None
    translate: bool
    audio: list[np.ndarray] = field(default_factory=list)
    n_samples: int = 0
    voiced_samples: int = 0
    last_decode_end: int = -1
    last_voiced_end: int = 0
    language_locked: bool = False
    ended: bool = False
    end_pts: int = 0
    pause_pending: bool = False
    pause_pts: int = 0  # end of voiced audio before the pause
    last_truncated: bool = False  # the last decode hit its length cap
    committed_at: int = 0  # audio position of the last decode that committed everything
    revision: int = 0
    source: CommitPolicy = field(init=False)  # the current window's captions
    target: CommitPolicy = field(init=False)  # ... and translation
    # text committed before the window (its audio is no longer decoded): context
    source_context: str = ""
    target_context: str = ""
    window_pts: int = 0  # where the window starts (at least start_pts)
    # the latest full commit inside the window: (position, source words, target words of
    # the window committed up to it); the window may move on to it
    commit_point: tuple[int, int, int] | None = None
    window_voiced_from: int = 0  # voiced_samples when the window started
    windows: int = 1  # windows this utterance has had
    faithfulness: FaithfulnessOptions = field(default_factory=FaithfulnessOptions)
    speech: SpeechClassifier | None = None  # speech probability per 32 ms window
    evidence: SpeechEvidence | None = None  # made at the first audio (start_pts is final)

    def __post_init__(self) -> None:
        options = self.options
        self.source = CommitPolicy("agreement", options.agreement, options.agreement_lookback)
        self.target = CommitPolicy(options.commit_policy, options.target_agreement,
                                   options.agreement_lookback, options.align_margin_s)
        self.language_locked = self.language is not None

    @property
    def window_start(self) -> int:
        """Stream position where the current decode window starts."""
        return max(self.start_pts, self.window_pts)

    def text(self, side: str) -> str:
        """Everything committed on ``side`` (``source``/``target``) in this utterance."""
        context, policy = ((self.source_context, self.source) if side == "source"
                           else (self.target_context, self.target))
        return f"{context} {policy.committed_text}".strip()

    @property
    def end(self) -> int:
        """Stream position just past the last sample added to the utterance."""
        return self.start_pts + self.n_samples

    def add(self, samples: np.ndarray, voiced: int) -> None:
        """Append audio to the utterance and count ``voiced`` of its samples as speech; a
        window grown past ``max_window_s`` moves on to its latest full commit."""
        if len(samples):
            self.audio.append(samples)
            self.n_samples += len(samples)
            self._add_evidence(samples)
        self.voiced_samples += voiced
        if (self.options.windowing and self.commit_point is not None
                and self.end - self.window_start > self.options.max_window_s * STREAM_RATE):
            self._move_to_commit_point()

    def tasks(self, kind: str = "final") -> tuple[DecodeTask, ...]:
        """The Whisper tasks a decode of this ``kind`` runs, each with the window's committed
        text as forced prefix and the text committed before the window as context."""
        tasks = [DecodeTask("transcribe", self.source.committed_text, self.source_context)]
        if self.translate:
            tasks.append(DecodeTask("translate", self.target.committed_text,
                                    self.target_context))
            if kind == "partial" and not self.options.source_partials:
                del tasks[0]  # captions catch up at the next pause or the end
        return tuple(tasks)

    def due(self) -> str | None:
        """Which decode is due now: ``final``, ``pause``, ``cut``, ``partial`` or None."""
        options = self.options
        min_voiced = options.min_voiced_s * STREAM_RATE
        enough_voice = self.voiced_samples >= min_voiced
        if self.ended:
            return "final"
        if self.pause_pending and enough_voice and options.commit_on_pause:
            return "pause"
        window_voice = self.voiced_samples - self.window_voiced_from >= min_voiced
        if options.windowing and window_voice and self._cut_due():
            return "cut"
        spoken = self.text("target" if self.translate else "source")
        early = count_words(spoken) < options.early_words
        step = int((options.early_step_s if early else options.step_s) * STREAM_RATE)
        since = self.end - max(self.last_decode_end, self.window_start)
        if enough_voice and window_voice and since >= step:
            return "partial"
        return None

    def covered(self) -> bool:
        """Did the last decode already hear every voiced sample, and silence after it?"""
        margin = int(self.options.pause_commit_margin_s * STREAM_RATE)
        return (
            self.last_decode_end >= self.last_voiced_end + margin
            and self.last_decode_end > 0
            and not self.last_truncated
        )

    def window_too_quiet(self) -> bool:
        """A later window (after a pause or cut) with under ``min_voiced_s`` of speech: its
        decode would hear almost nothing but the context and invent from it."""
        return self.windows > 1 and (self.voiced_samples - self.window_voiced_from
                                     < self.options.min_voiced_s * STREAM_RATE)

    def _cut_due(self) -> bool:
        """A window without a pause is cut when it is long and its newest audio is quiet
        (``stages.window``), or when it is too long."""
        length = self.end - self.window_start
        if length < self.options.max_window_s * STREAM_RATE:
            return False
        if length >= (self.options.max_window_s + self.options.cut_grace_s) * STREAM_RATE:
            return True
        return quiet_tail(self._samples(self.window_start, self.end))

    def basis(self, kind: str) -> int:
        """Where the audio of this decode ends. A pause decode stops at the pause (plus a
        little silence), so committing everything never cuts a word that went on after it;
        every other decode hears all the audio there is."""
        if kind == "pause":
            return min(self.end, self.pause_pts + int(0.2 * STREAM_RATE))
        return self.end

    def _samples(self, start: int, end: int) -> np.ndarray:
        audio = np.concatenate(self.audio) if self.audio else np.zeros(0, np.int16)
        return audio[max(0, start - self.start_pts): max(0, end - self.start_pts)]

    def request(self, kind: str) -> WhisperRequest:
        """The Whisper request for a decode of this ``kind`` over the window's audio up to
        ``basis``."""
        basis = self.basis(kind)
        audio = self._samples(self.window_start, basis)
        if kind == "partial":
            cap = self.options.partial_max_new_tokens
        else:  # enough for the audio not yet committed, not for a loop
            uncommitted = (basis - max(self.window_start, self.committed_at)) / STREAM_RATE
            cap = 8 + int(self.options.tokens_per_second * uncommitted)
        return self._with_recovery(kind, WhisperRequest(
            audio=audio.astype(np.float32) / 32768.0,
            language=self.language if self.language_locked else None,
            tasks=self.tasks(kind),
            beam_size=self.options.beam_size if kind == "partial" else self.options.final_beam_size,
            tokens_per_second=self.options.tokens_per_second,
            max_new_tokens=cap,
            partial=kind == "partial",
            word_times=self._word_times(kind),
            max_context_tokens=self.options.context_tokens,
            cap_by_window=self.options.cap_by_window and kind == "partial",
        ))

    def _word_times(self, kind: str) -> tuple[str, ...]:
        """Tasks whose words need alignment times: the partials of a side whose commit
        policy uses them (``stages.commit``)."""
        if kind != "partial":
            return ()
        sides = [("transcribe", self.source)] + (
            [("translate", self.target)] if self.translate else [])
        return tuple(task for task, policy in sides if policy.needs_word_times)

    def apply(self, result: WhisperResult, kind: str, basis_pts: int) -> list[tuple[str, str, str]]:
        """Feed a decode result; return (side, committed, tentative) for each changed side."""
        result = self._guarded(result, basis_pts)
        self.last_decode_end = basis_pts
        self.last_truncated = any(d.truncated for d in result.decodes)
        if not self.language_locked:
            self.language = result.language
            if self.n_samples >= self.options.language_lock_s * STREAM_RATE:
                self.language_locked = True
        commit_all = kind in ("final", "pause", "cut")
        heard_s = (basis_pts - self.window_start) / STREAM_RATE
        changed = []
        for decode in result.decodes:
            side = "source" if decode.task == "transcribe" else "target"
            policy = self.source if side == "source" else self.target
            before = (self.text(side), policy.tentative_text)
            words = decode.continuation.split()
            if decode.glued and (commit_all or self.language_locked):
                self._glue(side, decode.glued)
            target_by_agreement = (
                kind == "pause" and decode.task == "translate"
                and not self.options.commit_target_on_pause
            )
            if commit_all and not target_by_agreement:
                policy.finalize(words)
            elif not self.language_locked:
                policy.tentative = words  # language still uncertain: show, never commit
            else:
                policy.update(words, decode.word_ends, heard_s)
            after = (self.text(side), policy.tentative_text)
            if after != before or kind == "final":
                changed.append((side, *after))
        if kind == "pause":
            self.pause_pending = False
        if commit_all:
            self.committed_at = basis_pts
            if kind == "cut":  # a long window without a pause: the next starts here
                self._advance(basis_pts)
            elif kind == "pause":
                self._mark_commit_point(basis_pts)
        return changed

    def _glue(self, side: str, fragment: str) -> None:
        """Punctuation right after the committed text: on the window's last committed word,
        or on the context's when the window has none yet (still append-only as a string)."""
        policy = self.source if side == "source" else self.target
        if policy.glue(fragment) or policy.committed or normalize_word(fragment):
            return
        if side == "source" and self.source_context:
            self.source_context += fragment
        elif side == "target" and self.target_context:
            self.target_context += fragment

    def _mark_commit_point(self, pts: int) -> None:
        """Everything heard up to ``pts`` is committed on both sides (a pause): a place the
        window can move on to later, without a word heard twice or lost."""
        if self.translate and not self.options.commit_target_on_pause and self.target.tentative:
            return  # the translation still holds words of this audio
        self.commit_point = (pts, len(self.source.committed), len(self.target.committed))

    def _move_to_commit_point(self) -> None:
        """Start the window at the latest full commit: the words committed up to it become
        context; words committed after it stay the window's forced prefix."""
        assert self.commit_point is not None
        pts, n_source, n_target = self.commit_point
        self.commit_point = None
        if pts <= self.window_start:
            return
        self.source_context = f"{self.source_context} {' '.join(self.source.drop(n_source))}"
        self.target_context = f"{self.target_context} {' '.join(self.target.drop(n_target))}"
        self.source_context, self.target_context = (self.source_context.strip(),
                                                    self.target_context.strip())
        self._start_window(pts)

    def _advance(self, pts: int) -> None:
        """Everything up to ``pts`` (the end of the audio) is committed on both sides: the
        next window starts there, with the committed text as context."""
        if not self.options.windowing or pts <= self.window_start:
            return
        self.source_context, self.target_context = self.text("source"), self.text("target")
        self.source.reset()
        self.target.reset()
        self.commit_point = None
        self._start_window(pts)

    def _start_window(self, pts: int) -> None:
        voiced_before = self._voiced_before(pts)
        self.window_pts = pts
        self.window_voiced_from = voiced_before
        self.last_truncated = False
        self.windows += 1

    def _voiced_before(self, pts: int) -> int:
        """Voiced samples of the utterance before ``pts`` (the audio after it counts as
        voiced in the share the whole utterance has, a good enough estimate)."""
        after = max(0, self.end - pts)
        share = self.voiced_samples / max(1, self.n_samples)
        return max(0, self.voiced_samples - int(after * share))

    # -- faithfulness (stages.faithfulness): never invent, never drop -------------------------
    def _add_evidence(self, samples: np.ndarray) -> None:
        if self.speech is None:
            return
        if self.evidence is None:
            self.evidence = SpeechEvidence(self.start_pts, self.speech,
                                           self.faithfulness.speech_threshold)
        self.evidence.add(samples)

    def _with_recovery(self, kind: str, request: WhisperRequest) -> WhisperRequest:
        """Decodes that commit everything also translate what a short translation left out."""
        options = self.faithfulness
        if kind == "partial" or not self.translate or not options.recover:
            return request
        return replace(request, recover_coverage=True, coverage_min_ratio=options.min_ratio,
                       coverage_min_words=options.min_source_words,
                       max_recoveries=options.max_recoveries)

    def _guarded(self, result: WhisperResult, basis_pts: int) -> WhisperResult:
        """The commit guard: no words for a span without speech, no translation beyond what
        the source side heard. The span is everything after the last full commit."""
        if not self.faithfulness.guard:
            return result
        speech_s = None
        if self.evidence is not None:
            speech_s = self.evidence.seconds(max(self.start_pts, self.committed_at), basis_pts)
        decodes = guard_decodes(
            result.decodes, speech_s, count_words(self.text("source")),
            count_words(self.text("target")), self.faithfulness,
        )
        return replace(result, decodes=tuple(decodes))

    def coverage(self) -> str:
        """``ok``, ``invented``, ``dropped`` or ``empty``: the committed translation against
        the committed captions (``stages.coverage.classify_utterance``)."""
        return classify_utterance(self.text("source"), self.text("target"),
                                  self.faithfulness.min_ratio, self.faithfulness.min_source_words)

    def commit_last(self, pause: bool = False) -> list[tuple[str, str, str]]:
        """Commit the last hypothesis without decoding (it already heard all the speech).
        At a pause the translation keeps its tentative words unless configured otherwise."""
        sides = [("source", self.source)] + ([("target", self.target)] if self.translate else [])
        out = []
        for side, policy in sides:
            if side == "target" and pause and not self.options.commit_target_on_pause:
                continue
            policy.finalize()
            out.append((side, self.text(side), ""))
        self.pause_pending = False
        if pause:  # the last decode heard everything up to its end
            self._mark_commit_point(self.last_decode_end)
        return out


@dataclass(eq=False)
class _InFlight:
    """A partial decode submitted while the stage goes on taking audio."""

    decoder: UtteranceDecoder
    request: WhisperRequest
    basis: int
    pending: asyncio.Future[WhisperResult]
    queued: float


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
        options: AsrOptions | AsrOptionsProvider = AsrOptions(),
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
        self.detected_language: str | None = None
        self.superseded = 0  # partial decodes dropped before they were computed

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
        await events.put(event)
        if event.kind == "start":
            if self._current is not None:
                self._end_current(event.pts)
            decoder = UtteranceDecoder(
                utterance=event.utterance,
                start_pts=event.pts,
                options=self.options,
                language=self.language or self.detected_language,
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
        if self.queue is not None and kind == "partial":
            self._launch(current)
        else:
            await self._retire(current, outbox, events)
            await self._step(current, outbox, events)

    def _launch(self, decoder: UtteranceDecoder) -> None:
        """Submit a partial decode in flight, or supersede the one still queued when a
        step's worth of newer audio has arrived since."""
        assert self.queue is not None
        inflight = self._inflight
        basis = decoder.basis("partial")
        queued = max(0.0, time.monotonic() - self._last_arrival)
        if inflight is None:
            request = decoder.request("partial")
            pending = asyncio.ensure_future(self.recognize(request))
            self._inflight = _InFlight(decoder, request, basis, pending, queued)
            return
        if inflight.decoder is not decoder or not self._due_since(decoder, inflight.basis):
            return  # wait for it
        request = decoder.request("partial")
        newer = self.queue.replace(inflight.request, request)
        if newer is None:
            return  # already being computed: its result comes first
        inflight.pending.add_done_callback(_consume)
        self.superseded += 1
        self._inflight = _InFlight(decoder, request, basis, asyncio.ensure_future(newer), queued)

    @staticmethod
    def _due_since(decoder: UtteranceDecoder, basis: int) -> bool:
        """Would a partial be due if the decode in flight (up to ``basis``) had landed?"""
        landed = decoder.last_decode_end
        decoder.last_decode_end = max(landed, basis)
        try:
            return decoder.due() == "partial"
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
                and self.queue is not None and self.queue.withdraw(inflight.request)):
            self._inflight = None
            inflight.pending.add_done_callback(_consume)
            self.superseded += 1
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
        outcome = await self._apply(decoder, "partial", inflight.basis, result, inflight.queued,
                                    events)
        if outcome is not None:
            await self._emit(decoder, "partial", inflight.basis, *outcome, outbox, events)

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
        if kind in ("final", "pause") and (decoder.covered() or too_little_voice):
            changed = decoder.commit_last(kind == "pause") if decoder.covered() else [
                ("source", decoder.text("source"), ""),
                ("target", decoder.text("target"), ""),
            ][: 2 if decoder.translate else 1]
            if kind == "pause":
                decoder.pause_pending = False
        else:
            request = decoder.request(kind)
            queued = max(0.0, time.monotonic() - self._last_arrival)
            try:
                result: WhisperResult | SpeechpipeError = await self.recognize(request)
            except Superseded:
                return  # dropped as stale: the next step decodes newer audio
            except SpeechpipeError as exc:
                result = exc
            outcome = await self._apply(decoder, kind, basis, result, queued, events)
            if outcome is None:
                return
            changed, timings = outcome
        await self._emit(decoder, kind, basis, changed, timings, outbox, events)

    async def _apply(
        self,
        decoder: UtteranceDecoder,
        kind: str,
        basis: int,
        result: WhisperResult | SpeechpipeError,
        queued: float,
        events: Channel[OutputEvent],
    ) -> tuple[list[tuple[str, str, str]], tuple[StageTiming, ...]] | None:
        if isinstance(result, SpeechpipeError):
            await events.put(ErrorEvent(result.code, str(result), self.clock.stamp(basis),
                                        decoder.utterance))
            if kind != "final":
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
        changed = decoder.apply(result, kind, basis)
        if (self.options.keep_detected_language and decoder.language_locked
                and self.language is None):
            self.detected_language = decoder.language
        return changed, timings

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
        kind: str,
        basis: int,
        changed: list[tuple[str, str, str]],
        timings: tuple[StageTiming, ...],
        outbox: Channel[TextHypothesis],
        events: Channel[OutputEvent],
    ) -> None:
        final = kind == "final"
        if final:
            decoder.revision += 1
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
                audio_start=decoder.start_pts,
                audio_end=basis,
                stream_pts=stamp,
                final=final,
                timings=timings if side == "source" else (),
            )
            await events.put(hypothesis)
            await outbox.put(hypothesis)
        await asyncio.sleep(0)
