"""When to cut a long decode window that has no pause: at a quiet moment at its live edge.

The ASR decodes a bounded window of an utterance (``stages.asr``). A window moves on at a
VAD pause; speech that runs on without one is cut once the window is ``asr.max_window_s``
long, as soon as the newest audio is quiet (a gap between words, shorter than a VAD pause),
or at ``asr.max_window_s + asr.cut_grace_s`` whatever the audio. The cut decode hears the
whole window and commits everything, so it must end where no word is being spoken: the
words already committed in the window may reach up to the live edge, so an earlier cut
point would make the next window hear (and repeat) some of them.

Speech that runs on also moves its window at a *sentence boundary* (``sentence_boundary``):
where both sides have committed a sentence end and the alignment of the two sentence ends
agrees on where it lies in the audio. The words up to it move to the context, the audio
before it leaves the window, and the words committed after it stay the window's forced
prefix (their audio stays). Pure functions on int16 samples and word lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

__all__ = ["SentenceBoundary", "quiet_tail", "sentence_boundary", "sentence_ends"]

HOP = 160  # 10 ms at 16 kHz


def quiet_tail(samples: NDArray[np.int16], tail: int = 1280, quantile: float = 0.2) -> bool:
    """Is the last ``tail`` samples' energy (mean square) no higher than the ``quantile`` of
    the 10 ms energies of all of ``samples``? (A pause between words is; a vowel is not.)"""
    hops = len(samples) // HOP
    if hops < 4 * max(1, tail // HOP) or tail < HOP:
        return False
    frames = samples[len(samples) - hops * HOP:].astype(np.float32).reshape(hops, HOP)
    energy = (frames * frames).mean(axis=1)
    last = energy[-max(1, tail // HOP):].mean()
    return bool(last <= np.quantile(energy, quantile))


_SENTENCE_END = (".", "?", "!", "。", "？", "！")
_CLAUSE_END = (*_SENTENCE_END, ",", ";", ":", "、", "，")


def sentence_ends(words: Sequence[str], clauses: bool = False) -> list[int]:
    """Indices of the words that end a sentence (``.``, ``?``, ``!``; not ``...``, which
    Whisper writes for a voice that trails off), or with ``clauses`` a clause too
    (``,``, ``;``, ``:``)."""
    marks = _CLAUSE_END if clauses else _SENTENCE_END
    return [i for i, word in enumerate(words)
            if word.endswith(marks) and not word.endswith(("..", "…"))]


class SentenceBoundary(NamedTuple):
    """Where a window can move on: the first ``source_words`` committed caption words and
    the first ``target_words`` committed translation words end before ``at_s`` seconds of
    the window's audio, everything after them comes after it."""
    source_words: int
    target_words: int
    at_s: float


def sentence_boundary(
    source: Sequence[str], source_ends: Sequence[float],
    target: Sequence[str], target_ends: Sequence[float],
    *, tolerance_s: float, min_s: float, margin_s: float = 0.0, clauses: bool = True,
) -> SentenceBoundary | None:
    """The latest clause (or sentence) end committed on both sides whose aligned times agree.

    ``source``/``target`` are a window's committed words, ``*_ends`` their aligned end times
    (seconds from the window's start; a word ends where the next one starts). A caption
    word and a translation word that both end a clause are the same boundary when their
    times lie within ``tolerance_s`` and the boundary splits the translation in time too:
    no translation word before it ends more than ``tolerance_s`` after it, none after it
    ends more than ``tolerance_s`` before it (Whisper's translation follows the speech
    clause by clause; where it reorders across the boundary there is none). The boundary
    lies ``margin_s`` before the caption word's end, which is where the next word starts
    (0.1 s made the next window hear the end of a word again and translate it twice), and
    at least ``min_s`` into the window. None when there is none."""
    if len(source_ends) != len(source) or len(target_ends) != len(target):
        return None
    target_candidates = sentence_ends(target, clauses)
    for i_source in reversed(sentence_ends(source, clauses)):
        at = source_ends[i_source]
        if at - margin_s < min_s:
            return None
        for i_target in reversed(target_candidates):
            if abs(at - target_ends[i_target]) > tolerance_s:
                continue
            before, after = target_ends[:i_target + 1], target_ends[i_target + 1:]
            if max(before) > at + tolerance_s or (after and min(after) < at - tolerance_s):
                continue
            return SentenceBoundary(i_source + 1, i_target + 1, at - margin_s)
    return None
