"""A request in a given language that detects too (``WhisperRequest.detect_too``, issue 47:
a session's kept language watched for a switch), on the real engine and a bundled clip: the
decode stays in the given language, and the detection comes back as if none was given."""

from __future__ import annotations

import numpy as np
import pytest

from speechpipe.models.whisper.engine import DecodeTask, WhisperRequest
from speechpipe.transport.file_replay import read_audio


def test_a_kept_language_decodes_in_it_and_still_detects(pipeline):
    audio = read_audio("samples/wav/es_gato.wav").astype(np.float32) / 32768.0
    asked = dict(audio=audio, beam_size=1, tasks=(DecodeTask("transcribe"),))
    detected = pipeline.engine.run(WhisperRequest(language=None, **asked))
    kept = pipeline.engine.run(WhisperRequest(language="en", detect_too=True, **asked))
    plain = pipeline.engine.run(WhisperRequest(language="en", **asked))
    assert kept.language == "en" and plain.language_probs == ()
    assert [code for code, _ in kept.language_probs] == [
        code for code, _ in detected.language_probs]
    assert [p for _, p in kept.language_probs] == pytest.approx(
        [p for _, p in detected.language_probs], abs=1e-3)
    assert kept.language_probs[0][0] == detected.language == "es"
