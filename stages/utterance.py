"""``UtteranceDecoder``: the synchronous core of the streaming ASR for one utterance.

It holds the utterance's audio and its current decode window (``docs/design.md``, "Bounded
windows"), decides when a decode is due and of which kind, builds the request (the window's
committed text forced as prefix, the text before the window as context) and applies results
through each side's commit policy (``stages.commit``), so captions only ever grow. The async
shell is ``stages.asr.AsrStage``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from speechpipe.stages.asr_options import AsrOptions
from speechpipe.stages.commit import CommitPolicy
from speechpipe.stages.coverage import missing_tail
from speechpipe.stages.faithfulness import (
    FaithfulnessOptions,
    SpeechClassifier,
    SpeechEvidence,
    classify_utterance,
    count_words,
    guard_decodes,
)
from speechpipe.stages.frames import STREAM_RATE
from speechpipe.stages.language_vote import LanguageVote
from speechpipe.stages.model_api import DecodeKind, DecodeTask, WhisperRequest, WhisperResult
from speechpipe.stages.utterance_edge import UtteranceEdge
from speechpipe.stages.utterance_language import COMMIT_KINDS, UtteranceLanguage
from speechpipe.stages.window import quiet_tail

__all__ = ["UtteranceDecoder", "RETRANSLATE_MAX_S"]

RETRANSLATE_MAX_S = 28.0  # a retranslation hears at most this much of its utterance's end

@dataclass
class UtteranceDecoder(UtteranceLanguage, UtteranceEdge):
    """One utterance: audio, agreement state for source (and target) text, revisions; its
    language (``stages.utterance_language``) and the punctuation held at its window's edge
    (``stages.utterance_edge``)."""

    utterance: int
    start_pts: int
    options: AsrOptions
    language: str | None
    translate: bool
    audio: list[np.ndarray] = field(default_factory=list)
    n_samples: int = 0
    voiced_samples: int = 0
    last_decode_end: int = -1
    last_caption_end: int = -1  # ... of the last decode that decoded the captions
    last_voiced_end: int = 0
    language_locked: bool = False
    # ``source_lang=auto`` (``stages.language_vote``): every detection of this utterance so
    # far (seeded with the session's earlier unsure utterances), and the confidence of the
    # language in ``language`` (the vote's share); None: the language was given
    vote: LanguageVote = field(default_factory=LanguageVote)
    language_confidence: float | None = None
    detecting: bool = field(init=False, default=False)  # the language is this one's to find
    # the language is the session's detected one (not given): the first decode on
    # ``language_min_s`` of audio, the next ones while another language leads, and the
    # decodes that commit everything detect too; ``SWITCH_ANSWERS`` confident answers for
    # another language re-decide it (``switched_language``)
    watch_switch: bool = False
    switch_checked: bool = False  # a partial's detection was checked already
    other_leads: bool = False  # ... and another language led it
    switch_answers: dict[str, int] = field(default_factory=dict)  # confident, per language
    switched: bool = False  # this utterance heard the speaker switch
    # a decode that commits everything came out in another language than the vote's leader:
    # it is asked again, once, in the leader (``commit_in``), and only that one commits
    commit_in: str | None = None
    # the last hypothesis of each side before the language was fixed, with the language it
    # was decoded in: the decode that fixes the language may commit what agrees with it
    unlocked_words: dict[str, tuple[str | None, list[str]]] = field(default_factory=dict)
    ended: bool = False
    end_pts: int = 0
    pause_pending: bool = False
    pause_pts: int = 0  # end of voiced audio before the pause
    # a hush (VAD: silence that may become a pause) heard at ``hush_at`` and not yet decoded:
    # a decode is due at once, so a pause that follows finds everything decoded
    hush_pending: bool = False
    hush_at: int = 0
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
    voiced_at_commit_point: int = 0  # voiced samples heard when the commit point was marked
    window_voiced_from: int = 0  # voiced_samples when the window started
    windows: int = 1  # windows this utterance has had
    faithfulness: FaithfulnessOptions = field(default_factory=FaithfulnessOptions)
    speech: SpeechClassifier | None = None  # speech probability per 32 ms window
    evidence: SpeechEvidence | None = None  # made at the first audio (start_pts is final)

    # punctuation waiting right after each side's committed words (``docs/design.md``,
    # "Nothing at a window's edge is final"): a sentence end held back from a commit, or what
    # the newest decode put after the committed prefix. It is committed with the next
    # committed words, or by the utterance's end; the newest decode replaces it
    edge: dict[str, str] = field(default_factory=dict)
    # stream position up to which the captions are committed (the end of their last
    # committed word): the translation commits no word that ends after it
    source_settled_pts: int = 0
    wrong_language: int = 0  # translate decodes left out: not English after a re-decode

    def __post_init__(self) -> None:
        options = self.options
        self.source = CommitPolicy("agreement", options.agreement, options.agreement_lookback,
                                   settle_margin_s=options.settle_margin_s)
        self.target = CommitPolicy(options.commit_policy, options.target_agreement,
                                   options.agreement_lookback, options.align_margin_s,
                                   settle_margin_s=options.settle_margin_s,
                                   first_words=options.target_first_words)
        self.language_locked = self.language is not None
        self.detecting = self.language is None
        self.source_settled_pts = self.start_pts

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

    def tasks(self, kind: DecodeKind = DecodeKind.FINAL) -> tuple[DecodeTask, ...]:
        """The Whisper tasks a decode of this ``kind`` runs, each with the window's committed
        text as forced prefix and the text committed before the window as context."""
        tasks = [DecodeTask("transcribe", self.source.committed_text, self.source_context)]
        if self.translate:
            tasks.append(DecodeTask("translate", self.target.committed_text,
                                    self.target_context))
            if kind == DecodeKind.PARTIAL and (not self.options.source_partials
                                      or self._captions_decoded_lately()):
                del tasks[0]  # captions catch up at their next step, a pause or the end
        return tuple(tasks)

    def _captions_decoded_lately(self) -> bool:
        """Did a decode of the captions hear audio up to less than ``caption_step_s`` ago?"""
        since = self.end - max(self.last_caption_end, self.window_start)
        return since < self.options.caption_step_s * STREAM_RATE

    def due(self) -> DecodeKind | None:
        """Which decode is due now: ``final``, ``pause``, ``cut``, ``hush``, ``partial`` or
        None. A ``hush`` decode is a partial that hears the silence a pause would start with:
        it is asked like a pause decode (beam, length cap, never superseded), applied like a
        partial, and when the pause comes, its hypothesis is committed without decoding
        again (``covered``)."""
        options = self.options
        min_voiced = options.min_voiced_s * STREAM_RATE
        enough_voice = self.voiced_samples >= min_voiced
        if self.ended:
            return DecodeKind.FINAL
        if self.pause_pending and enough_voice and options.commit_on_pause:
            return DecodeKind.PAUSE
        window_voice = self.voiced_samples - self.window_voiced_from >= min_voiced
        if options.windowing and window_voice and self._cut_due():
            return DecodeKind.CUT
        if (self.hush_pending and self.last_decode_end < self.hush_at and enough_voice
                and window_voice):
            return DecodeKind.HUSH
        spoken = self.text("target" if self.translate else "source")
        early = count_words(spoken) < options.early_words
        step = int((options.early_step_s if early else options.step_s) * STREAM_RATE)
        since = self.end - max(self.last_decode_end, self.window_start)
        if enough_voice and window_voice and since >= step:
            return DecodeKind.PARTIAL
        return None

    def covered(self) -> bool:
        """Did the last decode already hear every voiced sample, and silence after it?"""
        return (
            self.hears_voice_end(self.last_decode_end)
            and self.last_decode_end > 0
            and not self.last_truncated
        )

    def hears_voice_end(self, decode_end: int) -> bool:
        """Does a decode of the audio up to ``decode_end`` hear every voiced sample so far,
        and ``pause_commit_margin_s`` of silence after it?"""
        margin = int(self.options.pause_commit_margin_s * STREAM_RATE)
        return decode_end >= self.last_voiced_end + margin

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

    def basis(self, kind: DecodeKind) -> int:
        """Where the audio of this decode ends. A pause decode stops at the pause (plus a
        little silence), so committing everything never cuts a word that went on after it;
        every other decode hears all the audio there is."""
        if kind == DecodeKind.PAUSE:
            return min(self.end, self.pause_pts + int(0.2 * STREAM_RATE))
        return self.end

    def _samples(self, start: int, end: int) -> np.ndarray:
        audio = np.concatenate(self.audio) if self.audio else np.zeros(0, np.int16)
        return audio[max(0, start - self.start_pts): max(0, end - self.start_pts)]

    def request(self, kind: DecodeKind) -> WhisperRequest:
        """The Whisper request for a decode of this ``kind`` over the window's audio up to
        ``basis``."""
        basis = self.basis(kind)
        audio = self._samples(self.window_start, basis)
        partial = kind == DecodeKind.PARTIAL
        if partial:
            cap = self.options.partial_max_new_tokens
        else:  # enough for the audio not yet committed, not for a loop
            uncommitted = (basis - max(self.window_start, self.committed_at)) / STREAM_RATE
            cap = 8 + int(self.options.tokens_per_second * uncommitted)
        commits = kind in COMMIT_KINDS
        language = self.language if self.language_locked else None
        if commits and self.commit_in:
            language = self.commit_in
        return self._with_recovery(kind, WhisperRequest(
            audio=audio.astype(np.float32) / 32768.0,
            language=language,
            detect_among=frozenset(self.options.detect_among),
            detect_too=self._detect_too(kind, basis),
            tasks=self.tasks(kind),
            beam_size=self.options.beam_size if partial else self.options.final_beam_size,
            tokens_per_second=self.options.tokens_per_second,
            max_new_tokens=cap,
            partial=partial,
            word_times=self._word_times(kind),
            align_starts=self._align_starts(kind),
            max_context_tokens=self.options.context_tokens,
            cap_by_window=self.options.cap_by_window and partial,
            vocabulary_words=self.options.vocabulary_words,
            prefill=self.options.prefill,
            restart_guard=self.options.restart_guard and partial,
            restatement_guard=self.options.restatement_guard,
            check_target_language=self.translate and self.options.check_target_language,
        ))

    def _word_times(self, kind: DecodeKind) -> tuple[str, ...]:
        """Tasks whose words need alignment times: the partials of a side whose commit
        policy uses them (``stages.commit``)."""
        if kind not in (DecodeKind.PARTIAL, DecodeKind.HUSH):
            return ()
        sides = [("transcribe", self.source)] + (
            [("translate", self.target)] if self.translate else [])
        # an earlier hypothesis to agree with, or the decode that may fix the language
        return tuple(task for task, policy in sides
                     if policy.wants_word_times or (policy.needs_word_times
                                                    and not self.language_locked))

    def _align_starts(self, kind: DecodeKind) -> tuple[tuple[str, frozenset[str]], ...]:
        """For the settling sides with a locked language: the first words a continuation
        must start with to commit anything, so the engine aligns only those decodes."""
        if kind not in (DecodeKind.PARTIAL, DecodeKind.HUSH) or not self.language_locked:
            return ()
        sides = [("transcribe", self.source)] + (
            [("translate", self.target)] if self.translate else [])
        return tuple((task, policy.agreeing_starts) for task, policy in sides
                     if policy.rule == "agreement" and policy.wants_word_times)

    def apply(self, result: WhisperResult, kind: DecodeKind,
              basis_pts: int) -> list[tuple[str, str, str]]:
        """Feed a decode result; return (side, committed, tentative) for each changed side."""
        result = self._guarded(result, basis_pts)
        self.last_decode_end = basis_pts
        if any(d.task == "transcribe" for d in result.decodes):
            self.last_caption_end = basis_pts
        if kind == DecodeKind.HUSH or basis_pts >= self.hush_at:
            self.hush_pending = False  # this decode heard the hush
        self.last_truncated = any(d.truncated for d in result.decodes)
        commit_all = kind in COMMIT_KINDS
        if self.watch_switch and self.language_locked and result.language_probs:
            self._watch_switch(result, basis_pts)
        locking = not self.language_locked and self._vote_language(result, basis_pts, commit_all)
        if self.commit_in is not None:  # to be decoded again in the vote's leader: shown only
            commit_all = False
        heard_s = (basis_pts - self.window_start) / STREAM_RATE
        changed = []
        # captions first: the translation commits only what the committed captions cover
        for decode in sorted(result.decodes, key=lambda d: d.task != "transcribe"):
            side = "source" if decode.task == "transcribe" else "target"
            policy = self.source if side == "source" else self.target
            before = (self.text(side), self._shown(policy.tentative))
            words = decode.continuation.split()
            if decode.wrong_language:  # not English even when decoded again: never said
                self.wrong_language += 1
                words = []
            target_by_agreement = (
                kind == DecodeKind.PAUSE and decode.task == "translate"
                and not self.options.commit_target_on_pause
            )
            if commit_all and not target_by_agreement:
                self._set_edge(side, policy, decode.glued)
                self._glue_edge(side, policy, 0, words)
                policy.finalize(words)
                self._hold_end(side, policy, kind)
                if side == "source":
                    self.source_settled_pts = max(self.source_settled_pts, basis_pts)
            elif not self.language_locked or result.language != self.language:
                # language still uncertain, or this decode was in another than the one the
                # vote fixed: show, never commit
                policy.tentative = words
                self.unlocked_words[side] = (result.language, words)
            else:
                if locking:
                    # the hypothesis before the lock, decoded in this language, is the
                    # agreement's previous one
                    language, before_lock = self.unlocked_words.pop(side, (None, []))
                    if language == self.language and before_lock:
                        policy.update(before_lock)
                if decode.wrong_language:
                    policy.tentative = []
                    newly = []
                else:
                    self._set_edge(side, policy, decode.glued)
                    newly = policy.update(words, decode.word_ends,
                                          heard_s - self._opening_margin(side),
                                          self._frontier_s(side))
                if newly:
                    self._glue_edge(side, policy, len(newly), newly)
                    self._hold_end(side, policy, kind)
                    if side == "source" and policy.committed_end_s is not None:
                        self.source_settled_pts = max(
                            self.source_settled_pts,
                            self.window_start + int(policy.committed_end_s * STREAM_RATE))
            after = (self.text(side), self._shown(policy.tentative))
            if after != before or kind == DecodeKind.FINAL:
                changed.append((side, *after))
        if kind == DecodeKind.PAUSE and self.commit_in is None:
            self.pause_pending = False
        if commit_all:
            self.committed_at = basis_pts
            if kind == DecodeKind.CUT:  # a long window without a pause: the next starts here
                self._advance(basis_pts)
            elif kind == DecodeKind.PAUSE:
                self._mark_commit_point(basis_pts)
        elif self._stalled_at_commit_point(result):
            # the punctuation it ended with (held as the edge) is what the new speech
            # follows: it goes with the committed words into the context
            self._glue_held_edge("source")
            if self.translate:
                self._glue_held_edge("target")
            self._move_to_commit_point()
        return changed

    def _stalled_at_commit_point(self, result: WhisperResult) -> bool:
        """Whisper took the words committed at a pause for the whole text: forced through
        them, a decode ends (a full stop at most) while the audio after the pause holds
        speech. Every later decode of the window would do the same and the speech after the
        pause would be lost ("La question ... revient régulièrement." and nothing of the
        next sentence). The window then moves on to the pause (``asr.windowing``), so the
        next decode hears the new speech alone, with the committed words as context."""
        if not self.options.windowing or self.commit_point is None or not result.decodes:
            return False
        if any(d.continuation.strip() for d in result.decodes):
            return False
        if self.commit_point[0] <= self.window_start:
            return False
        voiced_after = self.voiced_samples - self.voiced_at_commit_point
        return voiced_after >= self.options.min_voiced_s * STREAM_RATE

    def _shown(self, tentative: list[str]) -> str:
        """The tentative words a hypothesis shows: the first ``asr.shown_tentative_words``
        (0: all). The tail of a partial is what the next decode changes most: showing less of
        it is less flicker, at no cost to what is committed or spoken."""
        limit = self.options.shown_tentative_words
        return " ".join(tentative[:limit] if limit > 0 else tentative)

    # -- nothing at a window's edge is final (docs/design.md) ---------------------------------
    def _frontier_s(self, side: str) -> float | None:
        """The translation's commit frontier (seconds into the window): the end of the
        committed captions, when partials decode the captions; None: no frontier."""
        if (side != "target" or not self.options.target_rests_on_captions
                or not self.options.source_partials or self.options.settle_margin_s <= 0):
            return None
        return (self.source_settled_pts - self.window_start) / STREAM_RATE

    def _opening_margin(self, side: str) -> float:
        """Extra settled audio the utterance's first caption words need
        (``asr.opening_settle_s``): none once a caption word is committed or carried as
        context, and none for the translation (its frontier is the committed captions)."""
        if side != "source" or self.source.committed or self.source_context:
            return 0.0
        return self.options.opening_settle_s

    def _mark_commit_point(self, pts: int) -> None:
        """Everything heard up to ``pts`` is committed on both sides (a pause): a place the
        window can move on to later, without a word heard twice or lost."""
        if self.translate and not self.options.commit_target_on_pause and self.target.tentative:
            return  # the translation still holds words of this audio
        self.commit_point = (pts, len(self.source.committed), len(self.target.committed))
        self.voiced_at_commit_point = self.voiced_samples

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

    def _with_recovery(self, kind: DecodeKind, request: WhisperRequest) -> WhisperRequest:
        """Decodes that commit everything (and a hush decode, which a pause may commit) also
        translate what a short translation left out."""
        options = self.faithfulness
        if kind == DecodeKind.PARTIAL or not self.translate or not options.recover:
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

    def retranslation_request(self) -> WhisperRequest:
        """One translate decode of the utterance's whole audio (at most the last
        ``RETRANSLATE_MAX_S``), nothing forced, beam and coverage recovery as at a final."""
        start = max(self.start_pts, self.end - int(RETRANSLATE_MAX_S * STREAM_RATE))
        audio = self._samples(start, self.end)
        options = self.faithfulness
        return WhisperRequest(
            audio=audio.astype(np.float32) / 32768.0, language=self.language,
            tasks=(DecodeTask("transcribe"), DecodeTask("translate")),
            beam_size=self.options.final_beam_size,
            tokens_per_second=self.options.tokens_per_second,
            max_new_tokens=8 + int(self.options.tokens_per_second * len(audio) / STREAM_RATE),
            vocabulary_words=self.options.vocabulary_words,
            recover_coverage=True, coverage_min_ratio=options.min_ratio,
            coverage_min_words=options.min_source_words, max_recoveries=options.max_recoveries,
            check_target_language=self.options.check_target_language,
        )

    def append_missing(self, fresh: str) -> bool:
        """Commit what ``fresh`` (the whole utterance translated again) says after the
        committed translation; False when nothing lines up (``missing_tail``)."""
        tail = missing_tail(self.text("target"), fresh)
        if not tail:
            return False
        self.target.finalize(tail.split())
        return True

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
            tentative = list(policy.tentative)
            self._glue_edge(side, policy, 0, tentative)
            policy.finalize()
            self._hold_end(side, policy, DecodeKind.PAUSE if pause else DecodeKind.FINAL)
            if side == "source":
                self.source_settled_pts = max(self.source_settled_pts, self.last_decode_end)
            out.append((side, self.text(side), ""))
        self.pause_pending = False
        if pause:  # the last decode heard everything up to its end
            self._mark_commit_point(self.last_decode_end)
        return out
