"""Fixing an auto-detected language (``UtteranceDecoder`` on scripted detections; the
figures behind the thresholds are in docs/design.md, "Detecting the language"): a confident
detection on enough audio fixes it at once, an unsure one waits for ``asr.language_lock_s``,
and the decode that fixes it commits what agrees with the hypothesis before it, when that
one was decoded in the same language."""

from __future__ import annotations

import numpy as np

from speechpipe.stages.asr import AsrOptions, UtteranceDecoder
from speechpipe.stages.frames import STREAM_RATE
from speechpipe.stages.model_api import DecodeResult, WhisperResult

OPTIONS = AsrOptions(step_s=0.5, early_step_s=0.5, language_lock_s=2.5,
                     language_confident=0.8, language_min_s=1.3)


def _auto() -> UtteranceDecoder:
    return UtteranceDecoder(utterance=1, start_pts=0, options=OPTIONS, language=None,
                            translate=True)


def _hear(decoder: UtteranceDecoder, seconds: float) -> None:
    rng = np.random.default_rng(0)
    samples = (rng.standard_normal(int(seconds * STREAM_RATE)) * 8000).astype(np.int16)
    decoder.add(samples, len(samples))


def _decoded(decoder: UtteranceDecoder, language: str, prob: float, source: str,
             target: str) -> dict[str, tuple[str, str]]:
    result = WhisperResult(
        language=language, language_prob=prob, encode_s=0.0, decode_s=0.0,
        decodes=(DecodeResult("transcribe", source, -0.1, 0.0),
                 DecodeResult("translate", target, -0.1, 0.0)))
    changed = decoder.apply(result, "partial", decoder.end)
    return {side: (committed, tentative) for side, committed, tentative in changed}


def test_a_confident_detection_fixes_the_language_and_commits_what_agrees_at_once():
    decoder = _auto()
    _hear(decoder, 1.0)
    shown = _decoded(decoder, "es", 0.95, "hola a", "hello to")
    assert not decoder.language_locked  # too little audio to trust even 0.95
    assert shown["target"] == ("", "hello to")  # shown, not committed
    _hear(decoder, 0.5)
    shown = _decoded(decoder, "es", 0.85, "hola a todos", "hello to everyone")
    assert decoder.language_locked and decoder.language == "es"
    # the hypothesis before the lock (same language) is the agreement's previous one
    assert decoder.text("source") == "hola a"
    assert decoder.text("target") == "hello to"
    assert shown["target"] == ("hello to", "everyone")


def test_an_unsure_detection_waits_for_the_lock_time_and_commits_nothing_before():
    decoder = _auto()
    for _ in range(2):  # 1.5, 2.0 s: past language_min_s, under language_lock_s
        _hear(decoder, 0.5 if decoder.n_samples else 1.5)
        _decoded(decoder, "pt", 0.6, "hola a", "hello to")
        assert not decoder.language_locked
        assert decoder.text("target") == ""
    _hear(decoder, 0.5)  # 2.5 s: fixed, whatever the detection says
    _decoded(decoder, "es", 0.4, "hola a todos", "hello to everyone")
    assert decoder.language_locked and decoder.language == "es"
    # the hypothesis before was decoded as Portuguese: it does not count as agreement
    assert decoder.text("target") == ""
    _hear(decoder, 0.5)
    _decoded(decoder, "es", 1.0, "hola a todos y", "hello to everyone and")
    assert decoder.text("target") == "hello to everyone"


def test_the_fixed_language_is_asked_for_in_later_requests():
    decoder = _auto()
    _hear(decoder, 1.5)
    assert decoder.request("partial").language is None  # detect
    _decoded(decoder, "fr", 0.9, "bonjour", "hello")
    assert decoder.request("partial").language == "fr"
