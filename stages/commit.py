"""Commit policies: which words of a window's hypotheses become final (never retracted).

A ``CommitPolicy`` holds one side (captions or translation) of an utterance's current
window: the committed words, which the next decode is forced to continue, and the tentative
tail. It is fed each decode's continuation (``update``) and commits words by its rule:

- ``agreement``: LocalAgreement-n (``stages.agreement``): the words on which the last ``n``
  continuations agree (whisper_streaming's ``HypothesisBuffer``);
- ``align``: agreement, and also the leading words that one decode's alignment ends at least
  ``align_margin_s`` before the end of its audio (AlignAtt's rule on words: what the model
  attends to near the end of the audio may still change).

Decodes that commit everything (a pause, a window cut, the utterance's end) call
``finalize``. Where the window moves on, ``reset`` starts the next window empty; the text
committed so far then travels as context (``stages.asr``). Selected by ``asr.commit_policy``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from speechpipe.stages.agreement import LocalAgreement

__all__ = ["CommitPolicy", "CommitPolicyName", "align_commit_count"]

CommitPolicyName = Literal["agreement", "align"]


def align_commit_count(word_ends: Sequence[float], heard_s: float, margin_s: float) -> int:
    """How many leading words to commit: those whose aligned end lies at least ``margin_s``
    before the end of the audio heard. Stops at the first word too close."""
    count = 0
    for end in word_ends:
        if end > heard_s - margin_s:
            break
        count += 1
    return count


class CommitPolicy:
    """One side of a window: committed words plus a tentative tail, by ``rule``."""

    def __init__(self, rule: CommitPolicyName = "agreement", n: int = 2, lookback: int = 0,
                 align_margin_s: float = 1.0) -> None:
        if rule not in ("agreement", "align"):
            raise ValueError(f"commit policy must be agreement or align, not {rule!r}")
        self.rule = rule
        self.align_margin_s = align_margin_s
        self._agreement = LocalAgreement(n, lookback if n == 2 else 0)

    @property
    def needs_word_times(self) -> bool:
        """Whether ``update`` uses the decode's word end times (ask the engine for them)."""
        return self.rule == "align"

    @property
    def committed(self) -> list[str]:
        """The committed words (append-only)."""
        return self._agreement.committed

    @property
    def tentative(self) -> list[str]:
        """The words of the newest hypothesis after the committed ones."""
        return self._agreement.tentative

    @tentative.setter
    def tentative(self, words: list[str]) -> None:
        self._agreement.tentative = words

    @property
    def committed_text(self) -> str:
        """The committed words as text."""
        return self._agreement.committed_text

    @property
    def tentative_text(self) -> str:
        """The tentative words as text."""
        return self._agreement.tentative_text

    def update(self, words: Sequence[str], word_ends: Sequence[float] = (),
               heard_s: float = 0.0) -> list[str]:
        """Feed one decode's continuation (with its words' end times, seconds from the
        window's start, and the seconds of audio it heard); return the newly committed."""
        newly = self._agreement.update(words)
        if self.rule == "align":
            stable = align_commit_count(word_ends[: len(words)], heard_s, self.align_margin_s)
            if stable > len(newly):
                newly += self._agreement.commit_tentative(stable - len(newly))
        return newly

    def finalize(self, words: Sequence[str] | None = None) -> list[str]:
        """Commit ``words`` (or the tentative words): the decode heard everything."""
        return self._agreement.finalize(words)

    def glue(self, fragment: str) -> bool:
        """Attach punctuation to the last committed word (False: refused, see
        ``LocalAgreement.glue``)."""
        return self._agreement.glue(fragment)

    def reset(self) -> None:
        """Start an empty window."""
        self._agreement.reset()
