"""The house's size rules (issue 43's end states 1 and 2): the I/O pump of a connection, the
transport modules and the Whisper engine stay small enough to hold one job each. A module
that grows past its bound is a sign that a responsibility moved in; split it, do not raise
the bound."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import ROOT

BOUNDS = {
    "transport/ws_connection.py": 350,  # one pump that performs the core's decisions
    "models/whisper/engine.py": 400,  # load, encode and the CTranslate2 calls
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
