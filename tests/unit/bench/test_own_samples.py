"""The benches' default clips come from the package, not from a path beside the source.

``speechpipe.bench.own_samples`` finds ``samples/`` as the package data ``speechpipe.samples``
(an installed wheel) or in the checkout; ``pyproject.toml`` must ship every file the
manifest names, or an installed ``bench room`` / ``bench soak`` has no default clip.
"""

from __future__ import annotations

import fnmatch
import json
import tomllib
from pathlib import Path

import pytest

from speechpipe.bench import load, room, soak
from speechpipe.bench.own_samples import own_samples
from tests.helpers import ROOT


def manifest_files(folder: Path) -> list[str]:
    lines = (folder / "manifest.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["file"] for line in lines if line.strip()]


def test_the_benches_defaults_are_the_own_samples() -> None:
    folder = own_samples()
    assert (folder / "manifest.jsonl").is_file(), folder
    assert room.DEFAULT_CLIP == folder / "wav" / "es_gato.wav" and room.DEFAULT_CLIP.is_file()
    assert soak.SAMPLES_DIR == folder
    assert all((folder / name).is_file() for name in manifest_files(folder))


def test_bench_load_finds_the_own_clips_from_any_folder(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no samples/ here
    assert load.find_manifest() == own_samples() / "manifest.jsonl"
    explicit = tmp_path / "m.jsonl"
    explicit.write_text("")
    assert load.find_manifest(str(explicit)) == explicit


def test_the_package_ships_every_clip_the_manifest_names() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
        "setuptools"]
    assert setuptools["package-dir"]["speechpipe.samples"] == "samples"
    assert "speechpipe.samples" in setuptools["packages"]
    patterns = setuptools["package-data"]["speechpipe.samples"]
    shipped = ["manifest.jsonl", *manifest_files(ROOT / "samples")]
    missing = [name for name in shipped
               if not any(fnmatch.fnmatch(name, pattern) for pattern in patterns)]
    assert missing == [], f"not in package-data: {missing}"
