"""Real Piper synthesis with the built-in voice: int16 at 22050 Hz, the configured threads, a
config it cannot use refused."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from speechpipe.errors import VoiceError
from speechpipe.voices import (
    BUILTIN_VOICE,
    PiperOptions,
    PiperSynthesizer,
    resolve_voice,
)
from speechpipe.voices.engines import ENGINES
from tests.support.voices import JOE_CONFIG, add_voice


@pytest.fixture(autouse=True)
def empty_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Keep the user's own voices folder out of these tests, and the engines' catalogues
    (espeak-ng's voices without files: ``test_espeak_engine.py``): these are about files."""
    home = tmp_path / "home"
    monkeypatch.setenv("SPEECHPIPE_HOME", str(home))
    for name, engine in list(ENGINES.items()):
        monkeypatch.setitem(ENGINES, name, dataclasses.replace(engine, catalogue=""))
    return home


@pytest.fixture(scope="module")
def joe() -> PiperSynthesizer:
    return PiperSynthesizer(resolve_voice(None, "en"))


def test_piper_speaks_int16_at_22050(joe: PiperSynthesizer) -> None:
    audio = joe.synthesize("The train leaves at nine. Please do not be late.")
    assert joe.sample_rate == 22050
    assert audio.dtype == np.int16 and audio.ndim == 1
    seconds = len(audio) / joe.sample_rate
    assert 1.5 < seconds < 6.0
    rms = np.sqrt(np.mean(audio.astype(np.float64) ** 2))
    assert rms > 1000  # speech, not near-silence
    assert joe.synthesize("").size == 0


def test_piper_session_uses_the_configured_threads() -> None:
    voice = resolve_voice(None, "en")
    synth = PiperSynthesizer(voice.model_path, PiperOptions(intra_op_threads=2))
    assert (synth.voice.name, synth.voice.sample_rate) == (BUILTIN_VOICE, 22050)
    options = synth._piper.session.get_session_options()
    assert options.intra_op_num_threads == 2
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert synth.synthesize("Hello.").size > 0


def test_piper_rejects_a_config_it_cannot_use(tmp_path: Path) -> None:
    config = {k: v for k, v in JOE_CONFIG.items() if k != "espeak"}
    extra = add_voice(tmp_path / "mine", "en_US-broken-medium")
    (extra / "en_US-broken-medium.onnx.json").write_text(json.dumps(config), encoding="utf-8")
    voice = resolve_voice("en_US-broken-medium", "en", extra_dirs=[extra])
    with pytest.raises(VoiceError, match="unusable config"):
        PiperSynthesizer(voice)
