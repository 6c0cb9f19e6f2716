"""The encoder's input length: the audio, at least ``trailing_silence_s`` of silence, rounded
up to ``encode_bucket_s`` (``WhisperEngine.encode_samples``; pure arithmetic, no model)."""

from __future__ import annotations

import pytest

from speechpipe.config import Config, apply_overrides
from speechpipe.errors import InputError
from speechpipe.models.whisper.engine import SAMPLE_RATE, WhisperEngine


def lengths(trailing_s: float, bucket_s: float) -> WhisperEngine:
    engine = WhisperEngine.__new__(WhisperEngine)  # the arithmetic only: no model loaded
    engine.trailing_silence_s, engine.encode_bucket_s = trailing_s, bucket_s
    return engine


@pytest.mark.parametrize(("audio_s", "trailing_s", "bucket_s", "encoded_s"), [
    (2.3, 1.0, 1.0, 4.0),  # the default: 1 s of silence at least, whole seconds
    (2.0, 1.0, 1.0, 3.0),
    (2.3, 0.5, 0.5, 3.0),
    (2.5, 0.5, 0.5, 3.0),  # exactly on a bucket: no extra bucket
    (2.51, 0.5, 0.5, 3.5),
])
def test_the_encoder_hears_the_audio_and_at_least_the_trailing_silence(
        audio_s: float, trailing_s: float, bucket_s: float, encoded_s: float) -> None:
    samples = lengths(trailing_s, bucket_s).encode_samples(round(audio_s * SAMPLE_RATE))
    assert samples == round(encoded_s * SAMPLE_RATE)
    assert samples - audio_s * SAMPLE_RATE >= trailing_s * SAMPLE_RATE - 1


def test_the_trailing_silence_is_a_pipeline_option() -> None:
    config = apply_overrides(Config(), ["pipeline.asr_trailing_silence_s=0.5"])
    assert config.pipeline.asr_trailing_silence_s == 0.5
    with pytest.raises(InputError, match="asr_trailing_silence_s must be > 0"):
        apply_overrides(Config(), ["pipeline.asr_trailing_silence_s=0"])
