"""Phrase segmenter: when committed target text is worth speaking.

Speaking word by word sounds broken; waiting for the sentence end costs seconds. Two policies
(``PhraseOptions.cut``):

- ``count`` (``PhraseSegmenter``): a phrase is cut at clause punctuation, or once ``max_words``
  committed words wait (the first phrase of an utterance needs only ``first_words``, to start
  talking early), and whatever is left at the end of the utterance.
- ``just_in_time`` (``JustInTimeSegmenter``): committed words wait while speech plays and are
  cut into one phrase when the speech already queued is about to run out (less than
  ``lead_s`` left: the output would fall silent before the next commit could refill it), when
  ``max_wait_words`` wait, and at the end of the utterance. Longer phrases, no forced silence.

Either way only committed words are ever spoken, in order, each once.
"""

from __future__ import annotations

from dataclasses import dataclass

from speechpipe.stages.agreement import normalize_word

__all__ = ["PhraseOptions", "PhraseSegmenter", "JustInTimeSegmenter", "make_segmenter"]

_CLAUSE_END = (",", ".", ";", ":", "?", "!", "…")


@dataclass(frozen=True, slots=True)
class PhraseOptions:
    """When committed text becomes a spoken phrase (``--set phrases.*``)."""
    first_words: int = 2
    max_words: int = 5
    min_words_at_punctuation: int = 1
    cut: str = "just_in_time"  # or "count" (see the module docstring)
    lead_s: float = 1.0  # just in time: cut when less queued speech than this is left
    max_wait_words: int = 12  # just in time: never hold more words than this
    # just in time: a phrase does not end on these words before the end of the utterance,
    # e.g. "a an the of to" (space-separated; none by default: see docs/benchmarks.md)
    no_end_words: str = ""

    def __post_init__(self) -> None:
        if self.cut not in ("count", "just_in_time"):
            raise ValueError(f"phrases.cut must be count or just_in_time, not {self.cut!r}")


class PhraseSegmenter:
    """Feed the full committed text of one utterance; get the phrases ready to speak."""

    def __init__(self, options: PhraseOptions = PhraseOptions()) -> None:
        self.options = options
        self._spoken = 0  # words already handed out
        self._phrases = 0

    def feed(self, committed: str, final: bool = False, *, now_s: float = 0.0,
             queued_until_s: float = 0.0) -> list[str]:
        """Add newly committed words; returns the phrases ready to speak (``now_s`` and
        ``queued_until_s`` are for the just-in-time policy)."""
        words = committed.split()
        if len(words) < self._spoken:  # committed text never shrinks; be safe anyway
            self._spoken = len(words)
        phrases: list[str] = []
        while self._spoken < len(words):
            pending = words[self._spoken :]
            cut = self._cut(pending)
            if cut is None:
                if not final:
                    break
                cut = len(pending)
            phrases.append(" ".join(pending[:cut]))
            self._spoken += cut
            self._phrases += 1
        return phrases

    def _cut(self, pending: list[str]) -> int | None:
        limit = self.options.first_words if self._phrases == 0 else self.options.max_words
        for i, word in enumerate(pending[:limit]):
            if word.endswith(_CLAUSE_END) and i + 1 >= self.options.min_words_at_punctuation:
                return i + 1
        if len(pending) >= limit:
            return limit
        return None


class JustInTimeSegmenter:
    """The ``just_in_time`` policy for one utterance (pure: time comes in as arguments).

    ``feed(committed, final, now_s=..., queued_until_s=...)``: ``now_s`` is the stream time of
    the decision, ``queued_until_s`` where the speech already handed out ends on the output
    timeline (<= ``now_s``: the output is silent)."""

    def __init__(self, options: PhraseOptions = PhraseOptions()) -> None:
        self.options = options
        self._spoken = 0
        self.held = 0  # committed words waiting after the last feed

    def feed(self, committed: str, final: bool = False, *, now_s: float = 0.0,
             queued_until_s: float = 0.0) -> list[str]:
        """New phrases to speak from the committed text, cut when the listener's queue runs low."""
        words = committed.split()
        self._spoken = min(self._spoken, len(words))
        pending = words[self._spoken :]
        if not pending:
            return []
        running_out = queued_until_s - now_s < self.options.lead_s
        phrases: list[str] = []
        limit = max(1, self.options.max_wait_words)
        while len(pending) >= limit:  # held long enough: no phrase grows without bound
            cut = self._phrase_end(pending[:limit]) or limit
            phrases.append(" ".join(pending[:cut]))
            pending = pending[cut:]
        if pending and final:
            phrases.append(" ".join(pending))
            pending = []
        elif pending and running_out:
            cut = self._phrase_end(pending)
            if cut:
                phrases.append(" ".join(pending[:cut]))
                pending = pending[cut:]
        self._spoken = len(words) - len(pending)
        self.held = len(pending)
        return phrases

    def _phrase_end(self, words: list[str]) -> int:
        """How many of ``words`` make a phrase that does not end on a ``no_end_words`` word
        (0: none does; they wait for the next word)."""
        held = set(self.options.no_end_words.casefold().split())
        cut = len(words)
        while cut and normalize_word(words[cut - 1]) in held:
            cut -= 1
        return cut


def make_segmenter(options: PhraseOptions) -> PhraseSegmenter | JustInTimeSegmenter:
    """The phrase segmenter that ``options.cut`` selects."""
    return JustInTimeSegmenter(options) if options.cut == "just_in_time" else PhraseSegmenter(
        options)
