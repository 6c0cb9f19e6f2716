"""Commit policies: which words of a window's hypotheses become final (never retracted).

A ``CommitPolicy`` holds one side (captions or translation) of an utterance's current
window: the committed words, which the next decode is forced to continue, and the tentative
tail. It is fed each decode's continuation (``update``) and commits words by its rule:

- ``agreement``: LocalAgreement-n (``stages.agreement``): the words on which the last ``n``
  continuations agree (whisper_streaming's ``HypothesisBuffer``);
- ``align``: agreement, and also the leading words that one decode's alignment ends at least
  ``align_margin_s`` before the end of its audio (AlignAtt's rule on words: what the model
  attends to near the end of the audio may still change). The edge rule below bounds it
  too: never the last word, never past the frontier. Not the default: one decode's words
  are contradicted by the utterance's own final decode far more often (docs/benchmarks-history.md,
  "Commit after one decode, under load").

Nothing at a window's edge is final (``settle_margin_s`` > 0, the default): between pauses, an
agreed word commits only when the audio has *settled* it: by the decode's own alignment
(cross-attention) it ends at least ``settle_margin_s`` before the end of the audio that decode
heard, and before the ``frontier_s`` the caller gives (the translation: the end of the
captions committed so far, so it never runs ahead of what was heard). The last word of a
partial's hypothesis never commits; without word times, the policy keeps that rule alone. A
word cut by the window's end ("bât-" heard as "bat") is then still tentative when the next
decode hears it whole.

Decodes that commit everything (a pause, a window cut, the utterance's end) call
``finalize``. Where the window moves on, ``reset`` starts the next window empty; the text
committed so far then travels as context (``stages.asr``). Selected by ``asr.commit_policy``.
"""

from __future__ import annotations

from collections.abc import Sequence

from speechpipe.stages.agreement import LocalAgreement, normalize_word
from speechpipe.stages.asr_options import CommitPolicyName

__all__ = ["CommitPolicy", "CommitPolicyName", "align_commit_count", "settled_count",
           "sentence_end_count", "split_sentence_end", "SENTENCE_END_MARKS"]


def align_commit_count(word_ends: Sequence[float], heard_s: float, margin_s: float) -> int:
    """How many leading words to commit: those whose aligned end lies at least ``margin_s``
    before the end of the audio heard. Stops at the first word too close."""
    count = 0
    for end in word_ends:
        if end > heard_s - margin_s:
            break
        count += 1
    return count


def settled_count(words: int, word_ends: Sequence[float], frontier_s: float) -> int:
    """How many of a partial's ``words`` leading words the audio has settled: each ends (by
    ``word_ends``, seconds) no later than ``frontier_s``; never the last word. Without a time
    for every word, all but the last."""
    if words <= 1:
        return 0
    if len(word_ends) < words:
        return words - 1
    return min(words - 1, align_commit_count(word_ends[:words], frontier_s, 0.0))


_SENTENCE_END = ".?!…"
_NOT_AN_END = frozenset("mr mrs ms dr prof st mt sr jr vs etc".split())


_WIDE_ENDS = "\u3002\uff1f\uff01"  # 。？！ (scripts written without spaces)
SENTENCE_END_MARKS = _SENTENCE_END + _WIDE_ENDS


def sentence_end_count(text: str) -> int:
    """The sentence ends ``text`` makes: words closing with ``. ? ! …`` (not a title such as
    "Mr."), and full-width ends inside unspaced text (Chinese, Japanese)."""
    return (sum(1 for word in text.split() if split_sentence_end(word)[1])
            + sum(text.count(mark) for mark in _WIDE_ENDS))


def split_sentence_end(word: str) -> tuple[str, str]:
    """``word`` without the sentence end it closes with, and that end ("limitations." ->
    ("limitations", ".")); ("Mr.", "") for a title, and for a word that is only punctuation."""
    stripped = word.rstrip(_SENTENCE_END)
    if stripped == word or not stripped.strip("\"'»”’)") or \
            stripped.strip("\"'»”’(«“‘").casefold() in _NOT_AN_END:
        return word, ""
    return stripped, word[len(stripped):]


