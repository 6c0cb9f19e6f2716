"""Incremental text MT: committed source text in, committed + tentative target text out.

The core, ``IncrementalTextTranslation``, is synchronous and does no I/O: ``update()`` turns the
utterance's committed source into translation requests, the caller runs them, ``apply()``
folds the results in. ``TextMtStage`` is the async shell that moves hypotheses through it.

Policy, per utterance:

- Each request translates source text with the target words committed so far forced as the
  ``target_prefix``, so committed target is never contradicted. Target words are committed by
  LocalAgreement-n over successive continuations (n=2 by default), or, with
  ``hold_words=N``, by hold-N: each update's continuation but its last N words.
- **Look-ahead agreement** (``lookahead``, on by default): an open update whose source
  hypothesis has tentative words also translates the open segment followed by them, with the
  same forced prefix, and commits the head of the committed source's translation that the
  look-ahead translation shares. Under LocalAgreement-2 alone a caption commit's words wait
  for the next caption commit (a segment's first commit has no earlier update to agree
  with); the look-ahead supplies that second hypothesis in the same update. Only words of
  the committed source's own translation commit, so nothing rests on unheard audio.
- **A pause commits the translation** (``commit_when_caught_up``): an update whose source
  hypothesis has nothing tentative (the captions committed everything heard, as at a pause)
  commits the open segment's whole translation, without waiting for an update after the
  pause to agree. The segment stays open.
- **Segments keep the work per update bounded.** The committed source is cut into segments at
  sentence ends (``. ! ?``; at least ``min_segment_words``), at clause ends (``, ; :``) once a
  segment is ``clause_min_words`` long, and unconditionally at ``max_segment_words``. Committed
  source never changes, so a cut is final: the segment is translated one last time (forcing its
  committed target) and *all* of that translation is committed. From then on only the open
  segment after it is translated. An update therefore costs O(segment length), not
  O(utterance length); a long monologue without pauses costs the same per update as a short
  one. The price: the MT model sees no context across a cut, as with sentence-level MT.
- At the utterance end (``final=True``) the open segment gets its final translation the same
  way and everything is committed.

What equality holds with deterministic (greedy) decoding: for every segment, its final target
is ``committed + continuation`` where ``continuation`` is what the translator returns for the
*whole* segment source with ``target_prefix=committed`` (the words committed for that segment
before it closed). So the utterance's final target is the concatenation of those forced full
re-translations; for an utterance that is one segment, it is exactly the forced full
re-translation of the final source. If the model continues inside the last committed word
(``joins_prefix``), that fragment is kept as a separate word: committed words are never rewritten.

The translation memory (``TranslationMemory``) is asked for every segment before MT. A hit
whose target starts with the words already committed for that segment replaces the MT call;
segments that needed MT are remembered when they close. ``misses`` therefore count closed
segments that went to MT, ``hits`` count MT calls avoided.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from speechpipe.errors import SpeechpipeError
from speechpipe.stages.agreement import LocalAgreement, common_prefix_length, normalize_word
from speechpipe.stages.channels import Channel, ChannelClosed
from speechpipe.stages.clock import StreamClock
from speechpipe.stages.frames import ErrorEvent, OutputEvent, StageTiming, TextHypothesis
from speechpipe.stages.model_api import TextMtRequest, TextMtResult
from speechpipe.stages.text_mt_options import TextMtOptions
from speechpipe.stages.translation_memory import TranslationMemory

__all__ = [
    "TextMtOptions",
    "TargetUpdate",
    "IncrementalTextTranslation",
    "TextMtStage",
    "Translate",
]

_LOGGER = logging.getLogger(__name__)

_SENTENCE_END = (".", "!", "?", "…", "。", "！", "？")
_CLAUSE_END = (",", ";", ":", "，", "；", "、")
_CLOSERS = "\"'”’)]»」』"

Translate = Callable[[TextMtRequest], Awaitable[TextMtResult]]


@dataclass(frozen=True, slots=True)
class TargetUpdate:
    """The target side after ``apply()``: ``changed`` is false when nothing moved."""

    committed: str
    tentative: str
    final: bool
    changed: bool
    newly_committed: tuple[str, ...] = ()


@dataclass(slots=True)
class _Job:
    kind: Literal["open", "close"]
    source: str
    prefix: list[str]
    end: int
    remembered: list[str] | None = None
    lookahead: bool = False  # an open job whose second request adds the tentative words


@dataclass(slots=True)
class _Pending:
    jobs: list[_Job]
    words: int
    final: bool
    source_lang: str
    requests: int = field(default=0)
    caught_up: bool = False


class IncrementalTextTranslation:
    """The incremental MT policy for one stream of utterances (see module docstring)."""

    def __init__(
        self,
        source_lang: str,
        target_lang: str,
        *,
        memory: TranslationMemory | None = None,
        model_id: str = "",
        options: TextMtOptions | None = None,
    ) -> None:
        self.source_lang = source_lang
        self.target_lang = target_lang
        self.memory = memory
        self.model_id = model_id
        self.options = options or TextMtOptions()
        self.reset()

    def reset(self) -> None:
        """Start a new utterance."""
        self._agreement = LocalAgreement(self.options.agreement)
        self._closed: list[str] = []  # target words of closed segments
        self._seg_start = 0  # index of the open segment's first source word
        self._seen_words = 0
        self._final = False
        self._pending: _Pending | None = None
        self._last: tuple[str, str] = ("", "")

    @property
    def committed(self) -> str:
        """The committed target text."""
        return " ".join([*self._closed, *self._agreement.committed])

    @property
    def tentative(self) -> str:
        """The tentative target text (none shown without ``show_tentative``)."""
        return self._agreement.tentative_text if self.options.show_tentative else ""

    @property
    def final(self) -> bool:
        """True once the utterance's translation is complete."""
        return self._final

    def update(
        self, source: str, *, final: bool = False, source_lang: str | None = None,
        tentative: str = "", caught_up: bool = False,
    ) -> list[TextMtRequest]:
        """Take the utterance's committed source so far (and the source side's tentative
        words after it, for the look-ahead; ``caught_up``: the source side committed
        everything it heard, a pause); return the translations it needs.

        Always follow with ``apply()`` (with the results in the same order), even when the
        list is empty. Returns nothing to do when the source did not grow and is not final.
        """
        if self._pending is not None:
            raise RuntimeError("apply() the previous update's results first")
        if self._final:
            raise RuntimeError("the utterance is final; reset() before the next one")
        lang = source_lang or self.source_lang
        words = source.split()
        pending = _Pending([], max(len(words), self._seen_words), final, lang,
                           caught_up=caught_up and self.options.commit_when_caught_up)
        self._pending = pending
        if len(words) <= self._seen_words and not final:
            return []
        start = self._seg_start
        for end in self._segment_ends(words):
            prefix = list(self._agreement.committed) if start == self._seg_start else []
            pending.jobs.append(_Job("close", " ".join(words[start:end]), prefix, end))
            start = end
        if start < len(words):
            prefix = list(self._agreement.committed) if start == self._seg_start else []
            kind: Literal["open", "close"] = "close" if final else "open"
            pending.jobs.append(_Job(kind, " ".join(words[start:]), prefix, len(words)))
        requests = []
        ahead = " ".join(tentative.split())
        for job in pending.jobs:
            job.remembered = self._recall(job, lang)
            own = None
            if job.remembered is None:
                own = self._request(job, job.source, lang, whole=pending.caught_up)
                requests.append(own)
            job.lookahead = (job.kind == "open" and bool(ahead) and self.options.lookahead
                             and self.options.hold_words <= 0)
            if job.lookahead:
                requests.append(replace(self._request(job, f"{job.source} {ahead}", lang),
                                        lookahead_of=own))
        pending.requests = len(requests)
        return requests

    def _request(self, job: _Job, source: str, lang: str, whole: bool = False) -> TextMtRequest:
        """``whole``: an open segment's translation to its end, as at a close (a pause
        commits all of it); otherwise an open update's is capped (``open_new_tokens``)."""
        return TextMtRequest(
            source_text=source,
            source_lang=lang,
            target_lang=self.target_lang,
            target_prefix=" ".join(job.prefix),
            beam_size=self.options.beam_size,
            max_new_tokens=(self.options.open_new_tokens
                            if job.kind == "open" and not whole else 0),
        )

    def apply(self, results: Sequence[TextMtResult]) -> TargetUpdate:
        """Fold in the results for the requests ``update()`` returned."""
        pending = self._pending
        if pending is None:
            raise RuntimeError("apply() without update()")
        if len(results) != pending.requests:
            raise ValueError(f"expected {pending.requests} results, got {len(results)}")
        self._pending = None
        before = len(self._closed) + len(self._agreement.committed)
        outcomes = iter(results)
        for job in pending.jobs:
            if job.remembered is not None:
                continuation = job.remembered[len(job.prefix) :]
            else:
                continuation = next(outcomes).continuation.split()
            if job.kind == "close":
                target = [*job.prefix, *continuation]
                if job.remembered is None and self.memory is not None:
                    self.memory.put(
                        self.model_id, pending.source_lang, self.target_lang, job.source,
                        " ".join(target),
                    )
                self._closed.extend(target)
                self._agreement.reset()
                self._seg_start = job.end
            else:
                ahead = next(outcomes).continuation.split() if job.lookahead else None
                hold = self.options.hold_words
                # hold-N replaces the agreement (limit 0: no words commit by agreeing):
                # all but the last N words commit now
                self._agreement.update(continuation, limit=0 if hold > 0 else None)
                if hold > 0:
                    self._agreement.commit_tentative(len(self._agreement.tentative) - hold)
                if ahead is not None:  # look-ahead: the head the next words do not change
                    agreed = common_prefix_length([continuation, ahead])
                    done = len(continuation) - len(self._agreement.tentative)
                    self._agreement.commit_tentative(agreed - done)
        if pending.caught_up:  # a pause: everything heard is translated for good
            self._agreement.commit_tentative(len(self._agreement.tentative))
        self._seen_words = pending.words
        if pending.final:
            self._closed.extend(self._agreement.finalize())
            self._final = True
        committed, tentative = self.committed, self.tentative
        changed = (committed, tentative) != self._last
        self._last = (committed, tentative)
        newly = [*self._closed, *self._agreement.committed][before:]
        return TargetUpdate(committed, tentative, self._final, changed, tuple(newly))

    def abandon(self) -> None:
        """Forget an update whose translations failed; the next update retries them."""
        self._pending = None

    def finish_without_mt(self) -> TargetUpdate:
        """End the utterance when its final translation failed: keep what was committed,
        drop the unagreed tentative words, so downstream still sees the utterance end."""
        self._pending = None
        self._agreement.tentative = []
        self._final = True
        self._last = (self.committed, "")
        return TargetUpdate(self.committed, "", True, True)

    def _segment_ends(self, words: list[str]) -> list[int]:
        opts = self.options
        ends = []
        start = self._seg_start
        for i in range(start, len(words)):
            length = i + 1 - start
            word = words[i].rstrip(_CLOSERS)
            if (
                (length >= opts.min_segment_words and word.endswith(_SENTENCE_END))
                or (length >= opts.clause_min_words and word.endswith(_CLAUSE_END))
                or length >= opts.max_segment_words
            ):
                ends.append(i + 1)
                start = i + 1
        return ends

    def _recall(self, job: _Job, source_lang: str) -> list[str] | None:
        if self.memory is None:
            return None
        key = (self.model_id, source_lang, self.target_lang, job.source)
        if job.kind == "open":
            # Looked up on every update: count only hits, misses are counted at the close.
            target = self.memory.get(*key, count_miss=False)
        else:
            target = self.memory.get(*key)
        if target is None:
            return None
        words = target.split()
        head = [normalize_word(w) for w in words[: len(job.prefix)]]
        if head != [normalize_word(w) for w in job.prefix]:
            return None  # what we already committed disagrees with the memory
        return [*job.prefix, *words[len(job.prefix) :]]


