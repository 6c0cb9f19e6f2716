"""An utterance's language under ``source_lang=auto``: the vote over its detections, the
decode asked again in the vote's leader, and a kept language watched for a switch.

``UtteranceLanguage`` is a part of ``stages.utterance.UtteranceDecoder`` (its state lives in
the decoder's fields, declared below for the type checker); the rules of the vote itself are
``stages.language_vote``'s, pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from speechpipe.stages.asr_options import AsrOptions
from speechpipe.stages.frames import STREAM_RATE
from speechpipe.stages.language_vote import (
    SWITCH_ANSWERS,
    LanguageVote,
    settle_language,
    switched_language,
)
from speechpipe.stages.model_api import DecodeKind, WhisperResult

__all__ = ["COMMIT_KINDS", "UtteranceLanguage"]

# decodes that commit everything they heard
COMMIT_KINDS = (DecodeKind.FINAL, DecodeKind.PAUSE, DecodeKind.CUT)


class UtteranceLanguage:
    """Which language an utterance's words are committed in (``UtteranceDecoder``'s)."""

    options: AsrOptions
    language: str | None
    language_locked: bool
    language_confidence: float | None
    vote: LanguageVote
    detecting: bool
    watch_switch: bool
    switch_checked: bool
    other_leads: bool
    switch_answers: dict[str, int]
    switched: bool
    commit_in: str | None

    if TYPE_CHECKING:  # the decoder's property
        @property
        def window_start(self) -> int: ...

    def _detect_too(self, kind: DecodeKind, basis: int) -> bool:
        """Does a decode in the session's kept language also detect (watching for a switch)?
        On ``language_min_s`` of audio or more: those that commit everything, the first
        partial (a final the last partial covered is not decoded) and, while another
        language led the last answer, the partials after it."""
        if not (self.watch_switch and self.language_locked) or self.commit_in:
            return False
        if (basis - self.window_start) / STREAM_RATE < self.options.language_min_s:
            return False
        return kind in COMMIT_KINDS or not self.switch_checked or self.other_leads

    def _vote_language(self, result: WhisperResult, basis_pts: int, commit_all: bool) -> bool:
        """Count this decode's detection in the vote; fix the language when the vote settles
        (``stages.language_vote.settle_language``). Returns whether it was fixed now. Until
        then ``language`` is the one this decode was in (its words are shown in it)."""
        options = self.options
        heard_s = (basis_pts - self.window_start) / STREAM_RATE
        if commit_all and self.commit_in is not None:
            # asked in the vote's leader: no detection of its own, its words are in it
            self.language, self.commit_in = self.commit_in, None
            self.language_confidence = self.vote.share(self.language)
            self.language_locked = settle_language(
                self.vote, heard_s, options.language_confident, options.language_min_s,
                options.language_lock_s) is not None
            return self.language_locked
        self.vote.add(result.language_probs or ((result.language, result.language_prob),),
                      heard_s)
        settled = settle_language(self.vote, heard_s, options.language_confident,
                                  options.language_min_s, options.language_lock_s)
        if commit_all:
            # what is committed is in the language all the detections lead with (not the
            # last one's alone): when this decode was in another, it is asked again in it
            language = (settled or self.vote.leader())[0]
            if language and language != result.language:
                self.commit_in = language
                return False
        if settled is None:
            self.language = result.language
            self.language_confidence = self.vote.share(result.language)
            return False
        self.language, self.language_confidence = settled
        self.language_locked = True
        return True

    def _watch_switch(self, result: WhisperResult, basis_pts: int) -> None:
        """A decode in the kept language also detected (``_detect_too``): the
        ``SWITCH_ANSWERS``-th answer of this utterance confident of the same other language
        means the speaker switched, and this utterance detects its language again, from this
        answer on (a decode that commits everything is asked again in the new language:
        ``_vote_language``). One confident answer is not enough: Whisper base said Arabic
        with 0.86 on 1.5 s of a French clip, and 0.35 half a second later."""
        self.switch_checked = True
        kept = self.language or ""
        self.other_leads = result.language_probs[0][0] != kept
        heard_s = (basis_pts - self.window_start) / STREAM_RATE
        other = switched_language(result.language_probs, kept, heard_s,
                                  self.options.language_confident, self.options.language_min_s)
        if other is None:
            return
        self.switch_answers[other] = self.switch_answers.get(other, 0) + 1
        if self.switch_answers[other] < SWITCH_ANSWERS:
            return
        self.switched = self.detecting = True
        self.language_locked = self.other_leads = False
        self.switch_answers = {}
        self.vote = LanguageVote()

    def language_to_redecode(self) -> str | None:
        """Before committing the last hypothesis without decoding (``covered``): the vote's
        leader when that hypothesis was decoded in another language (the commit decode is
        then asked in it: ``commit_in``), else None."""
        if self.language_locked or not self.detecting:
            return None
        leader, _ = self.vote.leader()
        return leader if leader and leader != self.language else None
