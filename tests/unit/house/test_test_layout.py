"""The tests' own layout: test modules share code only through ``tests/helpers.py``,
``tests/fakes.py`` and fixtures (``conftest.py``), never by importing one another (a test
module imported by another runs its module-level code, fixtures and marks twice and ties two
files' private names together)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[2]


def _imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            # ``from tests.app import test_x`` imports a module too
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
    return found


def _is_test_module(module: str) -> bool:
    parts = module.split(".")
    if parts[0] != "tests":
        return False
    last = parts[-1]
    return last.startswith("test_") or (last == "conftest" and len(parts) > 2)


def test_no_test_module_imports_another_test_module() -> None:
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, module in _imported_modules(tree):
            if _is_test_module(module):
                offenders.append(f"{path.relative_to(TESTS.parent)}:{line} imports {module}")
    assert not offenders, ("share through tests/helpers.py or tests/fakes.py instead:\n"
                           + "\n".join(offenders))


def test_the_check_sees_an_import_of_a_test_module() -> None:
    tree = ast.parse("from tests.app.test_x import y\nfrom tests.app import test_z\n"
                     "import tests.models.test_w\nfrom tests.helpers import pcm\n"
                     "from tests.fakes import TickFactory\n")
    flagged = [m for _, m in _imported_modules(tree) if _is_test_module(m)]
    assert flagged == ["tests.app.test_x", "tests.app.test_z", "tests.models.test_w"]


def test_an_unmarked_test_cannot_load_a_real_model() -> None:
    """The fast tier's guard (tests/conftest.py): real models fail an unmarked test."""
    import ctranslate2

    from speechpipe.models.whisper.engine import WhisperEngine
    from speechpipe.session import Pipeline
    from speechpipe.voices import piper_engine

    for load in (Pipeline.load, WhisperEngine, ctranslate2.models.Whisper,
                 piper_engine.load_piper):
        with pytest.raises(pytest.fail.Exception, match="mark it slow"):
            load()  # type: ignore[operator]


def test_a_speechpipe_server_subprocess_is_recognised() -> None:
    from tests.conftest import starts_a_server
    from tests.scripted_serve import SCRIPTED_SPEECHPIPE

    assert starts_a_server(["/venv/bin/python", "-m", "speechpipe", "serve", "--port", "0"])
    assert starts_a_server("/venv/bin/speechpipe -v serve --token t")
    assert not starts_a_server([*SCRIPTED_SPEECHPIPE, "-v", "serve", "--capacity", "1"])
    assert not starts_a_server(["python", "-m", "speechpipe", "translate", "a.wav"])
    assert not starts_a_server(["prometheus", "--config.file=x"])
