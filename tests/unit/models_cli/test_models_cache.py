"""``speechpipe models list`` shows the cache with its true sizes, ``models clean`` removes
what nothing uses (old restricted decoder copies, kept-token sets, unregistered MT folders,
leftovers) and keeps the rest; in a temporary SPEECHPIPE_HOME."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from speechpipe import models_cli


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="speechpipe")
    models_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    return int(args.handler(args))


def _file(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    return path


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("SPEECHPIPE_HOME", str(home))
    _file(home / "models/whisper-base/model.bin", 5000)
    _file(home / "models/whisper-base/config.json", 70)
    _file(home / "models/restricted/whisper-base-de-en-1234/model.bin", 3000)
    _file(home / "models/restricted/whisper-base-de-en-1234/kept.json", 11)
    _file(home / "models/restricted/.whisper-base-de-en-1234.lock", 0)
    _file(home / "models/vocabularies/whisper-base-en-es-30000-ab.json", 400)
    _file(home / "mt/en-es/model.bin", 900)
    _file(home / "mt/orphan/model.bin", 800)
    _file(home / ".tmp-half-built/model.bin", 600)
    _file(home / "voices/v.onnx", 200)
    registry = {"version": 1, "mt": {"en-es": {
        "path": str(home / "mt/en-es"), "family": "marian", "source_langs": ["en"],
        "target_langs": ["es"], "size_bytes": 900}}}
    (home / "registry.json").write_text(json.dumps(registry))
    return home


def _cache(capsys: pytest.CaptureFixture[str]) -> dict[str, dict]:  # type: ignore[type-arg]
    capsys.readouterr()
    assert run("models", "list", "--json") == 0
    out = json.loads(capsys.readouterr().out)
    home = Path(out["cache"][0]["path"]).parent
    while not (home / "registry.json").exists():
        home = home.parent
    return {str(Path(c["path"]).relative_to(home)): c for c in out["cache"]}


def test_list_shows_every_entry_with_its_true_size(home, capsys):
    cache = _cache(capsys)
    assert cache["models/whisper-base"]["size_bytes"] == 5070
    assert cache["models/restricted/whisper-base-de-en-1234"]["size_bytes"] == 3011
    assert cache["models/vocabularies"]["size_bytes"] == 400
    assert cache["mt/en-es"]["removable"] is False and cache["mt/orphan"]["removable"] is True
    assert cache[".tmp-half-built"]["removable"] is True
    assert cache["voices"]["removable"] is False and cache["voices"]["size_bytes"] == 200
    capsys.readouterr()
    assert run("models", "list") == 0
    text = capsys.readouterr().out
    total = 5070 + 3011 + 400 + 900 + 800 + 600 + 200 + (home / "registry.json").stat().st_size
    assert f"Cache ({home}): {total / 1024:.1f} KB" in text
    assert "models/restricted/whisper-base-de-en-1234  no longer used  [removable" in text


def test_clean_removes_what_nothing_uses_and_keeps_the_rest(home, capsys):
    capsys.readouterr()
    assert run("models", "clean", "--dry-run") == 0
    assert "would remove" in capsys.readouterr().out
    assert (home / "models/restricted/whisper-base-de-en-1234").is_dir()  # a dry run
    assert run("models", "clean") == 0
    said = capsys.readouterr().out
    assert f"removed {(3011 + 400 + 800 + 600) / 1024:.1f} KB in all" in said
    assert not (home / "models/restricted").exists()  # the copies, their locks, the folder
    assert not (home / "models/vocabularies").exists()
    assert not (home / "mt/orphan").exists() and not (home / ".tmp-half-built").exists()
    for kept in ("models/whisper-base/model.bin", "mt/en-es/model.bin", "voices/v.onnx",
                 "registry.json"):
        assert (home / kept).is_file(), kept
    assert run("models", "clean") == 0
    assert "nothing to remove" in capsys.readouterr().out
