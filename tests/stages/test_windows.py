"""Bounded decode windows on scripted hypotheses (``UtteranceDecoder``; the real models run in
tests/models/test_windows_real.py): committed audio leaves the window, the window never
exceeds its bound, and no text is lost or repeated across a window boundary, whether the
window moves at a pause, a cut or a clause end committed on both sides (scripted word
times stand in for Whisper's alignment)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from speechpipe.stages.asr import AsrOptions, UtteranceDecoder
from speechpipe.stages.commit import CommitPolicy
from speechpipe.stages.frames import STREAM_RATE
from speechpipe.stages.model_api import DecodeResult, WhisperResult
from speechpipe.stages.window import quiet_tail, sentence_boundary, sentence_ends

OPTIONS = AsrOptions(max_window_s=6.0, cut_grace_s=2.0, step_s=1.0, early_step_s=1.0)


def _decoder(options: AsrOptions = OPTIONS) -> UtteranceDecoder:
    return UtteranceDecoder(utterance=1, start_pts=0, options=options, language="es",
                            translate=True)


def _speech(seconds: float, seed: int = 0) -> np.ndarray:
    """Loud noise: no quiet moment anywhere (a cut needs the grace limit)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(int(seconds * STREAM_RATE)) * 8000).astype(np.int16)


def _result(source: str, target: str) -> WhisperResult:
    return WhisperResult(
        language="es", language_prob=1.0, encode_s=0.0, decode_s=0.0,
        decodes=(DecodeResult("transcribe", source, -0.1, 0.0),
                 DecodeResult("translate", target, -0.1, 0.0)))


def _add(decoder: UtteranceDecoder, seconds: float, voiced: bool = True) -> None:
    samples = _speech(seconds) if voiced else np.zeros(int(seconds * STREAM_RATE), np.int16)
    decoder.add(samples, len(samples) if voiced else 0)


def test_a_long_window_moves_to_its_last_pause_and_that_text_becomes_context():
    decoder = _decoder()
    _add(decoder, 3.5)
    decoder.pause_pending, decoder.pause_pts = True, int(3.3 * STREAM_RATE)
    assert decoder.due() == "pause"
    basis = decoder.basis("pause")
    decoder.apply(_result("hola a todos", "hello everyone"), "pause", basis)
    assert decoder.window_start == 0  # not yet: later decodes still hear the start
    _add(decoder, 2.0)
    decoder.apply(_result("y bienvenidos", "and welcome"), "partial", decoder.end)
    decoder.apply(_result("y bienvenidos al", "and welcome to"), "partial", decoder.end)
    assert decoder.text("source") == "hola a todos y bienvenidos"
    _add(decoder, 1.0)  # 6.5 s: past max_window_s, the window moves to the pause
    assert decoder.window_start == basis == int(3.5 * STREAM_RATE)
    request = decoder.request("partial")
    assert len(request.audio) == int(3.0 * STREAM_RATE)  # only the audio after the pause
    by_task = {t.task: t for t in request.tasks}
    # what the pause committed is context; what was committed after it stays forced
    assert by_task["transcribe"].context == "hola a todos"
    assert by_task["transcribe"].prefix == "y bienvenidos"
    assert by_task["translate"].context == "hello everyone"
    assert by_task["translate"].prefix == "and welcome"
    assert decoder.text("source") == "hola a todos y bienvenidos"  # nothing lost or doubled
    assert request.cap_by_window


def test_a_short_window_keeps_its_audio_at_a_pause():
    decoder = _decoder()
    _add(decoder, 1.5)
    decoder.pause_pending, decoder.pause_pts = True, int(1.4 * STREAM_RATE)
    decoder.apply(_result("hola", "hello"), "pause", decoder.basis("pause"))
    _add(decoder, 1.0)
    assert decoder.window_start == 0  # under max_window_s: later decodes still hear it
    request = decoder.request("partial")
    assert len(request.audio) == int(2.5 * STREAM_RATE)
    assert {t.task: t.prefix for t in request.tasks} == {"transcribe": "hola",
                                                          "translate": "hello"}


def test_a_window_without_pause_is_cut_by_the_grace_limit_and_never_grows_past_it():
    decoder = _decoder()
    longest = 0.0
    for step in range(40):  # 20 s of speech without a pause, 0.5 s at a time
        _add(decoder, 0.5)
        kind = decoder.due()
        if kind is None:
            continue
        request = decoder.request(kind)
        longest = max(longest, len(request.audio) / STREAM_RATE)
        decoder.apply(_result(f"s{step}", f"t{step}"), kind, decoder.basis(kind))
    assert decoder.windows >= 3
    assert longest <= OPTIONS.max_window_s + OPTIONS.cut_grace_s


