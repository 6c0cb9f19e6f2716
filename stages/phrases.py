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
  Before the end of the utterance a phrase is one a listener can parse: at least
  ``min_words`` words, ending after clause punctuation when the held words have one, never
  inside a name or a number (nor on a word that may continue one). Held words that make no
  such phrase are spoken anyway once the output has been silent ``hold_silence_s`` and they
  have waited ``hold_wait_s`` (a lone word never goes out while speech is still queued).

Either way only committed words are ever spoken, in order, each once.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from speechpipe.stages.agreement import normalize_word
from speechpipe.stages.phrase_options import CONTINUATION_TAIL_S, PhraseOptions

__all__ = ["PhraseOptions", "PhraseSegmenter", "JustInTimeSegmenter", "make_segmenter",
           "joins", "may_go_on", "voice_text", "is_continuation", "continuation_audio",
           "CONTINUATION_TAIL_S"]

_CLAUSE_END = (",", ".", ";", ":", "?", "!", "…")
_SENTENCE_END = (".", "?", "!", "…")
_EDGES = "\"'“”‘’«»()[]¿¡,.;:?!…"
_I_FORMS = frozenset(("i", "i'm", "i'll", "i've", "i'd"))
_NUMBER_WORDS = frozenset(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty "
    "ninety hundred thousand million billion trillion".split())
_MAGNITUDES = frozenset(("hundred", "thousand", "million", "billion", "trillion"))
_NUMBER_TAIL = _NUMBER_WORDS | {"percent"}  # continues a number: "3.5 million", "10 percent"
_NAME_PARTICLES = frozenset("de da di del della der van von du dos das la le bin ibn".split())
_TITLES = frozenset("mr mrs ms dr prof st mt".split())  # "Mr." ends no clause: "Mr. Smith"


_QUIET = 0.02  # of the phrase's peak: below this a sample is the voice's trailing silence


def is_continuation(phrase: str, ends_utterance: bool) -> bool:
    """Does the speaker's sentence go on after ``phrase``? Neither the utterance's end nor a
    (confirmed) sentence end."""
    text = phrase.strip()
    return bool(text) and not ends_utterance and not _ends_sentence(text.split()[-1])


def continuation_audio(samples: NDArray[np.int16], sample_rate: int,
                       tail_s: float = CONTINUATION_TAIL_S) -> NDArray[np.int16]:
    """A continuation's audio without the voice's end-of-text silence: a voice closes every
    text with ~0.15-0.2 s of quiet (Piper), which between two phrases of one sentence is a
    pause the speaker did not make. At most ``tail_s`` of it is kept."""
    if not len(samples):
        return samples
    level = np.abs(samples.astype(np.int32))
    loud = np.flatnonzero(level > _QUIET * int(level.max()))
    if not len(loud):
        return samples
    end = min(len(samples), int(loud[-1]) + 1 + int(tail_s * sample_rate))
    return samples[:end]


def voice_text(phrase: str, ends_utterance: bool) -> str:
    """What the voice is given for ``phrase``: a phrase in the middle of a sentence is spoken
    as a continuation. A voice reads the end of its text as a sentence end (falling pitch, the
    pause after it), so a phrase that neither closes a sentence nor ends the utterance gets a
    comma instead (level pitch, no sentence silence). Committed sentence ends are confirmed
    ones (``stages.utterance``, issue 45), so they keep their full stop."""
    text = phrase.strip()
    if not is_continuation(text, ends_utterance):
        return text
    return text.rstrip(",;:") + ","


# -- names and numbers (``keep_units``) --------------------------------------------------------
def _bare(word: str) -> str:
    return word.strip(_EDGES).casefold()


def _ends_clause(word: str) -> bool:
    return word.endswith(_CLAUSE_END) and _bare(word) not in _TITLES


def _ends_sentence(word: str) -> bool:
    return word.endswith(_SENTENCE_END) and _bare(word) not in _TITLES


def _capitalized(word: str) -> bool:
    bare = word.strip(_EDGES)
    return bool(bare) and bare[0].isupper() and bare.casefold() not in _I_FORMS


def _numeric(word: str) -> bool:
    """Digits ("1,500", "3.5", "$3", "10%", "1990s") or number words ("twenty-five")."""
    bare = _bare(word).strip("$€£¥%")
    if any(ch.isdigit() for ch in bare):
        return True
    return bool(bare) and all(part in _NUMBER_WORDS for part in bare.split("-"))


def _name(words: list[str], i: int) -> bool:
    """A capitalized word not at the start of a sentence."""
    return _capitalized(words[i]) and i > 0 and not _ends_sentence(words[i - 1])


def _connector(words: list[str], i: int) -> bool:
    """``words[i]`` links the unit words on both sides: "Leonardo da Vinci", "three point
    five", "two hundred and five" (the last known word: it may link to the next one)."""
    if not 0 < i < len(words) or _ends_clause(words[i - 1]):
        return False
    last = i == len(words) - 1
    if not last and _ends_clause(words[i]):
        return False
    word, before = _bare(words[i]), words[i - 1]
    if word in _NAME_PARTICLES:
        return _capitalized(before) and (last or _name(words, i + 1))
    if word == "point":
        return _numeric(before) and (last or _numeric(words[i + 1]))
    return word == "and" and _bare(before) in _MAGNITUDES and (last or _numeric(words[i + 1]))


