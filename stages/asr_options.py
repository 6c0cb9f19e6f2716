"""The ASR stage's options (``--set asr.*``) and where a stage reads them per decode.

A leaf module: the options tree (``speechpipe.config``) imports it without the stage, the
models or asyncio."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

__all__ = ["AsrOptions", "AsrOptionsProvider", "FixedOptions", "CommitPolicyName"]

# the commit rule (``stages.commit.CommitPolicy``) by name
CommitPolicyName = Literal["agreement", "align"]


@dataclass(frozen=True, slots=True)
class AsrOptions:
    """Settings of the ASR stage: decode cadence, commit agreement, beams and caps."""
    step_s: float = 1.0  # re-decode cadence while speaking (docs/design.md)
    early_step_s: float = 0.5  # cadence until the first translated words are committed ...
    early_words: int = 2  # ... this many of them (the first phrase the listener hears)
    # when translating, a partial decodes the captions too only when they last decoded at
    # least this long ago; partials in between decode the translation alone. Fast early steps
    # are for the first words spoken: captions committed on decodes 0.25 s apart agree on
    # wrong words more often (docs/design.md, "The first words")
    caption_step_s: float = 0.5
    min_voiced_s: float = 0.3  # no decode before this much voiced audio
    agreement: int = 2  # LocalAgreement-n for source captions
    target_agreement: int = 2  # LocalAgreement-n for the translation (what gets spoken)
    # the translation's first commit in a window takes at least this many agreed words
    target_first_words: int = 1
    agreement_lookback: int = 2  # also agree with up to this many older hypotheses
    pause_commit_margin_s: float = 0.15  # a decode this far past the pause heard the word end
    # True: a pause or final decode does not wait for this session's partial already running
    # on a shared worker when that partial did not hear up to the pause (``covered``); the
    # commit is queued at once and the partial's result is dropped. Off by default: measured
    # (docs/design.md, "The commit waits for a running partial"), the text ends
    # 0.13 s sooner on average but the speech does not, because the words the partial would
    # have committed are spoken while the pause decode runs; dropped, they wait for it (one
    # session's playlist end p95 3.52-3.63 s -> 4.33-4.34 s; eight synchronized: no gain)
    commit_overtakes_partial: bool = False
    # beam search everywhere: the committed words come from partials too (agreement), so a
    # beam only on the decodes that commit everything buys little (+0.5 BLEU); beam 5 on
    # all decodes +5 BLEU on the 49 x-to-English clips (docs/benchmarks.md, "Quality").
    # The degrade ladder's level 2 goes greedy under load (stages/ladder.py)
    beam_size: int = 5  # partial decodes
    final_beam_size: int = 5  # decodes that commit everything (pause, end); see README
    tokens_per_second: float = 7.0  # decode length cap per second of uncommitted audio
    commit_on_pause: bool = True  # source captions: commit everything heard at a pause
    commit_target_on_pause: bool = True  # translation too (measured: BLEU and AL both better)
    # an auto-detected language is fixed once the vote of the detections so far
    # (``stages.language_vote``: each detection weighed by the audio it heard) gives it a
    # share of ``language_confident`` on at least ``language_min_s`` of audio, and at
    # ``language_lock_s`` whatever the share; until then words are shown, never committed.
    # On 77 clips: 68 right against 59 for the newest detection alone at 2.5 s, the rule
    # before (docs/design.md, "Detecting the language"; scripts/language_detection.py)
    language_lock_s: float = 3.0
    language_confident: float = 0.8
    language_min_s: float = 1.3
    # later utterances reuse the language found first, when it was found with confidence
    # ``language_confident``, watched: one detection of ``language_confident`` for another
    # language on ``language_min_s`` of audio re-decides it (``switched_language``); an
    # unsure one is detected again at the next utterance, its vote starting from the
    # session's votes so far
    keep_detected_language: bool = True
    # auto: the languages the detection chooses among (Whisper codes, e.g. ``es,en`` for
    # a conversation in two languages); empty: all of Whisper's languages
    detect_among: tuple[str, ...] = ()
    pre_roll_s: float = 0.3  # audio kept before the VAD's speech start
    min_utterance_voiced_s: float = 0.5  # shorter "utterances" are treated as noise
    partial_max_new_tokens: int = 16  # partials only need the next few words
    # decode with an output layer that keeps the tokens of the source language's and
    # English's most frequent words, this many per language (models/whisper/vocab.py;
    # languages without a word list keep the full vocabulary); 0: the full vocabulary.
    # 30,000: 36k of 52k tokens, -9 % CPU, BLEU +1.3 on the 49 clips (docs/design.md)
    vocabulary_words: int = 30000
    # read the committed words of a decode's forced prefix in one pass instead of one beam
    # step per token (models/whisper/prefill.py; needs the native decoder, else no effect)
    prefill: bool = True
    source_partials: bool = True  # False: partials decode the translation only (degrade)
    # what commits the translation between pauses (stages.commit): "agreement"
    # (LocalAgreement only) or "align" (also the words a single decode's alignment puts this
    # far before its audio end)
    commit_policy: CommitPolicyName = "agreement"
    align_margin_s: float = 1.0
    # nothing at a window's edge is final (stages.commit, docs/design.md): between pauses a
    # word commits only when its decode's alignment puts its end at least this far before
    # the end of the audio that decode heard, never the last word of a partial; 0: agreement
    # alone (the policy before issue 40)
    settle_margin_s: float = 0.4
    # an utterance's first caption words (nothing committed or carried as context yet) need
    # this much more settled audio after them: decoded with no context, the opening words
    # are the ones a later decode most often hears otherwise ("Tien las ramas" for "Y en las
    # ramas"); the translation rests on the captions, so it waits with them
    opening_settle_s: float = 0.0
    # the translation commits no word that ends after the committed captions' end (it may
    # not run ahead of what was heard); needs settle_margin_s > 0 and caption partials
    target_rests_on_captions: bool = True
    # a sentence end on the last committed word is held back until the next committed
    # words or the utterance's end confirm it (issue 45)
    hold_sentence_end: bool = True
    # a held sentence end of the translation is committed between pauses only where the
    # committed captions end more sentences than the committed translation does (a sentence
    # end rests on one the speaker was heard to make); otherwise the phrase goes on without it
    ends_rest_on_captions: bool = True
    # a translation that reads as the source language (py3langid) is decoded again with
    # English as Whisper's language token; if still not English it is never committed and
    # the session gets a ``translation_wrong_language`` error event (issue 45)
    check_target_language: bool = True
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
    # tentative words a hypothesis shows after the committed ones (0: all): the unstable
    # tail is what flickers; 2 cut normalized erasure from 0.81-0.92 to 0.33-0.40 on the
    # 49 x-to-English clips, same BLEU (docs/benchmarks.md); nothing committed changes
    shown_tentative_words: int = 2
    # partials: cut a continuation where it starts its sentence over, so agreement cannot
    # commit the first words of a loop (models/whisper/engine.py, ``cut_restart``)
    restart_guard: bool = True
    # a decode that says again the sentence its forced prefix began, or that the length cap
    # stopped in a copy of words said before, loses the second saying (stages.loop_guard:
    # cut_forced_restatement, cut_capped_restatement); False: kept (for comparisons)
    restatement_guard: bool = True

    def __post_init__(self) -> None:
        if self.commit_policy not in ("agreement", "align"):
            raise ValueError(
                f"asr.commit_policy must be agreement or align, not {self.commit_policy!r}")
        if self.settle_margin_s < 0:
            raise ValueError("asr.settle_margin_s must be >= 0")
        if self.opening_settle_s < 0:
            raise ValueError("asr.opening_settle_s must be >= 0")
        if self.shown_tentative_words < 0:
            raise ValueError("asr.shown_tentative_words must be >= 0")
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