def test_a_cut_waits_for_a_quiet_moment_after_max_window():
    decoder = _decoder()
    _add(decoder, 6.2)
    assert decoder.due() != "cut"  # loud to the end: wait for a gap
    _add(decoder, 0.15, voiced=False)  # a 150 ms gap between words
    assert decoder.due() == "cut"
    assert decoder.basis("cut") == decoder.end  # the cut decode hears everything there is


def test_quiet_tail_sees_a_gap_and_not_a_vowel():
    loud = _speech(3.0)
    assert not quiet_tail(loud)
    assert quiet_tail(np.concatenate([loud, np.zeros(1600, np.int16)]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.booleans(), st.integers(0, 2)),
                min_size=3, max_size=25))
def test_no_word_is_lost_or_repeated_across_windows(script):
    """Scripted hypotheses that always continue the committed text correctly: the emitted
    committed text is exactly the words spoken so far, in order, once each."""
    _run_script(script)


def test_the_scripted_run_crosses_pause_and_cut_boundaries():
    decoder = _run_script([(7, True, 0), (4, False, 1), (9, False, 1), (8, True, 0),
                           (2, False, 0)])
    assert decoder.windows >= 3


def _run_script(script: list[tuple[int, bool, int]]) -> UtteranceDecoder:
    decoder = _decoder()
    spoken: list[str] = []  # the "true" words of the audio so far
    emitted = ""
    for number, (chunks, pause, noise) in enumerate(script):
        for _ in range(chunks):
            _add(decoder, 0.5)
            spoken.append(f"w{len(spoken)}")
        if pause:
            decoder.pause_pending, decoder.pause_pts = True, decoder.end
            _add(decoder, 0.3, voiced=False)
        kind = decoder.due()
        if kind is None:
            continue
        committed = len(decoder.text("source").split())
        continuation = spoken[committed:]
        if kind == "partial" and noise and continuation:  # a wrong last word
            continuation = [*continuation[:-1], f"x{number}"]
        words = " ".join(continuation)
        changed = decoder.apply(_result(words, words.replace("w", "v")), kind,
                                decoder.basis(kind))
        for side, text, _ in changed:
            if side == "source":
                assert text.startswith(emitted)  # append-only across windows
                emitted = text
    decoder.ended = True
    committed = len(decoder.text("source").split())
    rest = " ".join(spoken[committed:])
    decoder.apply(_result(rest, rest.replace("w", "v")), "final", decoder.basis("final"))
    assert decoder.text("source").split() == spoken
    assert decoder.text("target").split() == [w.replace("w", "v") for w in spoken]
    return decoder


def test_commit_policy_align_commits_words_far_from_the_audio_end():
    policy = CommitPolicy("align", align_margin_s=1.0)
    assert policy.needs_word_times
    # one decode: "a" ends at 0.5 s, "b" at 2.2 s of 3 s heard: only "a" is safe
    assert policy.update(["a", "b"], [0.5, 2.2], heard_s=3.0) == ["a"]
    assert policy.tentative == ["b"]
    agreement = CommitPolicy("agreement")
    assert not agreement.needs_word_times
    assert agreement.update(["a", "b"], [0.5, 2.2], heard_s=3.0) == []


def test_a_hypothesis_shows_only_the_first_tentative_words_when_asked():
    """``asr.shown_tentative_words``: the emitted tentative tail is cut; what is committed
    (and the agreement that commits it) does not change."""
    shown = {}
    for limit in (0, 2):
        decoder = _decoder(replace(OPTIONS, shown_tentative_words=limit, language_lock_s=0.0))
        _add(decoder, 2.0)
        decoder.apply(_result("uno dos tres cuatro", "one two three four"), "partial",
                      decoder.end)
        _add(decoder, 1.0)
        changed = decoder.apply(_result("uno dos tres cinco seis", "one two three five six"),
                                "partial", decoder.end)
        shown[limit] = {side: (committed, tentative) for side, committed, tentative in changed}
    assert shown[0]["target"] == ("one two three", "five six")
    assert shown[2]["target"] == ("one two three", "five six")
    assert shown[0]["source"][0] == shown[2]["source"][0] == "uno dos tres"
    decoder = _decoder(replace(OPTIONS, shown_tentative_words=1, language_lock_s=0.0))
    _add(decoder, 2.0)
    (_, committed, tentative), *_ = decoder.apply(
        _result("uno dos tres", "one two three"), "partial", decoder.end)
    assert (committed, tentative) == ("", "uno")


