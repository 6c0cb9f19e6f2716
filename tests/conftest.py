"""Shared fixtures: the real pipeline (loaded once per test run) and the sample folders.

Test traffic stays on this machine: ``netguard`` (imported below) makes any TCP/UDP connect
or send from this process to an address outside 127.0.0.0/8, ::1 and 198.18.0.0/15 fail the
test that made it, including from servers the tests run in-process. Subprocesses the tests
start (Chromium, CLIs, Ray workers) are not covered by this Python-level guard: ``.ci/run``
runs the tests in a private network namespace (``scripts/netns-pytest``), which covers them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_SAMPLES = ROOT.parent / "shared" / "samples"
OWN_SAMPLES = ROOT / "samples"


def shared_clip(clip_id: str) -> Path:
    """A real human recording from ../shared/samples; skips where that folder is absent."""
    path = SHARED_SAMPLES / "wav" / f"{clip_id}.wav"
    if not path.is_file():
        pytest.skip(f"needs ../shared/samples (real recordings, not in the repo): {path}")
    return path


def shared_manifest_row(clip_id: str) -> dict:
    manifest = SHARED_SAMPLES / "manifest.jsonl"
    if not manifest.is_file():
        pytest.skip("needs ../shared/samples/manifest.jsonl")
    for line in manifest.read_text().splitlines():
        row = json.loads(line)
        if row["id"] == clip_id:
            return row
    pytest.skip(f"{clip_id} not in the shared manifest")


@pytest.fixture(scope="session")
def pipeline():
    """The real models (Whisper base int8 + Piper joe), loaded and warmed once."""
    from speechpipe.session import Pipeline

    loaded = Pipeline.load()
    loaded.warm_up()
    yield loaded
    loaded.close()

from conftest_server import *  # noqa: E402,F403  (live-server fixtures: live_server, spanish_clip)
from netguard import *  # noqa: E402,F403  (socket guard: hooks, local_traffic_only, local_ice)
