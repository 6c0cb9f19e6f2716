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

Tiers are folders (docs/layout.md, "Tests"): ``tests/unit`` (no model, no subprocess, no
socket: ``tests/unit/conftest.py``'s guard), ``tests/cli`` (subprocesses and loopback
servers), ``tests/slow`` (real models and audio), ``tests/browser`` (headless Chromium),
``tests/cluster`` (real Ray). A test gets the ``slow``, ``browser`` or ``cluster`` mark from
its folder, never from its file. Plain ``pytest`` runs unit and cli (pyproject.toml's
testpaths) on every core (``-n auto``: the workers below); ``scripts/test-all`` runs every
tier, each in its own pytest run. The guard below holds the fast tiers to having no real
model: in a test of tests/unit or tests/cli, loading Whisper, CTranslate2's Whisper, a Piper
voice or the pipeline, asking for the ``pipeline``/``live_server`` fixtures, starting
``speechpipe serve`` on the real models in a subprocess, or ``ray.init`` fails the test
("move it to tests/slow").
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from _pytest.monkeypatch import MonkeyPatch

from tests.helpers import SPANISH_CLIP, manifest_clip, stream_websocket
from tests.netguard import *  # noqa: F403  (socket guard: hooks, local_traffic_only, local_ice)

_TEST_HOME: Path | None = None
_PYCACHE: Path | None = None  # the run's own bytecode cache, removed at the end


def pytest_configure(config: pytest.Config) -> None:
    """One temporary ``SPEECHPIPE_HOME`` for the run, set before any test resolves a model."""
    import os
    import tempfile

    global _TEST_HOME, _PYCACHE
    _TEST_HOME = Path(tempfile.mkdtemp(prefix="speechpipe-test-home-"))
    os.environ["SPEECHPIPE_HOME"] = str(_TEST_HOME)
    # CTranslate2 packs linear weights for Intel MKL's GEMM (CT2_PACKED_GEMM, default on with
    # MKL), and a packed output layer cannot be restricted: the engine then decodes with the
    # full vocabulary. Off for the run, so the restricted decoders (models/whisper/prefill.py) are
    # tested on every CPU; the packed default has its own test in fresh processes
    # (tests/slow/models/test_prefill.py). Inherited by the subprocesses the tests start.
    os.environ.setdefault("CT2_PACKED_GEMM", "0")
    # The subprocesses the tests start (the CLI, a hundred times and more) and pytest-xdist's
    # workers import the same modules: where the environment says not to write bytecode
    # (PYTHONDONTWRITEBYTECODE), each compiled the project's ~100 modules again (~0.1 s a
    # start) and each worker rewrote the asserts of every test module again (~8 s of CPU).
    # They share one bytecode cache outside the tree instead: the user's own folder in the
    # temporary directory, kept from run to run (Python checks each file against its source),
    # or one of this run's where that folder cannot be trusted.
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
        os.environ["PYTHONPYCACHEPREFIX"] = str(_bytecode_cache())


def _bytecode_cache() -> Path:
    """``$TMPDIR/speechpipe-test-pycache-UID`` when it is this user's alone; else a new folder,
    removed at the end of the run."""
    import os
    import stat
    import tempfile

    global _PYCACHE
    shared = Path(tempfile.gettempdir()) / f"speechpipe-test-pycache-{os.getuid()}"
    try:
        shared.mkdir(mode=0o700, exist_ok=True)
        info = shared.lstat()
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077:
            return shared
    except OSError:
        pass
    _PYCACHE = Path(tempfile.mkdtemp(prefix="speechpipe-test-pycache-"))
    return _PYCACHE


# --- the tiers: folders, their marks, the workers -----------------------------------------

TIER_FOLDERS = ("unit", "cli", "slow", "browser", "cluster")
FAST_TIERS = ("unit", "cli")  # what plain pytest runs (pyproject.toml's testpaths)
TIER_MARKS = ("slow", "browser", "cluster")  # tests allowed real models, Chromium, Ray
TESTS = Path(__file__).resolve().parent


def tier_of(path: Path | str) -> str | None:
    """The tier folder a path is in (``tests/<tier>/...``); None outside them."""
    try:
        folder = Path(path).resolve().relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        return None
    return folder if folder in TIER_FOLDERS else None


