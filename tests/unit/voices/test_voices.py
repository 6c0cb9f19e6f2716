"""Piper voice lookup against the real built-in voice package (real synthesis: the slow
tier)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from speechpipe.errors import VoiceError
from speechpipe.voices import (
    BUILTIN_VOICE,
    list_voices,
    load_voice_info,
    resolve_voice,
    voices_home,
)
from speechpipe.voices.engines import ENGINES
from speechpipe.voices.registry import is_voice_name
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
    tmp_path: Path, write: object, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Why a voice is broken goes to the operator (the log, once); the error a caller gets,
    which a live server sends to its client, names the voice but no path or parse detail
    (issue 21, item 10)."""
    extra = add_voice(tmp_path / "mine", "bad", "de_DE")
    write(extra)  # type: ignore[operator]
    with caplog.at_level("WARNING", logger="speechpipe.voices.registry"):
        with pytest.raises(VoiceError) as info:
            resolve_voice("bad", "de", extra_dirs=[extra])
        assert [v.name for v in list_voices(extra_dirs=[extra])] == [BUILTIN_VOICE]
    message = str(info.value)
    assert "'bad'" in message and "broken" in message
    assert str(tmp_path) not in message and "/" not in message and "JSON" not in message
    logged = [r.getMessage() for r in caplog.records if "skipping Piper voice bad" in
              r.getMessage()]
    assert len(logged) == 1, "logged once, not on every lookup"
    assert re.search(f"voice 'bad': .*{reason}", logged[0]), logged
    with pytest.raises(VoiceError, match="broken: bad") as info:
        resolve_voice(None, "de", extra_dirs=[extra])
    assert str(tmp_path) not in str(info.value) and str(voices_home()) not in str(info.value)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda c: c.pop("phoneme_id_map"), "phoneme_id_map"),
        (lambda c: c.update(phoneme_id_map={"a": "not a list"}), "phoneme_id_map"),
        (lambda c: c.update(num_symbols="256"), "num_symbols"),
        (lambda c: c.pop("num_speakers"), "num_speakers"),
        (lambda c: c.update(padding="x" * (1 << 20)), "over 1024 KiB"),
    ],
    ids=["no-id-map", "bad-id-map", "bad-num-symbols", "no-num-speakers", "too-big"],
)
def test_configs_piper_cannot_use_are_refused_before_loading(
    tmp_path: Path, change: object, reason: str
) -> None:
    """Size and shape are checked when the config is read (listing, ``models add``), so a
    voice that is listed also loads (issue 21, item 10)."""
    config = json.loads(json.dumps(JOE_CONFIG))
    change(config)  # type: ignore[operator]
    extra = add_voice(tmp_path / "mine", "en_US-odd-medium")
    path = extra / "en_US-odd-medium.onnx.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(VoiceError, match=reason):
        load_voice_info(path)
    assert [v.name for v in list_voices(extra_dirs=[extra])] == [BUILTIN_VOICE]


def test_a_deeply_nested_config_is_refused_without_a_traceback(tmp_path: Path) -> None:
    """Issue 21, item 14: 200,000 levels of nesting raised RecursionError from json."""
    extra = add_voice(tmp_path / "mine", "en_US-deep-medium")
    path = extra / "en_US-deep-medium.onnx.json"
    path.write_text("[" * 200_000 + "]" * 200_000, encoding="utf-8")
    with pytest.raises(VoiceError, match="nested too deeply"):
        load_voice_info(path)


def test_voice_names_follow_the_start_voice_rule(tmp_path: Path) -> None:
    """``GET /voices`` lists only names ``start.voice`` accepts: over 64 characters or
    non-ASCII, a pair in a folder is skipped (logged), not listed (issue 21, item 10)."""
    from speechpipe.transport.protocol import ProtocolError, parse_start

    long_name, accented = "en_US-" + "x" * 70, "en_US-jos\u00e9-medium"
    extra = add_voice(tmp_path / "mine", long_name, "en_US")
    add_voice(extra, accented, "en_US")
    add_voice(extra, "en_US-fine-medium", "en_US")
    listed = [v.name for v in list_voices(extra_dirs=[extra])]
    assert listed == ["en_US-fine-medium", BUILTIN_VOICE]
    for name in listed:
        assert parse_start({"voice": name}).request.voice == name
    for name in (long_name, accented):
        assert not is_voice_name(name)
        with pytest.raises(ProtocolError, match="voice"):
            parse_start({"voice": name})


def test_configs_are_read_once_and_again_after_a_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every session start looks its voice up on the event loop: configs are parsed once
    and again only when a file of the pair changes (issue 21, item 10)."""
    from speechpipe.voices import registry

    extra = add_voice(tmp_path / "mine", "de_DE-test-medium", "de_DE")
    reads: list[Path] = []
    real = registry._read_config

    def counting(path: Path, name: str) -> dict[str, object]:
        reads.append(path)
        return real(path, name)

    monkeypatch.setattr(registry, "_read_config", counting)
    for _ in range(20):
        assert resolve_voice(None, "de", extra_dirs=[extra]).name == "de_DE-test-medium"
    assert reads.count(extra / "de_DE-test-medium.onnx.json") == 1, reads
    config = json.loads(json.dumps(JOE_CONFIG))
    config["language"] = {"code": "de_AT"}
    config["audio"] = {"sample_rate": 16000, "padding": "changed size"}
    (extra / "de_DE-test-medium.onnx.json").write_text(json.dumps(config), encoding="utf-8")
    voice = resolve_voice(None, "de", extra_dirs=[extra])
    assert (voice.locale, voice.sample_rate) == ("de_AT", 16000)
    assert reads.count(extra / "de_DE-test-medium.onnx.json") == 2
