"""The translation kept to English (``stages.redecode.keep_to_english``) with a scripted
decoder: what is decoded again, and how, when Whisper's ``translate`` transcribes instead.
The language identifier is the real one (py3langid, no Whisper model)."""

from __future__ import annotations

import numpy as np

from speechpipe.stages.model_api import DecodeResult, DecodeTask, WhisperRequest
from speechpipe.stages.redecode import keep_to_english

FRENCH = "parole est à monsieur Alain Ramadier pour soutenir l'amendement"
ENGLISH = "The floor is given to Mr. Alain Ramadier to support the amendment"


def _request(prefix: str) -> WhisperRequest:
    return WhisperRequest(audio=np.zeros(16000, np.int16), language="fr",
                          tasks=(DecodeTask("transcribe", ""), DecodeTask("translate", prefix)),
                          check_target_language=True)


def _decode(text: str) -> DecodeResult:
    return DecodeResult("translate", text, -0.2, 0.0)


def test_a_prefix_that_is_not_english_is_decoded_again_with_nothing_forced():
    # the long French recording (issue 40): the half-heard "La" was committed as the
    # translation's first word; forced through it, every translate decode went on in French
    # ("La parole est à monsieur ..."), even with <|en|>, and the sentence was never said
    asked: list[WhisperRequest] = []

    def decode(request: WhisperRequest) -> DecodeResult:
        asked.append(request)
        prefix = request.tasks[0].prefix
        return _decode(FRENCH if prefix else ENGLISH)

    out = keep_to_english(_request("La"), "fr",
                          [DecodeResult("transcribe", "La " + FRENCH, -0.2, 0.0),
                           _decode(FRENCH)], decode)
    assert [r.tasks[0].prefix for r in asked] == ["La", ""]  # <|en|> forced, then unforced
    assert all(r.language == "en" for r in asked)
    assert out[1].continuation == ENGLISH and not out[1].wrong_language
    assert out[1].redecoded


def test_an_english_prefix_stays_forced_and_a_french_decode_is_marked_wrong():
    asked: list[WhisperRequest] = []

    def decode(request: WhisperRequest) -> DecodeResult:
        asked.append(request)
        return _decode(FRENCH)

    prefix = "The question of the structural deficit comes back regularly, and"
    out = keep_to_english(_request(prefix), "fr",
                          [DecodeResult("transcribe", FRENCH, -0.2, 0.0), _decode(FRENCH)],
                          decode)
    assert [r.tasks[0].prefix for r in asked] == [prefix]  # no unforced decode
    assert out[1].wrong_language


def test_an_unforced_decode_still_in_french_is_marked_wrong():
    out = keep_to_english(_request("La"), "fr",
                          [DecodeResult("transcribe", FRENCH, -0.2, 0.0), _decode(FRENCH)],
                          lambda request: _decode(FRENCH))
    assert out[1].wrong_language
