"""Hardening round 5 (issue 74): what a voice's ``.onnx.json`` may hand its engine.

``espeak.voice`` reached espeak-ng as a file name (``../../dev/zero`` spun forever, deaf to
SIGTERM; ``/etc/passwd`` gave silence with exit 0); ``audio.sample_rate`` 1 cost 4 GB, 1e12
gave silence. Each is refused where the config is read (listing, ``models add``, ``models
pull``) and again where Piper would load it, in one line with exit code 2, leaving nothing."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest

from speechpipe import models_cli
from speechpipe.errors import UnsafeVoiceError, VoiceError
from speechpipe.voices import BUILTIN_VOICE, list_voices, load_voice_info, registry, resolve_voice
from speechpipe.voices.engines import ENGINES
from tests.support.voices import (
    changed_after_listing,
    crafted_voice,
)


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("SPEECHPIPE_HOME", str(home))
    for name, engine in list(ENGINES.items()):  # file voices only, no espeak-ng catalogue
        monkeypatch.setitem(ENGINES, name, dataclasses.replace(engine, catalogue=""))
    return home


HOSTILE = {
    "relative-path": {"espeak__voice": "../../../../../../../../dev/zero"},
    "absolute-path": {"espeak__voice": "/etc/passwd"},
    "not-a-voice": {"espeak__voice": "xx-nope"},
    "nul": {"espeak__voice": "es\x00"},
    "long": {"espeak__voice": "e" * 100_000},
    "bad-variant": {"espeak__voice": "es+../../x"},
    "rate-1": {"audio__sample_rate": 1},
    "rate-1e12": {"audio__sample_rate": 10**12},
    "rate-float": {"audio__sample_rate": 22050.5},
    "speakers": {"num_speakers": 10**9},
    "symbols": {"num_symbols": 10**12},
    "id-past-symbols": {"phoneme_id_map": {"a": [300]}},
    "length-scale": {"inference__length_scale": 1e308},
    "noise-scale": {"inference__noise_scale": -1},
    "speaker-id": {"default_speaker_id": 5},
    "phoneme-type": {"phoneme_type": "../x"},
    "language-code": {"language__code": "../../x"},
    "language-family": {"language__family": "es\n"},
}


@pytest.mark.parametrize("values", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_values_are_refused_where_the_config_is_read(
    tmp_path: Path, values: dict[str, object]
) -> None:
    config = crafted_voice(tmp_path / "v", "es_ES-evil-medium", **values)
    with pytest.raises(UnsafeVoiceError) as caught:
        load_voice_info(config)
    message = str(caught.value)
    assert "\n" not in message and len(message) < 400, message
    # listing skips it; asked for by name, it is bad input (exit code 2), not a broken install
    assert [v.name for v in list_voices([config.parent])] == [BUILTIN_VOICE]
    with pytest.raises(UnsafeVoiceError, match="refused"):
        resolve_voice("es_ES-evil-medium", "es", [config.parent])


@pytest.mark.parametrize("voice", ["en-us", "es", "fr-fr", "pt-br", "en-gb-x-rp", "cmn",
                                   "de+m3"])
def test_real_espeak_voice_names_pass(tmp_path: Path, voice: str) -> None:
    config = crafted_voice(tmp_path / "v", "es_ES-fine-medium", espeak__voice=voice)
    assert load_voice_info(config).sample_rate == 22050


def test_what_the_engine_gets_is_checked_again(tmp_path: Path) -> None:
    """A config changed after it was listed (or a ``VoiceInfo`` made by hand) is checked
    again where the engine is handed it."""
    with pytest.raises(UnsafeVoiceError, match="espeak.voice"):
        registry.read_voice_config(changed_after_listing(tmp_path))


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="speechpipe")
    models_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    return int(args.handler(args))


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.startswith("speechpipe: error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("values", [HOSTILE["relative-path"], HOSTILE["rate-1"],
                                    HOSTILE["long"]], ids=["path", "rate", "long"])
def test_models_add_refuses_in_one_line_exit_2_and_installs_nothing(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], values: dict[str, object]
) -> None:
    config = crafted_voice(tmp_path / "v", "es_ES-evil-medium", **values)
    capsys.readouterr()
    assert _run("models", "add", str(config.with_suffix(""))) == 2
    err = _one_line(capsys)
    assert len(err) < 400 and "e" * 100 not in err, err
    voices = home / "voices"
    assert not voices.exists() or list(voices.iterdir()) == []


def test_models_pull_refuses_a_hostile_voice_from_the_hub(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``models pull VOICE`` installs through the same check (the hub is faked here; the
    real download is ``tests/cli/models_cli/test_models_pull.py``)."""
    from speechpipe.models.hub import pull as hub_pull

    config = crafted_voice(tmp_path / "hub", "es_ES-davefx-medium",
                           espeak__voice="/etc/passwd")
    monkeypatch.setattr(hub_pull, "download_voice", lambda name: config.with_suffix(""))
    capsys.readouterr()
    assert _run("models", "pull", "es_ES-davefx-medium") == 2
    assert "espeak.voice '/etc/passwd'" in _one_line(capsys)
    voices = home / "voices"
    assert not voices.exists() or list(voices.iterdir()) == []


def test_a_broken_voice_stays_a_broken_voice(tmp_path: Path) -> None:
    """A missing sample rate is damage (``VoiceError``, exit code 1), not a hostile value."""
    config = crafted_voice(tmp_path / "v", "es_ES-odd-medium")
    data = json.loads(config.read_text())
    del data["audio"]["sample_rate"]
    config.write_text(json.dumps(data))
    with pytest.raises(VoiceError) as caught:
        load_voice_info(config)
    assert not isinstance(caught.value, UnsafeVoiceError)