@pytest.hookimpl(tryfirst=True)  # before -m selects by mark
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test of tests/slow, tests/browser and tests/cluster gets its folder's mark. In
    pytest-xdist's workers the tests marked ``long`` come first: the others, short, then fill
    the workers to the end (run in file order, the 17 s test of the fast tiers came last and
    one worker waited for it alone)."""
    for item in items:
        tier = tier_of(item.path)
        if tier in TIER_MARKS:
            item.add_marker(tier)
    if hasattr(config, "workerinput"):  # every worker sorts alike: they must agree
        items.sort(key=lambda item: item.get_closest_marker("long") is None)


def fast_tiers_only(config: pytest.Config) -> bool:
    """Whether a run selects only tests of tests/unit and tests/cli (plain pytest does)."""
    for arg in config.args:
        path = Path(config.invocation_params.dir, arg.split("::", 1)[0]).resolve()
        if tier_of(path) not in FAST_TIERS:  # another tier, or tests/ itself or above
            return False
    return True


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (pyproject.toml's addopts): unit and cli on every core (at most 8); a run
    that selects slow, browser or cluster tests stays in one process (one loaded pipeline, one
    Chromium, one Ray head; their timings assume the machine to themselves).
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides when set."""
    import os

    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    if not fast_tiers_only(config):
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return min(cores or 1, 8) if (cores or 1) > 1 else 0


def pytest_report_header(config: pytest.Config) -> str | None:
    if config.args_source == pytest.Config.ArgsSource.TESTPATHS:
        return ("tiers: unit and cli (plain pytest); scripts/test-all runs every tier, "
                "pytest tests/slow (browser, cluster) one")
    return None


# --- the fast tiers' guard against real models -------------------------------------------

REAL_FIXTURES = ("pipeline", "live_server")  # the shared real pipeline and the server on it
_GUARD_KEY = pytest.StashKey[MonkeyPatch]()
_SERVERS_KEY = pytest.StashKey[list[Any]]()


def starts_a_server(argv: Any) -> bool:
    """Whether a subprocess's ``argv`` is ``speechpipe serve`` on the real models (the
    model-free scripted one is ``tests/scripted_serve.py serve``)."""
    words = argv.split() if isinstance(argv, str) else [str(a) for a in argv]
    names = [w.rsplit("/", 1)[-1] for w in words]
    return "speechpipe" in names and "serve" in names


def _fast_tier(item: pytest.Item) -> bool:
    return not any(item.get_closest_marker(mark) for mark in TIER_MARKS)


def _refuse(what: str) -> Any:
    def refused(*args: Any, **kwargs: Any) -> Any:
        pytest.fail(f"a fast-tier test {what}: move it to tests/slow (tests/cluster for Ray)",
                    pytrace=False)

    return refused


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before a fast-tier test's fixtures are set up: refuse real models and Ray."""
    if not _fast_tier(item):
        return
    real = [name for name in REAL_FIXTURES if name in getattr(item, "fixturenames", ())]
    if real:
        pytest.fail(f"a fast-tier test uses the real pipeline ({', '.join(real)}): move it to "
                    "tests/slow", pytrace=False)
    import ctranslate2

    from speechpipe import session
    from speechpipe.models.whisper import engine as whisper_engine
    from speechpipe.voices import piper_engine

    patch = MonkeyPatch()
    item.stash[_GUARD_KEY] = patch
    servers: list[Any] = []
    item.stash[_SERVERS_KEY] = servers
    popen_init = subprocess.Popen.__init__

    def watched_init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        popen_init(self, args, *rest, **kwargs)
        if starts_a_server(args):
            servers.append(self)

    patch.setattr(subprocess.Popen, "__init__", watched_init)
    patch.setattr(whisper_engine.WhisperEngine, "__init__",
                  _refuse("loads a real model (WhisperEngine)"))
    patch.setattr(ctranslate2.models, "Whisper",
                  _refuse("loads a real model (ctranslate2.models.Whisper)"))
    patch.setattr(session.Pipeline, "load", _refuse("loads a real model (Pipeline.load)"))
    patch.setattr(piper_engine, "load_piper", _refuse("loads a real model (a Piper voice)"))
    patch.setattr(piper_engine, "_load", _refuse("loads a real model (a Piper voice)"))
    try:
        import ray
    except ImportError:
        pass
    else:
        patch.setattr(ray, "init", _refuse("starts or joins Ray (ray.init)"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """After a fast-tier test: a ``speechpipe serve`` it started that did not exit at once
    with a usage error (1 or 2) was a live server on the real models."""
    result = yield
    served = [proc.args for proc in item.stash.get(_SERVERS_KEY, [])
              if proc.poll() not in (1, 2)]
    if served:
        pytest.fail(f"a fast-tier test starts a live speechpipe server ({served[0]}): move it "
                    "to tests/slow", pytrace=False)
    return result


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    yield
    patch = item.stash.get(_GUARD_KEY, None)
    if patch is not None:
        patch.undo()


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    for folder in (_TEST_HOME, _PYCACHE):
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


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
