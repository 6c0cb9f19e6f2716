"""The house's size rules (issue 43's end states 1 and 2): the I/O pump of a connection, the
transport modules and the Whisper engine stay small enough to hold one job each. A module
that grows past its bound is a sign that a responsibility moved in; split it, do not raise
the bound. A session only starts the stages its builder made (issue 73, end state 1). The
engine computes and the decode program decides (issue 73, end state 2): its pass over a
bucket stays short and it never calls the program."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers import ROOT

BOUNDS = {
    "transport/ws_connection.py": 350,  # one pump that performs the core's decisions
    "models/whisper/engine.py": 330,  # load, encode, detect, generate, align
    # the models and shared workers; a session starts the stages pipeline_build built
    "speechpipe/session.py": 400,
}
TRANSPORT_BOUND = 450


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_named_modules_stay_within_their_bound(name: str) -> None:
    assert lines(ROOT / name) <= BOUNDS[name], f"{name} grew past {BOUNDS[name]} lines"


def test_no_transport_module_over_its_bound() -> None:
    over = {p.name: lines(p) for p in (ROOT / "transport").glob("*.py")
            if lines(p) > TRANSPORT_BOUND}
    assert not over, f"transport modules over {TRANSPORT_BOUND} lines: {over}"


def test_the_engines_pass_is_short_and_never_calls_the_program() -> None:
    source = (ROOT / "models/whisper/engine.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    run_bucket = next(node for node in ast.walk(tree)
                      if isinstance(node, ast.FunctionDef) and node.name == "run_bucket")
    assert run_bucket.end_lineno is not None
    assert run_bucket.end_lineno - run_bucket.lineno + 1 <= 40, "run_bucket grew past 40 lines"
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not imported & {"speechpipe.stages.decode_program", "speechpipe.stages.redecode"}, \
        "the second decodes are the decode program's (stages/decode_program.py)"