def joins(words: list[str], i: int) -> bool:
    """``words[i - 1]`` and ``words[i]`` belong to one name ("Louis Varney": capitalized words
    after the first of a sentence) or one number ("twenty five", "3.5 million")."""
    before, word = words[i - 1], words[i]
    if _ends_clause(before):
        return False
    if _capitalized(before) and _name(words, i):
        return True
    if _numeric(before) and (_numeric(word) or _bare(word) in _NUMBER_TAIL):
        return True
    return _connector(words, i) or _connector(words, i - 1)


def may_go_on(words: list[str]) -> bool:
    """Whether the last word's name or number may go on in the next (not yet known) word."""
    last = len(words) - 1
    if _ends_clause(words[last]):
        return False
    return _name(words, last) or _numeric(words[last]) or _connector(words, last)


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
    timeline (<= ``now_s``: the output is silent). ``wake_at(queued_until_s)`` is the earliest
    stream time at which feeding the same words again could cut some of the held ones."""

    def __init__(self, options: PhraseOptions = PhraseOptions()) -> None:
        self.options = options
        self._spoken = 0
        self._words: list[str] = []
        self._seen: list[float] = []  # per committed word: the ``now_s`` it was first fed at
        self._no_end = frozenset(options.no_end_words.casefold().split())
        self._least = max(1, options.min_words)
        self.held = 0  # committed words waiting after the last feed

    def feed(self, committed: str, final: bool = False, *, now_s: float = 0.0,
             queued_until_s: float = 0.0) -> list[str]:
        """New phrases to speak from the committed text, cut when the listener's queue runs low."""
        words = self._words = committed.split()
        self._spoken = min(self._spoken, len(words))
        del self._seen[len(words):]
        self._seen.extend([now_s] * (len(words) - len(self._seen)))
        phrases: list[str] = []
        limit = max(1, self.options.max_wait_words)
        while len(words) - self._spoken >= limit:  # held long enough: no phrase grows unbounded
            cut = self._cut(words, self._spoken, limit, min(self._least, limit)) or limit
            phrases.append(" ".join(words[self._spoken: self._spoken + cut]))
            self._spoken += cut
        pending = len(words) - self._spoken
        if pending and final:
            cut = pending
        elif pending and queued_until_s - now_s < self.options.lead_s:  # running out
            cut = self._cut(words, self._spoken, pending, self._least_now())
            if not cut and self._waited_enough(now_s, queued_until_s):
                cut = pending  # nothing parses better, and the listener has waited in silence
        else:
            cut = 0
        if cut:
            phrases.append(" ".join(words[self._spoken: self._spoken + cut]))
            self._spoken += cut
        self.held = len(words) - self._spoken
        return phrases

    def wake_at(self, queued_until_s: float) -> float | None:
        """When a feed without new words could next cut held words (None: nothing is held).
        Consistent with ``feed``: fed with the same words after this time, it cuts."""
        if not self.held:
            return None
        if self._cut(self._words, self._spoken, self.held, self._least_now()):
            return queued_until_s - self.options.lead_s
        return max(queued_until_s + self.options.hold_silence_s,
                   self._seen[self._spoken] + self._hold_wait())

    def _least_now(self) -> int:
        """The fewest words the next phrase may have (the first phrase: ``first_min_words``)."""
        if self._spoken == 0:
            return max(1, min(self._least, self.options.first_min_words))
        return self._least

    def _waited_enough(self, now_s: float, queued_until_s: float) -> bool:
        return (now_s - queued_until_s >= self.options.hold_silence_s
                and now_s - self._seen[self._spoken] >= self._hold_wait())

    def _hold_wait(self) -> float:
        """How long the oldest held word waits for company (the first word: its own wait)."""
        first = self.options.first_hold_wait_s
        return first if self._spoken == 0 and first >= 0 else self.options.hold_wait_s

    def _cut(self, words: list[str], start: int, most: int, least: int) -> int:
        """How many words from ``words[start]`` (``least`` to ``most``) make the phrase to
        speak before the end of the utterance: not ending on a
        ``no_end_words`` word nor inside a name or a number (nor on one that may go on), after
        the last clause punctuation when there is one (``clause_cut``); 0: none does."""
        allowed = [k for k in range(least, most + 1) if self._may_end(words, start + k)]
        if not allowed:
            return 0
        if self.options.clause_cut:
            clauses = [k for k in allowed if _ends_clause(words[start + k - 1])]
            if clauses:
                return clauses[-1]
        return allowed[-1]

    def _may_end(self, words: list[str], end: int) -> bool:
        """Whether a phrase may end before ``words[end]`` (``end == len(words)``: after the
        last committed word, whose successor is not known yet)."""
        if normalize_word(words[end - 1]) in self._no_end:
            return False
        if not self.options.keep_units:
            return True
        return not (may_go_on(words) if end == len(words) else joins(words, end))


def make_segmenter(options: PhraseOptions) -> PhraseSegmenter | JustInTimeSegmenter:
    """The phrase segmenter that ``options.cut`` selects."""
    return JustInTimeSegmenter(options) if options.cut == "just_in_time" else PhraseSegmenter(
        options)