class CommitPolicy:
    """One side of a window: committed words plus a tentative tail, by ``rule``."""

    def __init__(self, rule: CommitPolicyName = "agreement", n: int = 2, lookback: int = 0,
                 align_margin_s: float = 1.0, settle_margin_s: float = 0.0,
                 first_words: int = 1) -> None:
        if rule not in ("agreement", "align"):
            raise ValueError(f"commit policy must be agreement or align, not {rule!r}")
        self.rule = rule
        self.align_margin_s = align_margin_s
        self.settle_margin_s = settle_margin_s
        # the first commit of a window takes at least this many agreed words (an agreement on
        # one opening word alone is often two hypotheses starting with the same "And", "I"
        # or "The" and nothing else in common)
        self.first_words = max(1, first_words)
        self._agreement = LocalAgreement(n, lookback if n == 2 else 0)
        # where the last word committed by ``update`` ends (seconds from the window's start,
        # by its decode's alignment); None before any, or when not known
        self.committed_end_s: float | None = None

    @property
    def needs_word_times(self) -> bool:
        """Whether ``update`` uses the decode's word end times (ask the engine for them)."""
        return self.rule == "align" or self.settle_margin_s > 0

    @property
    def wants_word_times(self) -> bool:
        """Whether the next decode's word times can change what commits: the rule uses them
        and (settling) there is an earlier hypothesis to agree with."""
        if self.rule == "align":
            return True
        return self.settle_margin_s > 0 and self._agreement.can_agree

    @property
    def agreeing_starts(self) -> frozenset[str]:
        """First words (normalized) a continuation must start with to commit anything by
        agreement (``LocalAgreement.first_words``)."""
        return self._agreement.first_words

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
               heard_s: float = 0.0, frontier_s: float | None = None) -> list[str]:
        """Feed one decode's continuation (with its words' end times, seconds from the
        window's start, and the seconds of audio it heard); return the newly committed.
        ``frontier_s``: no word ending after it commits (settling only)."""
        words = [w for w in words if w]
        limit = None
        if self.settle_margin_s > 0:
            frontier = heard_s - self.settle_margin_s
            if frontier_s is not None:
                frontier = min(frontier, frontier_s)
            limit = settled_count(len(words), word_ends, frontier)
        least = 1 if self._agreement.committed else self.first_words
        newly = self._agreement.update(words, limit, least)
        if self.rule == "align":
            stable = align_commit_count(word_ends[: len(words)], heard_s, self.align_margin_s)
            if limit is not None:  # settled too: never the last word, nor past the frontier
                stable = min(stable, limit)
            if stable > len(newly):
                newly += self._agreement.commit_tentative(stable - len(newly))
        if newly:
            self.committed_end_s = (float(word_ends[len(newly) - 1])
                                    if len(word_ends) >= len(newly) else None)
        return newly

    def finalize(self, words: Sequence[str] | None = None) -> list[str]:
        """Commit ``words`` (or the tentative words): the decode heard everything."""
        self.committed_end_s = None
        return self._agreement.finalize(words)

    def hold_sentence_end(self) -> str:
        """Take the sentence end off the last committed word and return it ("" when it has
        none): it is not final until what follows confirms it (``docs/design.md``, "Nothing
        at a window's edge is final"). Committed text stays append-only as a string
        everywhere it was sent: callers hold back before they publish."""
        if not self._agreement.committed:
            return ""
        word, end = split_sentence_end(self._agreement.committed[-1])
        if end:
            self._agreement.committed[-1] = word
        return end

    def glue_before(self, fragment: str, new: int) -> bool:
        """Attach punctuation to the word before the ``new`` last committed words (a
        sentence end confirmed by the words that follow it). False: no such word here."""
        committed = self._agreement.committed
        if not fragment or normalize_word(fragment) or len(committed) <= new:
            return False
        committed[-new - 1] += fragment
        return True

    def glue(self, fragment: str) -> bool:
        """Attach punctuation to the last committed word (False: refused, see
        ``LocalAgreement.glue``)."""
        return self._agreement.glue(fragment)

    def drop(self, count: int) -> list[str]:
        """Remove the first ``count`` committed words (they move to the context) and return
        them; the rest stay committed (the decoder's forced prefix)."""
        dropped = self._agreement.committed[:count]
        del self._agreement.committed[:count]
        return dropped

    def reset(self) -> None:
        """Start an empty window."""
        self.committed_end_s = None
        self._agreement.reset()