class TextMtStage:
    """Async shell: source hypotheses in, target hypotheses out (same utterance ids and spans).

    Hypotheses that queue up while a translation runs are coalesced: only the newest of an
    utterance is translated (committed text only grows), so slow MT raises latency, not
    backlog. A ``SpeechpipeError`` from the translator (an unsupported detected language, a
    worker failure) goes to ``on_error`` (which may be async), else becomes an ``ErrorEvent``
    on ``events``, and the session goes on; with neither it propagates. At the utterance end
    a failed final translation still emits a ``final`` hypothesis with what was committed.

    With ``forward_source`` the source hypotheses are passed on too (ahead of the target ones
    they produce), for a downstream stage that wants both sides, e.g. TTS pairing the final
    source text with the translation in ``UtteranceEnd``.

    ``translate_side="target"`` is the pivot through English: the ASR's target-side
    hypotheses (Whisper's English) are what gets translated, and they are not passed on.
    """

    def __init__(
        self,
        translate: Translate,
        *,
        source_lang: str,
        target_lang: str,
        clock: StreamClock,
        memory: TranslationMemory | None = None,
        model_id: str | None = None,
        options: TextMtOptions | None = None,
        on_error: Callable[[SpeechpipeError, int], Awaitable[None] | None] | None = None,
        forward_source: bool = False,
        events: Channel[OutputEvent] | None = None,
        translate_side: Literal["source", "target"] = "source",
        direct_languages: frozenset[str] = frozenset(),
    ) -> None:
        if model_id is None:
            model_id = str(getattr(getattr(translate, "__self__", None), "model_id", ""))
        self._translate = translate
        self.source_lang = source_lang
        self.target_lang = target_lang
        self.clock = clock
        self.on_error = on_error
        self.forward_source = forward_source
        self.events = events
        self.translate_side = translate_side
        # with the pivot: an utterance detected in one of these languages is translated from
        # its own captions (the source side), not from Whisper's English
        self.direct_languages = direct_languages
        self._sides: dict[int, str] = {}  # utterance -> the side translated, once chosen
        self.policy = IncrementalTextTranslation(
            source_lang, target_lang, memory=memory, model_id=model_id, options=options
        )
        self._utterance: int | None = None
        self._last_source: TextHypothesis | None = None
        self._revision = 0
        self._events: Channel[OutputEvent] | None = None

    async def run(self, inbox: Channel[TextHypothesis], outbox: Channel[TextHypothesis],
                  events: Channel[OutputEvent] | None = None) -> None:
        """Translate until ``inbox`` is closed and drained; then close ``outbox`` (the stage
        contract, ``stages.stage``).

        With ``events`` (given here or to the constructor), every target hypothesis is also
        put there (for the client and the trace), and translation errors become
        ``ErrorEvent``s there unless ``on_error`` is set.
        """
        self._events = events if events is not None else self.events
        try:
            while True:
                try:
                    batch = await inbox.get_batch()
                except ChannelClosed:
                    break
                if self.forward_source:
                    for hyp in batch:
                        if hyp.side == "source":
                            await outbox.put(hyp)
                for hyp in _newest_per_utterance(self._chosen(batch)):
                    await self._handle(hyp, outbox)
            if self._last_source is not None and not self.policy.final:
                await self._step(_as_final(self._last_source), outbox)
        finally:
            outbox.close()

    def _chosen(self, batch: list[TextHypothesis]) -> list[TextHypothesis]:
        """The hypotheses of the side each utterance is translated from: ``translate_side``,
        or, with ``direct_languages``, the source side of an utterance whose first source
        hypothesis with a language names one of them (chosen once per utterance: committed
        target words are never taken back)."""
        chosen = []
        for hyp in batch:
            side = self._sides.get(hyp.utterance)
            if self.direct_languages and hyp.side == "source":
                if not hyp.language:
                    continue  # no language yet: not decided
                wanted = ("source" if hyp.language in self.direct_languages
                          else self.translate_side)
                if side is None or (wanted != side and self._undecided(hyp.utterance)):
                    if side is not None:  # the detection changed before any word committed
                        self.policy.reset()
                    side = wanted
            side = side or self.translate_side
            self._sides = {hyp.utterance: side}  # only the current utterance matters
            if hyp.side == side:
                chosen.append(hyp)
        return chosen

    def _undecided(self, utterance: int) -> bool:
        """Whether no target word of ``utterance`` is committed yet (its side may change)."""
        return utterance != self._utterance or not self.policy.committed

    async def _handle(self, hyp: TextHypothesis, outbox: Channel[TextHypothesis]) -> None:
        if hyp.utterance != self._utterance:
            if self._last_source is not None and not self.policy.final:
                await self._step(_as_final(self._last_source), outbox)
            self._utterance = hyp.utterance
            self._revision = 0
            self.policy.reset()
        if self.policy.final:
            return  # a late hypothesis of an utterance we already finished
        self._last_source = hyp
        await self._step(hyp, outbox)

    async def _step(self, hyp: TextHypothesis, outbox: Channel[TextHypothesis]) -> None:
        source = hyp.text if hyp.final else hyp.committed
        lang = hyp.language if hyp.language and hyp.language != "auto" else self.source_lang
        started = time.perf_counter()
        caught_up = not hyp.final and not hyp.tentative.strip() and bool(hyp.committed.strip())
        requests = self.policy.update(source, final=hyp.final, source_lang=lang,
                                      tentative="" if hyp.final else hyp.tentative,
                                      caught_up=caught_up)
        try:
            results = await asyncio.gather(*(self._translate(r) for r in requests))
        except SpeechpipeError as exc:
            self.policy.abandon()
            await self._report(exc, hyp)
            if not hyp.final:
                return
            update = self.policy.finish_without_mt()
        else:
            update = self.policy.apply(results)
        if not (update.changed or update.final):
            return
        seconds = time.perf_counter() - started
        target = TextHypothesis(
            side="target",
            utterance=hyp.utterance,
            revision=self._revision,
            committed=update.committed,
            tentative=update.tentative,
            language=self.target_lang,
            audio_start=hyp.audio_start,
            audio_end=hyp.audio_end,
            stream_pts=self.clock.stamp(hyp.stream_pts),
            final=update.final,
            timings=(StageTiming("mt", seconds),),
        )
        await outbox.put(target)
        if self._events is not None:
            await self._events.put(target)
        self._revision += 1

    async def _report(self, exc: SpeechpipeError, hyp: TextHypothesis) -> None:
        _LOGGER.warning("text MT failed for utterance %d: %s", hyp.utterance, exc.code)
        if self.on_error is not None:
            result = self.on_error(exc, hyp.utterance)
            if inspect.isawaitable(result):
                await result
        elif self._events is not None:
            stamp = self.clock.stamp(hyp.stream_pts)
            await self._events.put(ErrorEvent(exc.code, str(exc), stamp, hyp.utterance))
        else:
            raise exc


def _newest_per_utterance(batch: list[TextHypothesis]) -> list[TextHypothesis]:
    """The hypotheses worth translating: the newest of each utterance, in order."""
    out: list[TextHypothesis] = []
    for hyp in batch:
        if out and out[-1].utterance == hyp.utterance and not out[-1].final:
            out[-1] = hyp
        else:
            out.append(hyp)
    return out


def _as_final(hyp: TextHypothesis) -> TextHypothesis:
    return replace(hyp, final=True)
