"""The translation is checked to be English (issue 45), on the real engine and real speech.

Forcing a French prefix on the translate task makes Whisper go on in French: the decode
program's check (``stages.decode_program``, over the real engine) must see it, decode again
with English as the language token, and mark what is still not English so that the stage
never speaks it."""

from __future__ import annotations

import numpy as np

from speechpipe.models.whisper.engine import DecodeTask, WhisperRequest
from speechpipe.stages.decode_program import DecodeProgram
from speechpipe.stages.target_language import in_language
from speechpipe.transport.file_replay import read_audio


def _request(check: bool) -> WhisperRequest:
    audio = read_audio("samples/wav/fr_plage.wav").astype(np.float32) / 32768.0
    return WhisperRequest(audio=audio, language="fr", beam_size=1,
                          tasks=(DecodeTask("translate", "Nous sommes allés à la plage et"),),
                          check_target_language=check)


def test_a_translation_in_the_source_language_is_decoded_again_and_marked(pipeline):
    engine = DecodeProgram(pipeline.engine)
    unchecked = engine.run(_request(check=False)).decodes[0]
    checked = engine.run(_request(check=True)).decodes[0]
    if in_language(unchecked.continuation, "en", ["fr"]) is False:
        assert checked.redecoded
        assert checked.wrong_language == (in_language(checked.continuation, "en", ["fr"])
                                          is False)
    else:  # this model went on in English after all: nothing to redo
        assert not checked.redecoded and not checked.wrong_language


def test_an_english_translation_is_left_alone(pipeline):
    audio = read_audio("samples/wav/fr_plage.wav").astype(np.float32) / 32768.0
    request = WhisperRequest(audio=audio, language="fr", beam_size=1,
                             tasks=(DecodeTask("translate"),), check_target_language=True)
    decode = DecodeProgram(pipeline.engine).run(request).decodes[0]
    assert not decode.redecoded and not decode.wrong_language
    assert in_language(decode.continuation, "en", ["fr"]) is not False