# -- windows that move on at a clause end (``asr.sentence_window_s``) ------------------------

def test_clause_and_sentence_ends_are_found_and_a_trailing_voice_is_not():
    words = ["Hola,", "qué", "tal.", "Bien...", "y", "tú?", "Nada…"]
    assert sentence_ends(words) == [2, 5]
    assert sentence_ends(words, clauses=True) == [0, 2, 5]


def test_a_boundary_is_the_latest_clause_end_both_sides_place_alike():
    source = ["Das", "sind", "Zustände,", "weil", "die", "Handwerker", "warten,", "weil"]
    source_ends = [0.4, 0.6, 2.8, 3.0, 3.8, 4.6, 6.5, 6.7]
    target = ["These", "are", "things,", "because", "the", "workers", "wait.", "But"]
    target_ends = [0.5, 0.7, 2.2, 2.9, 3.8, 4.6, 6.9, 7.0]
    boundary = sentence_boundary(source, source_ends, target, target_ends,
                                 tolerance_s=0.8, min_s=1.0)
    assert boundary == (7, 7, 6.5)  # "warten," and "wait." (0.4 s apart), at "weil"'s start
    # the same texts with the translation's last clause placed 2 s later: the earlier pair
    late = [*target_ends[:6], 8.9, 9.0]
    assert sentence_boundary(source, source_ends, target, late,
                             tolerance_s=0.8, min_s=1.0) == (3, 3, 2.8)


def test_no_boundary_where_the_translation_reorders_across_it_or_it_is_too_early():
    source = ["Ich", "habe,", "das", "Buch", "gelesen."]
    source_ends = [0.3, 1.5, 1.9, 2.4, 3.0]
    # "read" (ends 3.0) sits before the clause end in the translation: not a split in time
    target = ["I", "have", "read,", "the", "book."]
    target_ends = [0.3, 0.5, 3.0, 3.1, 3.2]
    assert sentence_boundary(source, source_ends, target, target_ends,
                             tolerance_s=0.8, min_s=4.0) is None
    assert sentence_boundary(source[:2], source_ends[:2], target[:3], target_ends[:3],
                             tolerance_s=0.8, min_s=1.0) is None
    assert sentence_boundary(source, source_ends[:3], target, target_ends,
                             tolerance_s=0.8, min_s=0.0) is None  # times do not fit the words


SENTENCE_OPTIONS = AsrOptions(max_window_s=10.0, cut_grace_s=2.0, step_s=1.0, early_step_s=1.0,
                              sentence_window_s=4.0, sentence_tolerance_s=0.8,
                              language_lock_s=0.0)


def _timed_result(decoder: UtteranceDecoder, spoken: list[str], ends: list[float],
                  basis: int, timed: tuple[str, ...], noise: str = "") -> WhisperResult:
    """A decode that hears every word ending by ``basis`` and, for the tasks in ``timed``
    (those its request asked times for, as the engine does), knows where each word of its
    forced prefix and continuation ends (seconds from the window's start)."""
    start_s = decoder.window_start / STREAM_RATE
    heard = sum(1 for end in ends if end <= basis / STREAM_RATE)
    decodes = []
    for task, side, policy, context in (
            ("transcribe", "source", decoder.source, decoder.source_context),
            ("translate", "target", decoder.target, decoder.target_context)):
        first = len(context.split())
        done = first + len(policy.committed)
        words = [w if side == "source" else w.replace("w", "v") for w in spoken[done:heard]]
        if noise and words:
            words[-1] = noise
        if task not in timed:
            decodes.append(DecodeResult(task, " ".join(words), -0.1, 0.0))
            continue
        decodes.append(DecodeResult(
            task, " ".join(words), -0.1, 0.0,
            word_ends=tuple(ends[i] - start_s for i in range(done, heard)),
            prefix_word_ends=tuple(ends[i] - start_s for i in range(first, done))))
    return WhisperResult(language="es", language_prob=1.0, encode_s=0.0, decode_s=0.0,
                         decodes=tuple(decodes))


