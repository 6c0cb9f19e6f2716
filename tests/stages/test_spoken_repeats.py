"""The loop guard tells a decoder's loop from a speaker who repeats (issue 40)."""

from __future__ import annotations

from speechpipe.stages.loop_guard import cut_repetition


def _kept(text: str, **kwargs) -> str:
    return " ".join(cut_repetition(text.split(), **kwargs)[0])


def test_a_speakers_repetition_in_the_captions_is_kept():
    for text in ("il faut très très finement le couper",
                 "no, no, no, I said tomorrow",
                 "er ist, er ist nicht gekommen",
                 "je pense je pense que oui"):
        assert cut_repetition(text.split()) == (text.split(), False), text


def test_a_loop_is_still_cut_in_the_captions():
    assert _kept("así así así") == "así"  # runs to the end: a loop in progress
    assert _kept("the rest of the rest of the rest of") == "the rest of"
    assert _kept("no no no no no then") == "no"  # four copies: a loop
    assert _kept("we went there and then we went there and then we") == "we went there and then"


def test_a_translation_may_repeat_where_its_captions_repeat():
    spoken = "non, non, non, je l'ai dit".split()
    assert _kept("no, no, no, I said it", spoken=spoken) == "no, no, no, I said it"
    assert _kept("no, no, no, I said it", spoken="je l'ai dit".split()) == "no,"
    # the captions hold a two-word repetition: a two-word one in the translation is kept
    spoken = "er ist, er ist nicht gekommen".split()
    assert _kept("he is, he is not here", spoken=spoken) == "he is, he is not here"
    # captions without a repetition: today's rule (two copies of a phrase are a loop)
    assert _kept("he is, he is not here", spoken="il n'est pas venu".split()) == "he is,"
    assert _kept("he is, he is not here", spoken=[]) == "he is,"


def test_a_translation_loop_past_what_was_said_is_cut():
    spoken = "très très finement".split()  # two copies said
    assert _kept("very very very finely", spoken=spoken) == "very"
