"""Phrase segmenter: when committed target text is worth speaking.

Speaking word by word sounds broken; waiting for the sentence end costs seconds. A phrase is
cut at clause punctuation, or once ``max_words`` committed words wait (the first phrase of an
utterance needs only ``first_words``, to start talking early), and whatever is left at the end
of the utterance.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PhraseOptions", "PhraseSegmenter"]

_CLAUSE_END = (",", ".", ";", ":", "?", "!", "…")


@dataclass(frozen=True, slots=True)
class PhraseOptions:
    """When committed text becomes a spoken phrase (``--set phrases.*``)."""
    first_words: int = 2
    max_words: int = 5
    min_words_at_punctuation: int = 1


class PhraseSegmenter:
    """Feed the full committed text of one utterance; get the phrases ready to speak."""

    def __init__(self, options: PhraseOptions = PhraseOptions()) -> None:
        self.options = options
        self._spoken = 0  # words already handed out
        self._phrases = 0

    def feed(self, committed: str, final: bool = False) -> list[str]:
        """Add newly committed words; returns the phrases ready to speak."""
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
