"""Issue 20, lead 2: just-in-time phrases a listener can parse, on scripted timings. A one-word
phrase goes out alone only after a long silence (never while speech is queued), held words are
cut at clause punctuation, and a name or a number is never split across two phrases."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speechpipe.stages.phrases import JustInTimeSegmenter, PhraseOptions, joins, may_go_on

# no_end_words="": these rules on their own (the function-word hold: test_phrase_edges.py)
NEW = PhraseOptions(lead_s=1.0, hold_silence_s=0.5, hold_wait_s=1.0, first_hold_wait_s=-1,
                    no_end_words="")
BEFORE_ISSUE_20 = PhraseOptions(lead_s=1.0, min_words=1, clause_cut=False, keep_units=False,
                                no_end_words="")


def speak_word_by_word(options: PhraseOptions, sentence: str) -> list[str]:
    """Commit one word every 0.3 s with the output always about to run out (the case that cut
    "Composite. Whatty. Barney." in the issue), then the final hypothesis."""
    seg = JustInTimeSegmenter(options)
    words = sentence.split()
    phrases: list[str] = []
    for i in range(1, len(words) + 1):
        now = 0.3 * i
        phrases += seg.feed(" ".join(words[:i]), now_s=now, queued_until_s=now + 0.5)
    phrases += seg.feed(sentence, final=True, now_s=0.3 * len(words) + 0.3)
    assert " ".join(phrases) == sentence  # every committed word once, in order
    return phrases


# -- one-word phrases --------------------------------------------------------------------------
def test_the_issues_sentence_is_no_longer_cut_into_one_word_phrases():
    sentence = "Composite Louis Varney, who studied music with him, was his son."
    old = speak_word_by_word(BEFORE_ISSUE_20, sentence)
    assert old[:3] == ["Composite", "Louis", "Varney,"]  # what the listener heard before
    new = speak_word_by_word(NEW, sentence)
    # fed word by word, always about to run out: the worst case; still never one word alone
    assert new == ["Composite Louis Varney,", "who studied", "music with", "him, was",
                   "his son."]


def test_a_lone_first_word_may_start_the_translation_when_asked():
    """``first_min_words=1``: only the utterance's first phrase may be one word (the default,
    2, holds it for company like every later phrase)."""
    first = PhraseOptions(lead_s=1.0, hold_silence_s=0.5, hold_wait_s=1.0, first_min_words=1)
    phrases = speak_word_by_word(first, "It was buried there in the end.")
    assert phrases[0] == "It"
    assert all(len(p.split()) >= 2 for p in phrases[1:-1])
    assert speak_word_by_word(NEW, "It was buried there in the end.")[0] == "It was"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.floats(0, 2), st.floats(-3, 4)),
                min_size=1, max_size=30))
def test_never_a_one_word_phrase_while_speech_is_still_queued(script):
    vocabulary = [f"w{i}" for i in range(300)]
    seg = JustInTimeSegmenter(NEW)
    committed: list[str] = []
    spoken: list[str] = []
    now = 0.0
    for grow, dt, queued_ahead in script:
        committed += vocabulary[len(committed): len(committed) + grow]
        now += dt
        phrases = seg.feed(" ".join(committed), now_s=now, queued_until_s=now + queued_ahead)
        if queued_ahead > 0:  # speech still plays: no phrase shorter than min_words
            assert all(len(p.split()) >= NEW.min_words for p in phrases), phrases
        if queued_ahead > -NEW.hold_silence_s:  # not silent long enough for a lone word
            assert all(len(p.split()) >= 2 for p in phrases), phrases
        spoken += " ".join(phrases).split()
        assert spoken == committed[: len(spoken)]
    spoken += " ".join(seg.feed(" ".join(committed), final=True, now_s=now)).split()
    assert spoken == committed


def test_a_lone_word_goes_out_alone_only_after_the_silence_and_the_wait():
    seg = JustInTimeSegmenter(NEW)
    # the first committed word of an utterance, the output long silent: it waits for company
    assert seg.feed("Composite", now_s=1.0, queued_until_s=0.0) == []
    assert seg.feed("Composite", now_s=1.9, queued_until_s=0.0) == []  # waited 0.9 s < 1.0 s
    assert seg.wake_at(0.0) == pytest.approx(2.0)
    assert seg.feed("Composite", now_s=2.0, queued_until_s=0.0) == ["Composite"]
    # later in the utterance: the queued speech runs out at 5 s with one word held
    assert seg.feed("Composite was", now_s=4.5, queued_until_s=5.0) == []  # still queued
    assert seg.feed("Composite was", now_s=5.3, queued_until_s=5.0) == []  # silent 0.3 s
    assert seg.wake_at(5.0) == pytest.approx(5.5)
    assert seg.feed("Composite was", now_s=5.5, queued_until_s=5.0) == ["was"]
    # a second word arriving in time makes a phrase of two without waiting
    assert seg.feed("Composite was his", now_s=6.0, queued_until_s=6.0) == []
    assert seg.feed("Composite was his son", now_s=6.2, queued_until_s=6.0) == ["his son"]


def test_the_final_hypothesis_speaks_a_lone_word_at_once():
    seg = JustInTimeSegmenter(NEW)
    assert seg.feed("Yes.", now_s=1.0, queued_until_s=5.0) == []
    assert seg.feed("Yes.", final=True, now_s=1.1, queued_until_s=5.0) == ["Yes."]


# -- clause boundaries -------------------------------------------------------------------------
def test_held_words_are_cut_after_their_last_clause_punctuation():
    seg = JustInTimeSegmenter(NEW)
    assert seg.feed("In the end", now_s=1.0, queued_until_s=0.0) == ["In the end"]
    assert seg.feed("In the end who studied music with him, was his", now_s=3.0,
                    queued_until_s=8.0) == []  # speech plays: they wait
    # the queue runs low: the phrase ends at the clause; "was his" waits for "son."
    assert seg.feed("In the end who studied music with him, was his", now_s=7.5,
                    queued_until_s=8.0) == ["who studied music with him,"]
    assert seg.held == 2
    assert seg.feed("In the end who studied music with him, was his son.", now_s=8.6,
                    queued_until_s=9.0) == ["was his son."]
    old = JustInTimeSegmenter(BEFORE_ISSUE_20)
    old.feed("In the end", now_s=1.0, queued_until_s=0.0)
    assert old.feed("In the end who studied music with him, was his", now_s=7.5,
                    queued_until_s=8.0) == ["who studied music with him, was his"]


def test_a_clause_of_one_word_is_not_a_reason_to_cut_there():
    seg = JustInTimeSegmenter(NEW)
    assert seg.feed("Well, I think so", now_s=1.0, queued_until_s=0.0) == ["Well, I think so"]


# -- names and numbers -------------------------------------------------------------------------
@pytest.mark.parametrize(("sentence", "unit"), [
    ("Composite Louis Varney, who studied music with him, was his son.", "Louis Varney,"),
    ("The report was written by Jean Claude Juncker last year.", "Jean Claude Juncker"),
    ("A painting by Leonardo da Vinci hangs there.", "Leonardo da Vinci"),
    ("I met Mr. Smith in the market.", "Mr. Smith"),
    ("We counted twenty five people there yesterday.", "twenty five"),
    ("It costs 1 500 euros per month now.", "1 500"),
    ("They raised 3.5 million euros this year.", "3.5 million"),
    ("Growth was three point five percent last year.", "three point five percent"),
    ("There were two hundred and five members in the room.", "two hundred and five"),
    ("In 2019 about 10 percent of them voted.", "10 percent"),
])
def test_a_name_or_a_number_is_never_split_across_two_phrases(sentence, unit):
    phrases = speak_word_by_word(NEW, sentence)
    assert any(unit in phrase for phrase in phrases), phrases
    # the same sentence under the old cutter splits it: the rule is what keeps it whole
    assert not any(unit in phrase for phrase in speak_word_by_word(BEFORE_ISSUE_20, sentence))


@pytest.mark.parametrize(("words", "expected"), [
    ("in Paris today", [False, False]),
    ("to Paris France", [False, True]),
    ("The Commission said", [True, False]),  # a sentence's first word joins a name after it
    ("him. Then we", [False, False]),  # a sentence start is no name
    ("Louis, Varney", [False]),  # clause punctuation ends a name
    ("I went", [False]),
    ("one of the", [False, False]),
    ("1990 1991", [True]),
])
def test_which_neighbours_belong_together(words, expected):
    split = words.split()
    assert [joins(split, i) for i in range(1, len(split))] == expected


@pytest.mark.parametrize(("words", "expected"), [
    ("the composer Louis", True), ("we counted twenty", True), ("three point", True),
    ("Leonardo da", True), ("two hundred and", True), ("the end.", False),
    ("He said", False), ("I", False), ("the old man", False), ("Varney,", False),
])
def test_a_name_or_number_at_the_end_may_go_on(words, expected):
    assert may_go_on(words.split()) is expected


def test_a_held_name_is_spoken_after_the_silence_even_if_it_might_go_on():
    seg = JustInTimeSegmenter(NEW)
    assert seg.feed("I met Louis", now_s=1.0, queued_until_s=0.0) == ["I met"]
    assert seg.held == 1
    assert seg.wake_at(1.6) == pytest.approx(2.1)  # queue ends 1.6, +0.5 s of silence
    assert seg.feed("I met Louis", now_s=2.1, queued_until_s=1.6) == ["Louis"]


def test_keep_units_off_restores_the_cut_inside_a_name():
    options = PhraseOptions(lead_s=1.0, keep_units=False)
    seg = JustInTimeSegmenter(options)
    assert seg.feed("I met Louis", now_s=1.0, queued_until_s=0.0) == ["I met Louis"]


# -- the wake time agrees with feed -------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.floats(0, 2), st.floats(-3, 4)),
                min_size=1, max_size=20), st.floats(-3, 4), st.sampled_from([NEW,
                                                                             BEFORE_ISSUE_20]))
def test_a_feed_after_wake_at_cuts_held_words(script, queued_after, options):
    """The TTS stage sleeps until ``wake_at``: feeding the same words then must cut something
    (else the stage would wake for nothing, or held words would wait for the final)."""
    vocabulary = ["Louis", "Varney,", "twenty", "five", "the", "said.", "him,", "music"]
    seg = JustInTimeSegmenter(options)
    committed: list[str] = []
    now = 0.0
    for grow, dt, queued_ahead in script:
        committed += [vocabulary[(len(committed) + k) % len(vocabulary)] for k in range(grow)]
        now += dt
        seg.feed(" ".join(committed), now_s=now, queued_until_s=now + queued_ahead)
    queued_until = now + queued_after
    at = seg.wake_at(queued_until)
    if not seg.held:
        assert at is None
        return
    assert at is not None
    later = max(at, now) + 1e-6
    assert seg.feed(" ".join(committed), now_s=later, queued_until_s=queued_until)


def test_the_first_word_waits_less_for_company():
    """``first_hold_wait_s``: a lone first word goes out after its own, shorter wait."""
    options = PhraseOptions(lead_s=1.0, hold_silence_s=0.5, hold_wait_s=1.5,
                            first_hold_wait_s=0.75)
    seg = JustInTimeSegmenter(options)
    assert seg.feed("Well,", now_s=1.0, queued_until_s=0.0) == []
    assert seg.wake_at(0.0) == 1.75
    assert seg.feed("Well,", now_s=1.8, queued_until_s=0.0) == ["Well,"]
    # later lone words wait the full hold_wait_s
    assert seg.feed("Well, I", now_s=3.0, queued_until_s=2.0) == []
    assert seg.wake_at(2.0) == 4.5
