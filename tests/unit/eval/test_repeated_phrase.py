"""The eval's repeated-phrase check (issue 24): an utterance whose translation ends with a
phrase (3+ words, normalized like the scorer) it already said, or that the previous
utterance's translation ended with, while the captions do not repeat themselves. Scripted
texts: what Whisper's repetition looks like, and what a speaker's own repeats look like."""

from __future__ import annotations

from speechpipe.evaluation.evaluate import count_repeated, repeated_phrase


def test_a_phrase_appended_again_at_the_end_is_found():
    source = "compré pan en el mercado"
    target = "I bought bread at the market, at the market."
    assert repeated_phrase(source, target) == "at the market"


def test_the_end_of_the_previous_utterance_said_again():
    assert repeated_phrase("y luego nos fuimos", "And then we left the station tomorrow.",
                           "nos vemos en la estación mañana",
                           "We will meet at the station tomorrow.") == "the station tomorrow"


def test_normalized_like_the_scorer():  # case and punctuation do not hide a repeat
    assert repeated_phrase("el gato duerme", "The cat sleeps. THE CAT SLEEPS!") == \
        "the cat sleeps"


def test_a_legitimately_repeated_word_is_not_counted():
    assert repeated_phrase("es muy muy bueno", "It is very, very good.") is None
    assert repeated_phrase("no no no no", "I said no, no, no, no.") is None


def test_short_repeats_are_not_counted():
    assert repeated_phrase("el gato y la gata", "the cat and the cat") is None
    # the same texts with a 2-word threshold: it is the length that spares them
    assert repeated_phrase("el gato y la gata", "the cat and the cat", min_words=2) == "the cat"


def test_a_repeat_in_the_middle_is_not_an_appended_end():
    assert repeated_phrase("fui al mercado y fui al mercado otra vez",
                           "I went to the market I went to the market and bought bread") is None


def test_a_repeat_the_speaker_made_is_not_counted():
    # the captions repeat too: the speaker said it twice
    assert repeated_phrase("fui al mercado fui al mercado",
                           "I went to the market I went to the market") is None
    # across utterances: the captions end the same way as the previous ones
    assert repeated_phrase("sí claro que sí", "yes of course, yes of course",
                           "sí claro que sí", "yes of course") is None


def test_the_previous_utterance_only_counts_by_its_end():
    assert repeated_phrase("y fuimos a casa", "and we went home",
                           "we went home and slept", "fuimos a casa y dormimos") is None


def test_count_over_utterances_skips_empty_ones_as_previous():
    utterances = [
        ("nos vemos en la estación mañana", "We will meet at the station tomorrow."),
        ("...", ""),  # silence between them: the previous one with words is still compared
        ("y luego nos fuimos", "the station tomorrow"),
        ("compré pan en el mercado", "I bought bread at the market at the market"),
        ("muchas gracias", "Thank you very much."),
    ]
    assert count_repeated(utterances) == 2
    assert count_repeated(utterances[:2]) == 0
    assert count_repeated([("hola", "")]) == 0


def test_what_the_stream_gave_on_a_telephone_clip():
    # es_fisher_2251, streamed (eval --pace fast, 2026-12-01): the start said again at the end
    assert repeated_phrase("No, no hace tanto, hace poco.",
                           "No, I don't know so much, it's little. No, I don't") == "no i dont"
    # the same clip offline (whole clip, beam 5): no repeat
    assert repeated_phrase("No, no hace tanto, hace poco.", "I don't know much about that.") \
        is None
