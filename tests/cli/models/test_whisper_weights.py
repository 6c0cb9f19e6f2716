"""The bundled Whisper base model is assembled safely across processes: concurrent first runs
build it once, and a killed build leaves only an ignored temporary folder."""

from __future__ import annotations

import hashlib
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from speechpipe.models.whisper.weights import (
    WHISPER_BASE_MODEL,
    resolve_whisper_model,
)

PINNED = WHISPER_BASE_MODEL.sha256
FILES = sorted(PINNED)

# A child process that waits for a shared start signal, then resolves the model.
CHILD = """
import os, sys, time
from pathlib import Path
from speechpipe.models.whisper.weights import resolve_whisper_model
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.001)
path = resolve_whisper_model(home=Path(sys.argv[1]))
print(path, os.stat(path).st_ino)
"""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def leftovers(home: Path) -> list[str]:
    return sorted(p.name for p in (home / "models").glob(".whisper-base.tmp-*"))


@pytest.fixture(autouse=True)
def _drop_models(tmp_path: Path) -> Iterator[None]:
    """pytest keeps old tmp dirs; don't leave 150 MB models in each on a shared disk."""
    yield
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_concurrent_first_runs_build_once(tmp_path: Path) -> None:
    home, go = tmp_path / "home", tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(home), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    go.touch()
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err for _, err in outputs]
    # Same folder inode everywhere: one build was installed and nobody replaced it later.
    assert len({out for out, _ in outputs}) == 1
    folder = resolve_whisper_model(home=home, verify=True)
    assert {name: sha256(folder / name) for name in FILES} == PINNED
    assert leftovers(home) == []


def test_killed_build_leaves_only_an_ignored_temp_dir(tmp_path: Path) -> None:
    home, go = tmp_path / "home", tmp_path / "go"
    go.touch()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(home), str(go)])
    deadline = time.monotonic() + 60
    while not leftovers(home):
        assert child.poll() is None, "the build finished before it could be interrupted"
        assert time.monotonic() < deadline
        time.sleep(0.002)
    time.sleep(0.05)  # let it write part of model.bin
    child.send_signal(signal.SIGKILL)
    child.wait()

    target = home / "models" / "whisper-base"
    assert not target.exists()
    assert leftovers(home)  # the half-written build is still there...
    folder = resolve_whisper_model(home=home)  # ...and neither blocks nor breaks the next run
    assert folder == target
    assert sha256(folder / "model.bin") == PINNED["model.bin"]
    assert leftovers(home) == []
