"""Hardening round 5 (issue 74): Piper refuses a voice's hostile ``.onnx.json`` before
loading anything (the real Piper loader)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from speechpipe.errors import UnsafeVoiceError
from speechpipe.voices.engines import ENGINES
from tests.support.voices import (
    changed_after_listing,
)


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("SPEECHPIPE_HOME", str(home))
    for name, engine in list(ENGINES.items()):  # file voices only, no espeak-ng catalogue
        monkeypatch.setitem(ENGINES, name, dataclasses.replace(engine, catalogue=""))
    return home


def test_piper_refuses_before_loading_anything(tmp_path: Path) -> None:
    pytest.importorskip("piper")
    from speechpipe.voices.piper_engine import PiperSynthesizer

    with pytest.raises(UnsafeVoiceError, match="espeak.voice"):
        PiperSynthesizer(changed_after_listing(tmp_path))
