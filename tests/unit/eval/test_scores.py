import pytest

from speechpipe.evaluation.scores import (
    average_lagging,
    latency_scores,
    normalize_text,
    normalized_erasure,
    wer,
)
from speechpipe.stages.loop_guard import cut_repetition, cut_restart, cut_restatement


def test_loop_guard_cuts_repeats_and_keeps_real_text():
    assert cut_repetition("the rest of the rest of the universe".split()) == (
        ["the", "rest", "of"], True)
    assert cut_repetition("así así así".split()) == (["así"], True)
    assert cut_repetition("very very good".split()) == (["very", "very", "good"], False)
    # a loop that began in the committed text is cut in the continuation only
    kept, cut = cut_repetition(
        "a country with two governments".split(),
        context="I met a country with two governments. I met".split())
    assert (kept, cut) == ([], True)



def test_loop_guard_cuts_a_word_that_loops_inside_itself():
    # fr_mamba_sample4 on an AVX2 machine: "PHP Code Sniffer" translated as a digit loop
    assert cut_repetition("2-3-3-4-4-4-4-4-4 which can be used".split()) == ([], True)
    assert cut_repetition("It is 1-2-1-2-1-2 here".split()) == (["It", "is"], True)
    # hyphenated words, short repeats, addresses and abbreviations are words
    for text in ("a well-known bye-bye", "ha-ha-ha said he", "www.example.com U.S.A. 4-4-4"):
        assert cut_repetition(text.split()) == (text.split(), False)
    # a loop inside the committed context is not the continuation's to cut
    assert cut_repetition("which can be used".split(), context=["4-4-4-4-4"]) == (
        "which can be used".split(), False)

def test_restatement_guard_cuts_a_sentence_said_again_in_other_words():
    # es_cvssapp_example1, pause decode after the forced prefix "It was buried in the cemetery"
    kept, cut = cut_restatement(
        "Forest Lawn. It was buried in the Forest Lawn cemetery.".split(),
        context="It was buried in the cemetery".split())
    assert (" ".join(kept), cut) == ("Forest Lawn.", True)
    # the next pause: the restatement now starts the continuation, and is cut whole
    kept, cut = cut_restatement(
        "It was buried in the Forest Lawn Memorial Park. The Hollywood Hills.".split(),
        context="It was buried in the cemetery Forest Lawn.".split())
    assert (kept, cut) == ([], True)
    # a new sentence with the same opening but new content is kept
    text = "I went to the market. I went to see my brother in Madrid.".split()
    assert cut_restatement(text) == (text, False)
    # the same words inside a sentence (not a sentence start) are kept
    text = "He said it was buried in the cemetery where it was buried before.".split()
    assert cut_restatement(text) == (text, False)
    # a restatement inside the committed context is not ours to cut
    words = "And then we left.".split()
    assert cut_restatement(words, context="We sat down. We sat down again.".split()) == (
        words, False)


def test_a_sentence_of_an_earlier_window_opening_alike_is_a_new_sentence_not_a_restatement():
    # the long French recording (issue 40): two read sentences open alike; the second was
    # decoded in a new window with the first as context and cut whole, its speech lost
    context = "La parole est à madame Annie Louerro.".split()
    words = "La parole est à madame la ministre des Régions.".split()
    assert cut_restatement(words, context=context, prior=len(context)) == (words, False)
    # the same words forced in this window (audio the decode hears again) are restated
    assert cut_restatement(words, context=context) == ([], True)
    # Whisper copying its prompt (a near copy of the earlier window's sentence) is cut
    copy = "La parole est à madame Annie Louerro.".split()
    assert cut_restatement(copy, context=context, prior=len(context)) == ([], True)


