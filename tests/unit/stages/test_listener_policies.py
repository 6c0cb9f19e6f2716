"""Issue 12's policies on scripted hypotheses and timings: just-in-time phrase cutting, the
alignment commit, and the EndOffset split (the real models run in test_listener_e2e.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from speechpipe.evaluation.scores import end_offset_split, latency_scores
from speechpipe.stages.agreement import LocalAgreement
from speechpipe.stages.asr import AsrOptions, UtteranceDecoder, align_commit_count
from speechpipe.stages.frames import STREAM_RATE
from speechpipe.stages.model_api import DecodeKind, DecodeResult, WhisperResult
from speechpipe.stages.phrases import JustInTimeSegmenter, PhraseOptions, make_segmenter

# issue 12's just-in-time cutter, before issue 20's phrases a listener can parse (those are
# tested in tests/unit/stages/test_phrase_units.py): any held words, even one, go out when the
# queued speech runs low
BEFORE_ISSUE_20 = {"min_words": 1, "clause_cut": False, "keep_units": False}
JIT = PhraseOptions(cut="just_in_time", lead_s=1.0, max_wait_words=12, **BEFORE_ISSUE_20)
HOLD = "a an the of to in on at by for from with and or but as that"


# -- just-in-time phrases --------------------------------------------------------------------
def test_a_phrase_is_cut_when_the_output_would_fall_silent():
    seg = JustInTimeSegmenter(JIT)
    # nothing queued: the output is silent, the first committed word goes out at once
    assert seg.feed("little", now_s=1.0, queued_until_s=0.0) == ["little"]
    # 0.4 s of speech left (< lead 1.0 s): the waiting words are cut into one phrase
    assert seg.feed("little prince decided", now_s=1.6, queued_until_s=2.0) == [
        "prince decided"]


def test_words_wait_while_speech_plays_and_go_out_together():
    seg = JustInTimeSegmenter(JIT)
    assert seg.feed("one", now_s=0.0, queued_until_s=0.0) == ["one"]
    # 3 s of speech still queued: words wait
    assert seg.feed("one two", now_s=0.5, queued_until_s=3.5) == []
    assert seg.feed("one two three four", now_s=1.5, queued_until_s=3.5) == []
    # the queue is about to run out: everything waiting becomes one phrase
    assert seg.feed("one two three four five", now_s=2.7, queued_until_s=3.5) == [
        "two three four five"]


def test_the_end_of_the_utterance_speaks_the_rest_even_while_speech_plays():
    seg = JustInTimeSegmenter(JIT)
    assert seg.feed("a b", now_s=0.0, queued_until_s=0.0) == ["a b"]
    assert seg.feed("a b c d", now_s=0.2, queued_until_s=5.0) == []
    assert seg.feed("a b c d e", final=True, now_s=0.3, queued_until_s=5.0) == ["c d e"]


def test_no_phrase_grows_past_max_wait_words():
    seg = JustInTimeSegmenter(PhraseOptions(cut="just_in_time", max_wait_words=3))
    words = "w1 w2 w3 w4 w5 w6 w7"
    assert seg.feed(words, now_s=0.0, queued_until_s=9.0) == ["w1 w2 w3", "w4 w5 w6"]
    assert seg.feed(words, final=True, now_s=0.1, queued_until_s=9.0) == ["w7"]


def test_a_phrase_does_not_end_on_a_function_word_before_the_end():
    seg = JustInTimeSegmenter(PhraseOptions(no_end_words=HOLD, **BEFORE_ISSUE_20))
    assert seg.feed("history of the", now_s=1.0, queued_until_s=0.0) == ["history"]
    assert seg.feed("history of the", now_s=1.5, queued_until_s=1.2) == []  # "of the" wait
    assert seg.feed("history of the country", now_s=2.0, queued_until_s=1.2) == [
        "of the country"]
    assert seg.feed("history of the country and", final=True, now_s=2.1) == ["and"]
    no_hold = JustInTimeSegmenter(PhraseOptions(no_end_words="", **BEFORE_ISSUE_20))
    assert no_hold.feed("history of the", now_s=1.0) == ["history of the"]


@given(st.lists(st.tuples(st.integers(0, 3), st.floats(0, 3), st.floats(-1, 4)),
                min_size=1, max_size=25))
def test_never_speaks_an_uncommitted_word_and_speaks_each_committed_word_once(script):
    """Committed text grows by 0..3 words a step, at scripted times and queue levels."""
    vocabulary = [("the" if i % 3 == 0 else f"w{i}") for i in range(200)]
    seg = make_segmenter(PhraseOptions(no_end_words=HOLD))
    committed: list[str] = []
    spoken: list[str] = []
    now = 0.0
    for grow, dt, queued_ahead in script:
        committed += vocabulary[len(committed): len(committed) + grow]
        now += dt
        for phrase in seg.feed(" ".join(committed), now_s=now, queued_until_s=now + queued_ahead):
            spoken += phrase.split()
        assert spoken == committed[: len(spoken)]  # only committed words, in order, once
    for phrase in seg.feed(" ".join(committed), final=True, now_s=now, queued_until_s=now + 9):
        spoken += phrase.split()
    assert spoken == committed


def test_just_in_time_is_the_default_and_the_count_policy_stays_selectable():
    assert PhraseOptions().cut == "just_in_time"
    seg = make_segmenter(PhraseOptions(cut="count"))
    assert seg.feed("one two three", now_s=5.0, queued_until_s=0.0) == ["one two"]


# -- the alignment commit ----------------------------------------------------------------------
def test_align_commit_count_stops_at_the_first_word_near_the_end():
    ends = [0.4, 0.9, 1.7, 2.2, 1.2]  # the last word, early again, still waits for 2.2
    assert align_commit_count(ends, heard_s=3.0, margin_s=1.0) == 3
    assert align_commit_count(ends, heard_s=2.0, margin_s=1.0) == 2
    assert align_commit_count(ends, heard_s=0.5, margin_s=1.0) == 0
    assert align_commit_count([], heard_s=9.0, margin_s=1.0) == 0


def test_commit_tentative_keeps_agreement_consistent():
    agreement = LocalAgreement(2)
    agreement.update(["we", "found", "a"])
    assert agreement.commit_tentative(2) == ["we", "found"]
    assert agreement.committed == ["we", "found"] and agreement.tentative == ["a"]
    # the next continuation agrees with the remaining history on "a"
    assert agreement.update(["a", "very"]) == ["a"]
    assert agreement.committed == ["we", "found", "a"]


def _decoder(policy: str, settle_margin_s: float = 0.0) -> UtteranceDecoder:
    options = AsrOptions(commit_policy=policy, align_margin_s=1.0,
                         settle_margin_s=settle_margin_s)
    return UtteranceDecoder(utterance=0, start_pts=0, options=options, language="es",
                            translate=True)


def _result(words: str, ends: tuple[float, ...]) -> WhisperResult:
    decodes = (DecodeResult("transcribe", "hola", -0.2, 0.01),
               DecodeResult("translate", words, -0.2, 0.01, word_ends=ends))
    return WhisperResult("es", 1.0, decodes, 0.0, 0.0)


def test_align_policy_commits_after_one_decode_what_was_heard_well_before_the_end():
    heard = int(3.0 * STREAM_RATE)
    agreement_decoder, align_decoder = _decoder("agreement"), _decoder("align")
    result = _result("we found a very sensitive", (0.6, 1.2, 2.1, 2.4, 3.0))
    agreement_decoder.apply(result, DecodeKind.PARTIAL, heard)
    align_decoder.apply(result, DecodeKind.PARTIAL, heard)
    assert agreement_decoder.target.committed == []  # LocalAgreement waits for a 2nd decode
    assert align_decoder.target.committed == ["we", "found"]  # ends <= 3.0 - 1.0
    assert align_decoder.target.tentative == ["a", "very", "sensitive"]
    assert align_decoder.source.committed == []  # captions keep LocalAgreement


def test_align_policy_requests_word_times_only_for_translation_partials():
    decoder = _decoder("align")
    decoder.add(__import__("numpy").zeros(STREAM_RATE, "int16"), STREAM_RATE)
    assert decoder.request(DecodeKind.PARTIAL).word_times == ("translate",)
    assert decoder.request(DecodeKind.FINAL).word_times == ()
    assert _decoder("agreement").request(DecodeKind.PARTIAL).word_times == ()
    # settling (the default) needs the times of both sides' words
    settling = _decoder("agreement", settle_margin_s=0.4)
    settling.add(__import__("numpy").zeros(STREAM_RATE, "int16"), STREAM_RATE)
    # ... once there is an earlier hypothesis to agree with (the first needs none)
    assert settling.request(DecodeKind.PARTIAL).word_times == ()
    settling.apply(_result("we found", (0.4, 0.8)), DecodeKind.PARTIAL, STREAM_RATE)
    assert settling.request(DecodeKind.PARTIAL).word_times == ("transcribe", "translate")


@given(st.lists(st.tuples(st.lists(st.sampled_from("a b c d e".split()), max_size=6),
                          st.floats(0.5, 8.0)), min_size=1, max_size=8))
def test_align_policy_never_commits_a_word_the_decode_did_not_say(script):
    decoder = _decoder("align")
    for words, heard_s in script:
        before = list(decoder.target.committed)
        ends = tuple(sorted(heard_s * (i + 1) / (len(words) + 1) for i in range(len(words))))
        decoder.apply(_result(" ".join(words), ends), DecodeKind.PARTIAL,
                      int(heard_s * STREAM_RATE))
        new = decoder.target.committed[len(before):]
        assert decoder.target.committed[: len(before)] == before  # append-only
        assert new == words[: len(new)]  # a prefix of this decode's continuation


# -- the EndOffset split -----------------------------------------------------------------------
def _trace() -> list[dict]:
    return [
        {"event": "vad.start", "stream_t": 0.2, "audio_t": 0.0, "utterance": 0},
        {"event": "mt.commit", "stream_t": 2.0, "utterance": 0, "committed": "a b",
         "tentative": "", "revision": 1},
        {"event": "tts.audio", "stream_t": 2.0, "utterance": 0, "audio_start": 2.0,
         "audio_dur": 1.5, "timings": {"tts": 0.1}},
        {"event": "vad.end", "stream_t": 3.6, "audio_t": 3.0, "utterance": 0},
        {"event": "mt.commit", "stream_t": 3.2, "utterance": 0, "committed": "a b c d",
         "tentative": "", "revision": 2},
        {"event": "tts.audio", "stream_t": 3.8, "utterance": 0, "audio_start": 3.8,
         "audio_dur": 1.0, "timings": {"tts": 0.3}},
    ]


def test_end_offset_split_adds_up_to_the_end_offset():
    records = _trace()
    split = end_offset_split(records)
    end_offset = latency_scores(records, 4.0)["end_offset"]
    assert end_offset == 4.8 - 3.0
    assert split["queued_at_end"] == 0.5  # 2.0 + 1.5 - 3.0
    assert split["unsynthesized_at_end"] == 1.0
    assert abs(split["silence_after_end"] - 0.3) < 1e-9  # 3.5 .. 3.8
    assert split["synthesis_after_end"] == 0.3
    assert abs(split["queued_at_end"] + split["unsynthesized_at_end"]
               + split["silence_after_end"] - end_offset) < 1e-9


def test_end_offset_split_without_speech_is_empty():
    assert end_offset_split(_trace()[:2])["queued_at_end"] is None


# -- eval --compare ----------------------------------------------------------------------------
def test_compare_variants_vary_only_per_session_options():
    from speechpipe.errors import InputError
    from speechpipe.evaluation.compare import parse_variant

    assert parse_variant("asr.commit_policy=align, phrases.cut=count") == (
        "asr.commit_policy=align, phrases.cut=count",
        ["asr.commit_policy=align", "phrases.cut=count"])
    with pytest.raises(InputError, match="loaded once"):
        parse_variant("piper.length_scale=0.8")
