"""Shared fixtures: the real pipeline (loaded once per test run), the live server on it, and
the real-recording clip the server tests stream. Helpers and fakes: ``tests/helpers.py``.

Test traffic stays on this machine: ``tests/netguard.py`` (imported below) makes any TCP/UDP
connect or send from this process to an address outside 127.0.0.0/8, ::1 and 198.18.0.0/15
fail the test that made it, including from servers the tests run in-process. Subprocesses the
tests start (Chromium, CLIs, Ray workers) are not covered by this Python-level guard:
``.ci/run`` runs the tests in a private network namespace (``scripts/netns-pytest``), which
covers them.

Test files stay in temporary folders: ``pytest_configure`` points ``SPEECHPIPE_HOME`` at a
folder of its own for the whole run (the bundled Whisper model is assembled there, ~2 s),
inherited by the subprocesses the tests start, and removed at the end; nothing is written to
the user's cache (it held ~700 MB after a test run before).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.helpers import SPANISH_CLIP, manifest_clip, stream_websocket
from tests.netguard import *  # noqa: F403  (socket guard: hooks, local_traffic_only, local_ice)

_TEST_HOME: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    """One temporary ``SPEECHPIPE_HOME`` for the run, set before any test resolves a model."""
    import os
    import tempfile

    global _TEST_HOME
    _TEST_HOME = Path(tempfile.mkdtemp(prefix="speechpipe-test-home-"))
    os.environ["SPEECHPIPE_HOME"] = str(_TEST_HOME)
    # CTranslate2 packs linear weights for Intel MKL's GEMM (CT2_PACKED_GEMM, default on with
    # MKL), and a packed output layer cannot be restricted: the engine then decodes with the
    # full vocabulary. Off for the run, so the restricted decoders (models/prefill.py) are
    # tested on every CPU; the packed default has its own test in fresh processes
    # (tests/models/test_prefill.py). Inherited by the subprocesses the tests start.
    os.environ.setdefault("CT2_PACKED_GEMM", "0")


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    if _TEST_HOME is not None:
        shutil.rmtree(_TEST_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def pipeline():
    """The real models (Whisper base int8 + Piper joe), loaded and warmed once."""
    from speechpipe.config import PipelineOptions
    from speechpipe.session import Pipeline, apply_process_limits

    options = PipelineOptions()
    apply_process_limits(options)  # as the CLI and the server do
    loaded = Pipeline.load(options)
    loaded.warm_up()
    yield loaded
    loaded.close()


@pytest.fixture(scope="session")
def spanish_clip() -> tuple[Path, dict[str, Any]]:
    return manifest_clip(SPANISH_CLIP)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def live_server(pipeline: Any) -> AsyncIterator[Any]:
    """``speechpipe serve`` on the shared pipeline, on a free loopback port."""
    from speechpipe.server.serve import ServerApp

    app = ServerApp("127.0.0.1", 0, pipeline=pipeline)
    await app.start()
    await app.load()  # already loaded: only warms up, then turns ready
    yield app
    await app.stop(close_pipeline=False)


@pytest.fixture
def stream_ws() -> Any:
    """``tests.helpers.stream_websocket`` as a fixture."""
    return stream_websocket