def test_restart_guard_cuts_a_partial_that_starts_its_sentence_over():
    # bench load, the French playlist's last utterance: a partial's captions restarted the
    # sentence; agreement committed "j'ai donc" and the rest of the sentence was lost
    kept, cut = cut_restart(
        "l'année passée j'ai donc".split(), context="J'ai donc l'expérience de".split())
    assert (" ".join(kept), cut) == ("l'année passée", True)
    # the restart may be longer than two words, and run to the end
    kept, cut = cut_restart("I have the experience of last year I have the".split())
    assert (" ".join(kept), cut) == ("I have the experience of last year", True)
    # a repetition that goes on differently from the sentence's start is real speech: kept
    text = "I think we should go, I think it is late".split()
    assert cut_restart(text) == (text, False)
    # one word is not a restart; a new sentence with the same opening is cut_restatement's
    for text in ("the cat saw the", "We sat down. We sat"):
        assert cut_restart(text.split()) == (text.split(), False)
    # the words in the committed context are never cut, even when they end in a restart
    words = "where it was".split()
    assert cut_restart(words, context="Thank you, thank you".split()) == (words, False)


def test_normalize_text_strips_case_and_punctuation():
    assert normalize_text("¿Hola, Mundo?") == "hola mundo"
    assert normalize_text("THIS WAY") == "this way"


def test_average_lagging_matches_the_simuleval_formula():
    # source 4 s, 4 target words committed at 1, 2, 3, 4 s: ideal lag (i-1)*1 -> AL = 1
    assert average_lagging([1.0, 2.0, 3.0, 4.0], 4.0) == pytest.approx(1.0)
    # tau stops at the first word emitted after the whole source was read
    assert average_lagging([4.0, 4.0, 4.0, 4.0], 4.0) == pytest.approx(4.0)
    # LAAL uses the longer of hypothesis and reference
    assert average_lagging([1.0, 2.0], 4.0) == pytest.approx(0.5)
    assert average_lagging([1.0, 2.0], 4.0, reference_length=4) == pytest.approx(1.0)
    assert average_lagging([], 4.0) is None


def _hyp(event, t, utt, rev, committed, tentative=""):
    return {"event": event, "stream_t": t, "utterance": utt, "revision": rev,
            "committed": committed, "tentative": tentative}


def test_latency_scores_from_a_scripted_trace():
    records = [
        {"event": "vad.start", "stream_t": 0.7, "utterance": 0, "audio_t": 0.5},
        _hyp("mt.partial", 1.5, 0, 1, "", "hello there"),
        _hyp("mt.commit", 2.0, 0, 2, "hello", "there"),
        {"event": "tts.audio", "stream_t": 2.1, "utterance": 0, "audio_start": 2.1,
         "audio_dur": 0.5},
        {"event": "vad.end", "stream_t": 3.5, "utterance": 0, "audio_t": 3.0},
        _hyp("mt.commit", 3.6, 0, 3, "hello world"),
        {"event": "tts.audio", "stream_t": 3.7, "utterance": 0, "audio_start": 3.7,
         "audio_dur": 0.6},
    ]
    scores = latency_scores(records, 4.0)
    assert scores["start_offset"] == pytest.approx(2.1 - 0.5)
    assert scores["end_offset"] == pytest.approx(3.7 + 0.6 - 3.0)
    assert scores["text_start_offset"] == pytest.approx(1.5)
    assert scores["text_end_offset"] == pytest.approx(0.6)
    # "there" was shown then replaced by "world": one erased word over two final words
    assert normalized_erasure(records) == pytest.approx(0.5)


def test_wer_normalizes_both_sides():
    assert wer("así el principito", "Así, el principito.") == 0.0
    assert wer("a b c d", "a b x d") == pytest.approx(0.25)


def test_one_percentile_definition_for_every_figure():
    """eval, bench load and bench mt report percentiles with one definition (numpy's linear)."""
    import math

    import numpy as np

    from speechpipe.bench import load
    from speechpipe.evaluation.scores import percentile, percentiles

    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 100):
        values = list(rng.exponential(size=n))
        for q in (0, 50, 95, 99, 100):
            assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
        summary = percentiles(values)
        assert summary is not None
        assert summary["p95"] == pytest.approx(float(np.percentile(values, 95)))
    assert load.percentile is percentile
    assert math.isnan(percentile([], 95)) and percentiles([]) is None
