"""Coverage of a translation by its captions: pure text rules shared by the engine (which
recovers uncovered speech), the ASR stage's guards, the eval and the server's metrics.

Word counts are what make source and target comparable: a translation from French, Spanish
or German into English holds about as many words as its source, so a translation with less
than half the words of its captions left speech out (``dropped``), and one with words but no
source words was made from nothing (``invented``).
"""

from __future__ import annotations

import math
import re
from typing import Literal

__all__ = ["Verdict", "count_words", "sentence_starts", "classify_utterance", "coverage_gap",
           "missing_tail", "MIN_RATIO", "MIN_SOURCE_WORDS"]

Verdict = Literal["ok", "invented", "dropped", "empty"]

MIN_RATIO = 0.5  # target/source words below this: the translation left speech out
MIN_SOURCE_WORDS = 8  # shorter captions are never judged short (one-word replies vary a lot)

_WORD = re.compile(r"\w", re.UNICODE)
# scripts written without spaces between words: count characters, not space-separated runs
_UNSPACED = re.compile(
    r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\u0e00-\u0e7f\u0e80-\u0eff"
    r"\u1000-\u109f\u1780-\u17ff\uf900-\ufaff]"
)
_SENTENCE_END = re.compile(r"[.!?\u3002\uff01\uff1f\u061f\u0964]+[\"'\u201d\u00bb)]*(?=\s|$)")


def count_words(text: str) -> int:
    """Words in ``text``: space-separated runs holding a letter or digit; in scripts written
    without spaces (CJK, Thai, ...) every two characters count as a word."""
    total = 0
    for token in text.split():
        unspaced = len(_UNSPACED.findall(token))
        if unspaced:
            total += math.ceil(unspaced / 2)
        elif _WORD.search(token):
            total += 1
    return total


def sentence_starts(text: str) -> list[int]:
    """Character offsets where the sentences of ``text`` start (the first is 0 when the text
    has any word)."""
    starts = [0] if text.strip() else []
    for match in _SENTENCE_END.finditer(text):
        rest = match.end()
        while rest < len(text) and text[rest].isspace():
            rest += 1
        if rest < len(text):
            starts.append(rest)
    return starts


def classify_utterance(
    source: str, target: str, min_ratio: float = MIN_RATIO,
    min_source_words: int = MIN_SOURCE_WORDS,
) -> Verdict:
    """``invented``: target words but no source words; ``dropped``: the target/source word
    ratio below ``min_ratio`` (with at least ``min_source_words`` source words); ``empty``:
    neither side has words; otherwise ``ok``."""
    n_source, n_target = count_words(source), count_words(target)
    if n_source == 0:
        return "invented" if n_target else "empty"
    if n_source >= min_source_words and n_target < min_ratio * n_source:
        return "dropped"
    return "ok"


def coverage_gap(
    source: str, target: str, min_ratio: float = MIN_RATIO,
    min_source_words: int = MIN_SOURCE_WORDS,
) -> tuple[int, str] | None:
    """Where the translation stops covering the captions, or None when it covers them.

    Returns ``(offset, fragment)``: the character offset in ``source`` of the first
    uncovered sentence, and the target's unfinished last sentence (to continue from, "" when
    it ended on a sentence end). The target's finished sentences are taken to cover as many
    source sentences; when that leaves no source sentence (or the target has none), the cut
    goes to the sentence start nearest the source word the target's length reaches.
    """
    if classify_utterance(source, target, min_ratio, min_source_words) != "dropped":
        return None
    starts = sentence_starts(source)
    target_ends = list(_SENTENCE_END.finditer(target))
    fragment = target[target_ends[-1].end():].strip() if target_ends else target.strip()
    finished = len(target_ends)
    if 0 < finished < len(starts):
        return starts[finished], fragment
    # no sentence count to go by: the source word the target's length reaches
    words = list(re.finditer(r"\S+", source))
    reach = min(len(words) - 1, max(1, count_words(target)))
    offset = words[reach].start()
    earlier = [s for s in starts if 0 < s <= offset]
    if earlier:  # a sentence start: the tail is a sentence of its own
        return earlier[-1], ""
    return offset, fragment


def missing_tail(committed: str, fresh: str, min_match: int = 2, near_end: int = 3) -> str:
    """What a fresh translation of a whole utterance says after what was already committed.

    ``committed`` is the utterance's translation so far (final, never retracted); ``fresh``
    translates the same audio again in one piece. The two are aligned word by word
    (normalized, ``difflib``); the fresh words after the last match of at least ``min_match``
    words that reaches the committed text's last ``near_end`` words are what the listener
    has not heard. "" when the texts do not align there (appending then could repeat)."""
    import difflib

    from speechpipe.stages.agreement import normalize_word

    mine, theirs = committed.split(), fresh.split()
    a, b = [normalize_word(w) for w in mine], [normalize_word(w) for w in theirs]
    blocks = [m for m in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
              if m.size >= min_match and m.a + m.size >= len(a) - near_end]
    if not blocks:
        return ""
    last = max(blocks, key=lambda m: m.b + m.size)
    return " ".join(theirs[last.b + last.size:])