def test_a_long_window_moves_on_at_a_clause_end_committed_on_both_sides():
    decoder = _decoder(SENTENCE_OPTIONS)
    spoken = [f"w{i}," if i == 5 else f"w{i}" for i in range(20)]
    ends = [0.5 * (i + 1) for i in range(20)]  # w5, ends at 3.0 s
    asked = []
    for _ in range(5):  # five partials a second apart: w0-w5 get committed
        _add(decoder, 1.0)
        asked.append(decoder.request("partial").word_times)
        decoder.apply(_timed_result(decoder, spoken, ends, decoder.end, asked[-1]), "partial",
                      decoder.end)
    assert decoder.window_start == int(3.0 * STREAM_RATE)  # at w5,'s end (w6's start)
    assert ("transcribe", "translate") in asked  # the move asked for word times
    assert decoder.source_context == "w0 w1 w2 w3 w4 w5,"
    assert decoder.target_context == "v0 v1 v2 v3 v4 v5,"
    assert decoder.sentence_moves == 1
    request = decoder.request("partial")
    assert len(request.audio) == int(2.0 * STREAM_RATE)  # only the audio after it
    by_task = {t.task: t for t in decoder.tasks("final")}
    assert by_task["transcribe"].context == "w0 w1 w2 w3 w4 w5,"
    assert by_task["transcribe"].prefix == " ".join(decoder.source.committed)
    assert by_task["translate"].context == "v0 v1 v2 v3 v4 v5,"
    assert decoder.text("source").split() == spoken[:len(decoder.text("source").split())]


def test_a_short_window_or_no_clause_end_asks_for_no_word_times():
    decoder = _decoder(SENTENCE_OPTIONS)
    _add(decoder, 2.0)
    assert decoder.request("partial").word_times == ()  # under sentence_window_s - step_s
    _add(decoder, 3.0)
    decoder.apply(_result("uno dos tres", "one two three"), "partial", decoder.end)
    decoder.apply(_result("uno dos tres", "one two three"), "partial", decoder.end)
    assert decoder.request("partial").word_times == ()  # nothing committed ends a clause
    off = _decoder(replace(SENTENCE_OPTIONS, sentence_window_s=0.0))
    _add(off, 5.0)
    off.apply(_result("uno, dos", "one, two"), "partial", off.end)
    off.apply(_result("uno, dos", "one, two"), "partial", off.end)
    assert off.request("partial").word_times == ()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.booleans(), st.booleans()), min_size=3,
                max_size=30),
       st.sets(st.integers(0, 60), max_size=15))
def test_no_word_is_lost_or_repeated_across_clause_windows(script, clause_ends):
    """Speech with clause ends at random words, pauses and a wrong last word now and then:
    the committed text is the words spoken, once each and in order, whatever windows the
    clause ends, pauses and cuts make; no window grows past its bound."""
    decoder = _decoder(SENTENCE_OPTIONS)
    spoken: list[str] = []
    ends: list[float] = []
    emitted = {"source": "", "target": ""}
    longest = 0.0
    for chunks, pause, noise in script:
        for _ in range(chunks):
            _add(decoder, 0.5)
            index = len(spoken)
            spoken.append(f"w{index}," if index in clause_ends else f"w{index}")
            ends.append(decoder.end / STREAM_RATE)
        if pause:
            decoder.pause_pending, decoder.pause_pts = True, decoder.end
            _add(decoder, 0.3, voiced=False)
        kind = decoder.due()
        if kind is None:
            continue
        request = decoder.request(kind)
        longest = max(longest, len(request.audio) / STREAM_RATE)
        basis = decoder.basis(kind)
        result = _timed_result(decoder, spoken, ends, basis, request.word_times,
                               noise="x" if noise and kind == "partial" else "")
        for side, text, _ in decoder.apply(result, kind, basis):
            assert text.startswith(emitted[side])  # append-only across windows
            emitted[side] = text
    decoder.ended = True
    final = decoder.request("final")
    decoder.apply(_timed_result(decoder, spoken, ends, decoder.end, final.word_times), "final",
                  decoder.end)
    assert decoder.text("source").split() == spoken
    assert decoder.text("target").split() == [w.replace("w", "v") for w in spoken]
    assert longest <= SENTENCE_OPTIONS.max_window_s + SENTENCE_OPTIONS.cut_grace_s + 0.5


def test_the_clause_script_moves_windows_at_clause_ends():
    decoder = _decoder(SENTENCE_OPTIONS)
    spoken: list[str] = []
    ends: list[float] = []
    for _ in range(24):  # 12 s of speech without a pause, a clause end every 6 words
        _add(decoder, 0.5)
        index = len(spoken)
        spoken.append(f"w{index}," if index % 6 == 5 else f"w{index}")
        ends.append(decoder.end / STREAM_RATE)
        kind = decoder.due()
        if kind is not None:
            timed = decoder.request(kind).word_times
            decoder.apply(_timed_result(decoder, spoken, ends, decoder.basis(kind), timed),
                          kind, decoder.basis(kind))
    assert decoder.sentence_moves >= 2
    assert decoder.end - decoder.window_start < 6 * STREAM_RATE
