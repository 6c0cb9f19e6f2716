"""Bounded decode windows on scripted hypotheses (``UtteranceDecoder``; the real models run in
tests/slow/models/test_windows_real.py): committed audio leaves the window, the window never
exceeds its bound, and no text is lost or repeated across a window boundary."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from speechpipe.stages.asr import AsrOptions, UtteranceDecoder
from speechpipe.stages.commit import CommitPolicy
from speechpipe.stages.frames import STREAM_RATE
from speechpipe.stages.model_api import DecodeKind, DecodeResult, WhisperResult
from speechpipe.stages.window import quiet_tail

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
    assert decoder.due() == DecodeKind.PAUSE
    basis = decoder.basis(DecodeKind.PAUSE)
    decoder.apply(_result("hola a todos", "hello everyone"), DecodeKind.PAUSE, basis)
    assert decoder.window_start == 0  # not yet: later decodes still hear the start
    _add(decoder, 2.0)
    decoder.apply(_result("y bienvenidos", "and welcome"), DecodeKind.PARTIAL, decoder.end)
    decoder.apply(_result("y bienvenidos al", "and welcome to"), DecodeKind.PARTIAL, decoder.end)
    assert decoder.text("source") == "hola a todos y bienvenidos"
    _add(decoder, 1.0)  # 6.5 s: past max_window_s, the window moves to the pause
    assert decoder.window_start == basis == int(3.5 * STREAM_RATE)
    request = decoder.request(DecodeKind.PARTIAL)
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
    decoder.apply(_result("hola", "hello"), DecodeKind.PAUSE, decoder.basis(DecodeKind.PAUSE))
    _add(decoder, 1.0)
    assert decoder.window_start == 0  # under max_window_s: later decodes still hear it
    request = decoder.request(DecodeKind.PARTIAL)
    assert len(request.audio) == int(2.5 * STREAM_RATE)
    assert {t.task: t.prefix for t in request.tasks} == {"transcribe": "hola",
                                                          "translate": "hello"}


def _glued(source: str, target: str, glued: str) -> WhisperResult:
    return WhisperResult(
        language="es", language_prob=1.0, encode_s=0.0, decode_s=0.0,
        decodes=(DecodeResult("transcribe", source, -0.1, 0.0, glued=glued),
                 DecodeResult("translate", target, -0.1, 0.0, glued=glued)))


def test_a_decode_that_ends_at_the_pause_while_speech_goes_on_moves_the_window_there():
    # the long French recording (issue 40): forced through the sentence the pause committed,
    # every later decode said "." and stopped while the next sentence was spoken; 5 s of
    # speech were lost. The window moves on to the pause; the full stop goes with the
    # committed words into the context, and the new speech is decoded on its own.
    decoder = _decoder()
    _add(decoder, 1.5)
    decoder.pause_pending, decoder.pause_pts = True, int(1.4 * STREAM_RATE)
    basis = decoder.basis(DecodeKind.PAUSE)
    decoder.apply(_result("la pregunta vuelve", "the question returns"), DecodeKind.PAUSE, basis)
    _add(decoder, 1.0)
    decoder.apply(_glued("", "", "."), DecodeKind.PARTIAL, decoder.end)
    assert decoder.window_start == basis  # well under max_window_s, yet moved
    assert (decoder.source_context, decoder.target_context) == (
        "la pregunta vuelve.", "the question returns.")
    request = decoder.request(DecodeKind.FINAL)
    assert {t.task: t.prefix for t in request.tasks} == {"transcribe": "", "translate": ""}
    assert len(request.audio) == decoder.end - basis  # only the speech after the pause
    decoder.apply(_result("el presupuesto", "the budget"), DecodeKind.PARTIAL, decoder.end)
    decoder.apply(_result("el presupuesto", "the budget"), DecodeKind.PARTIAL, decoder.end)
    # after "el"
    decoder.apply(_result("presupuesto de", "budget of"), DecodeKind.FINAL, decoder.end)
    assert decoder.text("source") == "la pregunta vuelve. el presupuesto de"
    assert decoder.text("target") == "the question returns. the budget of"


def test_a_decode_that_says_nothing_after_a_pause_with_no_speech_after_it_moves_nothing():
    decoder = _decoder()
    _add(decoder, 1.5)
    decoder.pause_pending, decoder.pause_pts = True, int(1.4 * STREAM_RATE)
    decoder.apply(_result("hola", "hello"), DecodeKind.PAUSE, decoder.basis(DecodeKind.PAUSE))
    _add(decoder, 1.0, voiced=False)  # silence after the pause: nothing to lose
    decoder.apply(_glued("", "", "."), DecodeKind.PARTIAL, decoder.end)
    assert decoder.window_start == 0
    # and a decode that goes on after the pause is the window's own: kept
    decoder2 = _decoder()
    _add(decoder2, 1.5)
    decoder2.pause_pending, decoder2.pause_pts = True, int(1.4 * STREAM_RATE)
    decoder2.apply(_result("hola", "hello"), DecodeKind.PAUSE, decoder2.basis(DecodeKind.PAUSE))
    _add(decoder2, 1.0)
    decoder2.apply(_result("y adiós", "and goodbye"), DecodeKind.PARTIAL, decoder2.end)
    assert decoder2.window_start == 0


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
    assert decoder.due() != DecodeKind.CUT  # loud to the end: wait for a gap
    _add(decoder, 0.15, voiced=False)  # a 150 ms gap between words
    assert decoder.due() == DecodeKind.CUT
    assert decoder.basis(DecodeKind.CUT) == decoder.end  # the cut decode hears everything there is


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
        if kind == DecodeKind.PARTIAL and noise and continuation:  # a wrong last word
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
    decoder.apply(_result(rest, rest.replace("w", "v")), DecodeKind.FINAL,
                  decoder.basis(DecodeKind.FINAL))
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
    from dataclasses import replace

    shown = {}
    for limit in (0, 2):
        decoder = _decoder(replace(OPTIONS, shown_tentative_words=limit, language_lock_s=0.0))
        _add(decoder, 2.0)
        decoder.apply(_result("uno dos tres cuatro", "one two three four"), DecodeKind.PARTIAL,
                      decoder.end)
        _add(decoder, 1.0)
        changed = decoder.apply(_result("uno dos tres cinco seis", "one two three five six"),
                                DecodeKind.PARTIAL, decoder.end)
        shown[limit] = {side: (committed, tentative) for side, committed, tentative in changed}
    assert shown[0]["target"] == ("one two three", "five six")
    assert shown[2]["target"] == ("one two three", "five six")
    assert shown[0]["source"][0] == shown[2]["source"][0] == "uno dos tres"
    decoder = _decoder(replace(OPTIONS, shown_tentative_words=1, language_lock_s=0.0))
    _add(decoder, 2.0)
    (_, committed, tentative), *_ = decoder.apply(
        _result("uno dos tres", "one two three"), DecodeKind.PARTIAL, decoder.end)
    assert (committed, tentative) == ("", "uno")
