"""LocalAgreement: commit the words on which successive hypotheses agree.

The decoder is forced to continue the committed text, so every hypothesis is a continuation:
``update(words)`` receives only the words after the committed prefix. A word is committed once
the last ``n`` continuations agree on it (LocalAgreement-n, Polák et al. 2022; the policy of
whisper_streaming). Comparison ignores case and punctuation; the committed form is taken from
the newest hypothesis, which saw the most audio.

With ``lookback`` > 0 (n=2 only), the newest hypothesis may also agree with one of the
``lookback`` hypotheses before the previous one: a single bad decode in between (a
mistranslation that the next decode corrects back) then delays a commit by one step instead of
until the end of the utterance. It still takes two decodes that agree.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Sequence

__all__ = ["LocalAgreement", "normalize_word", "common_prefix_length"]

_PUNCT = re.compile(r"[^\w']+", re.UNICODE)


def normalize_word(word: str) -> str:
    """A word as agreement compares it: lowercase, without punctuation."""
    return _PUNCT.sub("", word.casefold())


class LocalAgreement:
    """Append-only committed words plus a tentative tail, from scripted hypotheses."""

    def __init__(self, n: int = 2, lookback: int = 0) -> None:
        if n < 1:
            raise ValueError("n must be >= 1")
        if lookback and n != 2:
            raise ValueError("lookback needs n == 2")
        self.n = n
        self.lookback = lookback
        self.committed: list[str] = []
        self.tentative: list[str] = []
        self._history: deque[list[str]] = deque(maxlen=n + lookback)

    @property
    def committed_text(self) -> str:
        """The committed words as text."""
        return " ".join(self.committed)

    @property
    def tentative_text(self) -> str:
        """The not yet committed words as text."""
        return " ".join(self.tentative)

    def update(self, continuation: Sequence[str], limit: int | None = None,
               least: int = 1) -> list[str]:
        """Record a new continuation of the committed text; return the newly committed words.
        ``limit``: commit at most this many of the agreed words (the rest stay tentative and
        may commit later), e.g. only the words the audio has settled (``stages.commit``).
        ``least``: commit nothing unless at least this many words would commit (``stages.
        commit``: the first words of a window)."""
        words = [w for w in continuation if w]
        self._history.append(words)
        newly: list[str] = []
        if len(self._history) >= self.n:
            history = list(self._history)
            if self.lookback:
                agreed = max(common_prefix_length([old, words]) for old in history[:-1])
            else:
                agreed = common_prefix_length(history[-self.n :])
            if limit is not None:
                agreed = max(0, min(agreed, limit))
            if agreed < least:
                agreed = 0
            newly = words[:agreed]
            if newly:
                self.committed.extend(newly)
                # older hypotheses now continue past the new commit point (or are dropped,
                # when they disagree with what was just committed)
                kept = [h[agreed:] for h in history[:-1] if common_prefix_length(
                    [h, words]) >= agreed]
                self._history = deque([*kept, words[agreed:]], maxlen=self.n + self.lookback)
        self.tentative = words[len(newly):]
        return newly

    @property
    def can_agree(self) -> bool:
        """Could the next continuation commit words? Only with earlier hypotheses that hold
        words to agree with (a caller can skip work that only matters for a commit)."""
        return len(self._history) >= self.n - 1 and any(self._history)

    @property
    def first_words(self) -> frozenset[str]:
        """The first word (normalized) of each earlier hypothesis: a continuation that starts
        with none of them commits nothing."""
        return frozenset(normalize_word(h[0]) for h in self._history if h)

    def commit_tentative(self, count: int) -> list[str]:
        """Commit the first ``count`` tentative words on another policy's say (e.g. the
        alignment of one decode); older hypotheses that disagree with them are dropped."""
        words = self.tentative[:max(0, count)]
        if not words:
            return []
        self.committed.extend(words)
        self.tentative = self.tentative[len(words):]
        kept = [h[len(words):] for h in self._history
                if common_prefix_length([h, words]) >= len(words)]
        self._history = deque(kept, maxlen=self.n + self.lookback)
        return words

    def glue(self, fragment: str) -> bool:
        """Attach punctuation the decoder put right after the last committed word.

        Committed text stays append-only as a string. A fragment with letters would change a
        committed word, so it is refused (returns False) and dropped.
        """
        if not fragment or not self.committed or normalize_word(fragment):
            return False
        self.committed[-1] += fragment
        return True

    def finalize(self, continuation: Sequence[str] | None = None) -> list[str]:
        """End of utterance: commit ``continuation`` (or the current tentative words)."""
        words = list(self.tentative if continuation is None else continuation)
        words = [w for w in words if w]
        self.committed.extend(words)
        self.tentative = []
        self._history.clear()
        return words

    def reset(self) -> None:
        """Forget everything (a new utterance)."""
        self.committed = []
        self.tentative = []
        self._history.clear()


def common_prefix_length(hypotheses: Sequence[Sequence[str]]) -> int:
    """How many leading words all ``hypotheses`` share (compared as ``normalize_word``)."""
    length = min(len(h) for h in hypotheses)
    for i in range(length):
        first = normalize_word(hypotheses[0][i])
        if any(normalize_word(h[i]) != first for h in hypotheses[1:]):
            return i
    return length
