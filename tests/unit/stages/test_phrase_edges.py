"""Issue 72: what the voice is handed. A phrase cut before the end of its utterance does not
end on a function word (article, preposition, conjunction, possessive): spoken alone with its
pause, "planet and," was heard "plan it in" and "in the," "end up"
(``benchmarks/voice_losses.py``; docs/benchmarks-history.md, "What the voice loses")."""

from __future__ import annotations

import pytest

from speechpipe.stages.phrase_options import FUNCTION_WORDS
from speechpipe.stages.phrases import JustInTimeSegmenter, PhraseOptions, make_segmenter


def running_out(seg: JustInTimeSegmenter, committed: str, now: float) -> list[str]:
    """Feed with the queued speech about to run out (0.2 s left): a cut is due now."""
    return seg.feed(committed, now_s=now, queued_until_s=now + 0.2)


@pytest.mark.parametrize("words, spoken, held", [
    ("the little prince decided to abandon his", "the little prince decided to abandon",
     "his"),
    ("we are building a", "we are building", "a"),
    ("a transcendental step in the", "a transcendental step", "in the"),
    ("he explored the planet and", "he explored the planet", "and"),
])
def test_by_default_a_phrase_does_not_end_on_a_function_word(words, spoken, held):
    seg = make_segmenter(PhraseOptions())
    assert isinstance(seg, JustInTimeSegmenter)
    assert running_out(seg, words, 1.0) == [spoken]
    assert seg.held == len(held.split())
    # the held words open the next phrase
    assert running_out(seg, words + " planet", 2.0) == [held + " planet"]


def test_the_end_of_the_utterance_still_speaks_a_trailing_function_word():
    seg = make_segmenter(PhraseOptions())
    assert seg.feed("tell me about the", final=True, now_s=1.0) == ["tell me about the"]


def test_held_function_words_are_spoken_after_the_silence_and_the_wait():
    """Nothing comes after "of the": the words are not held for ever."""
    seg = JustInTimeSegmenter(PhraseOptions(hold_silence_s=0.5, hold_wait_s=1.0))
    assert running_out(seg, "the history of the", 1.0) == ["the history"]
    assert seg.feed("the history of the", now_s=1.2, queued_until_s=1.1) == []
    assert seg.feed("the history of the", now_s=2.1, queued_until_s=1.1) == ["of the"]


def test_an_empty_list_lets_any_word_end_a_phrase():
    seg = JustInTimeSegmenter(PhraseOptions(no_end_words=""))
    assert running_out(seg, "we are building a", 1.0) == ["we are building a"]


def test_the_default_words_are_function_words_only():
    words = FUNCTION_WORDS.split()
    assert len(words) == len(set(words))
    assert {"the", "a", "and", "of", "his"} <= set(words)
    assert PhraseOptions().no_end_words == FUNCTION_WORDS
