"""The tests' own layout (docs/layout.md, "Tests").

- The tiers are folders: every test file sits in exactly one of tests/unit, tests/cli,
  tests/slow, tests/browser and tests/cluster; a test gets its tier's mark from its folder
  (tests/conftest.py), never from its file; plain pytest runs unit and cli, scripts/test-all
  every tier folder.
- The guards: a unit test that starts a process, opens a socket or resolves a name fails
  (tests/unit/conftest.py); a unit or cli test that loads a real model fails
  (tests/conftest.py).
- Test modules share code only through ``tests/helpers.py``, ``tests/fakes.py``,
  ``tests/support/`` and fixtures (``conftest.py``), never by importing one another (a test
  module imported by another runs its module-level code, fixtures and marks twice and ties
  two files' private names together).
"""

from __future__ import annotations

import ast
import os
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.helpers import ROOT

TESTS = ROOT / "tests"
TIERS = ("unit", "cli", "slow", "browser", "cluster")
TIER_MARKS = ("slow", "browser", "cluster")


def _test_files() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def _imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            # ``from tests.unit.house import test_x`` imports a module too
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
    return found


def _is_test_module(module: str) -> bool:
    parts = module.split(".")
    if parts[0] != "tests":
        return False
    last = parts[-1]
    return last.startswith("test_") or (last == "conftest" and len(parts) > 2)


def _tier_marks(tree: ast.AST) -> list[tuple[int, str]]:
    """Where a module names ``pytest.mark.slow``, ``.browser`` or ``.cluster``."""
    return [(node.lineno, node.attr) for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in TIER_MARKS
            and isinstance(node.value, ast.Attribute) and node.value.attr == "mark"]


def test_every_test_file_is_in_one_tier_folder() -> None:
    outside = [str(path.relative_to(ROOT)) for path in _test_files()
               if path.relative_to(TESTS).parts[0] not in TIERS]
    assert outside == [], f"test files outside the tier folders {TIERS}: {outside}"
    for tier in TIERS:
        assert list((TESTS / tier).rglob("test_*.py")), f"tests/{tier} holds no test"


def test_no_test_file_marks_its_own_tier() -> None:
    offenders = []
    for path in _test_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        offenders += [f"{path.relative_to(ROOT)}:{line} pytest.mark.{mark}"
                      for line, mark in _tier_marks(tree)]
    assert offenders == [], ("the folder gives a test its tier (tests/conftest.py): move the "
                             "test instead of marking it:\n" + "\n".join(offenders))


def test_the_check_sees_a_tier_mark() -> None:
    tree = ast.parse("import pytest\npytestmark = [pytest.mark.slow, pytest.mark.asyncio]\n"
                     "@pytest.mark.browser\ndef test_x(): pass\n"
                     "@pytest.mark.parametrize('a', [pytest.param(1, marks=pytest.mark.cluster)])"
                     "\ndef test_y(a): pass\n")
    assert sorted(mark for _, mark in _tier_marks(tree)) == ["browser", "cluster", "slow"]


def test_plain_pytest_runs_unit_and_cli_and_test_all_every_tier() -> None:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    assert options["ini_options"]["testpaths"] == ["tests/unit", "tests/cli"]
    script = (ROOT / "scripts" / "test-all").read_text()
    assert "${TIERS:-unit cli slow browser cluster}" in script and '"tests/$tier"' in script


def test_the_folder_gives_the_mark(request: pytest.FixtureRequest) -> None:
    from tests.conftest import tier_of

    assert tier_of(TESTS / "slow" / "e2e" / "test_x.py") == "slow"
    assert tier_of(TESTS / "unit" / "test_x.py") == "unit"
    assert tier_of(TESTS / "helpers.py") is None and tier_of(ROOT / "README.md") is None
    assert not any(request.node.get_closest_marker(mark) for mark in TIER_MARKS)


def test_no_test_module_imports_another_test_module() -> None:
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, module in _imported_modules(tree):
            if _is_test_module(module):
                offenders.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not offenders, ("share through tests/helpers.py, tests/fakes.py or tests/support/ "
                           "instead:\n" + "\n".join(offenders))


def test_the_check_sees_an_import_of_a_test_module() -> None:
    tree = ast.parse("from tests.unit.x.test_x import y\nfrom tests.cli import test_z\n"
                     "import tests.slow.models.test_w\nfrom tests.helpers import pcm\n"
                     "from tests.unit import conftest\nfrom tests.support.cluster import Procs\n")
    flagged = [m for _, m in _imported_modules(tree) if _is_test_module(m)]
    assert flagged == ["tests.unit.x.test_x", "tests.cli.test_z", "tests.slow.models.test_w",
                       "tests.unit.conftest"]


def test_a_unit_test_cannot_start_a_process_open_a_socket_or_resolve_a_name() -> None:
    """The unit tier's guard (tests/unit/conftest.py), from inside a unit test: each refused
    call raises at once (no process is started), and is recorded to fail the test; the
    records are cleared here, as this test wanted them."""
    guard = sys.modules["tests.unit.conftest"].GUARD
    assert guard.active and guard.calls == []
    refused = {
        "subprocess.Popen": lambda: subprocess.run(["true"], check=False),
        "os.fork": os.fork,
        "os.system": lambda: os.system("true"),
        "socket.socket": lambda: socket.create_connection(("127.0.0.1", 9)),
        "socket.getaddrinfo": lambda: socket.getaddrinfo("example.invalid", 80),
    }
    for name, call in refused.items():
        with pytest.raises(PermissionError, match="move it to tests/cli"):
            call()
        assert name in guard.calls[-1]
    guard.calls.clear()
    first, second = socket.socketpair()  # in-process: allowed (asyncio's loop uses one)
    first.close()
    second.close()
    socket.getaddrinfo("127.0.0.1", 80)  # an IP literal resolves nothing
    assert guard.calls == []


def test_a_fast_tier_test_cannot_load_a_real_model() -> None:
    """The fast tiers' guard (tests/conftest.py): real models fail a unit or cli test."""
    import ctranslate2

    from speechpipe.models.whisper.engine import WhisperEngine
    from speechpipe.session import Pipeline
    from speechpipe.voices import piper_engine

    for load in (Pipeline.load, WhisperEngine, ctranslate2.models.Whisper,
                 piper_engine.load_piper):
        with pytest.raises(pytest.fail.Exception, match="move it to tests/slow"):
            load()  # type: ignore[operator]


def test_a_speechpipe_server_subprocess_is_recognised() -> None:
    from tests.conftest import starts_a_server
    from tests.scripted_serve import SCRIPTED_SPEECHPIPE

    assert starts_a_server(["/venv/bin/python", "-m", "speechpipe", "serve", "--port", "0"])
    assert starts_a_server("/venv/bin/speechpipe -v serve --token t")
    assert not starts_a_server([*SCRIPTED_SPEECHPIPE, "-v", "serve", "--capacity", "1"])
    assert not starts_a_server(["python", "-m", "speechpipe", "translate", "a.wav"])
    assert not starts_a_server(["prometheus", "--config.file=x"])
