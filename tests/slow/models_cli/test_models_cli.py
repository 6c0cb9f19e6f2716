"""``speechpipe models add`` with a real Piper voice: a round trip, and a file that is not a
model refused by Piper's own loader."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.models_cli import assert_not_half_registered, joe_files, listing, run


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("SPEECHPIPE_HOME", str(home))
    return home


# --- voices ------------------------------------------------------------------------------


def test_add_voice_round_trip(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("piper")
    model, config = joe_files()
    assert run("models", "add", str(model), "--name", "en_US-test-medium") == 0
    installed = home / "voices"
    assert sorted(p.name for p in installed.iterdir()) == [
        "en_US-test-medium.onnx", "en_US-test-medium.onnx.json"
    ]
    assert (installed / "en_US-test-medium.onnx").stat().st_size == model.stat().st_size
    voices = {v["name"]: v for v in listing(capsys)["voices"]}
    assert voices["en_US-test-medium"]["sample_rate"] == 22050
    assert voices["en_US-test-medium"]["lang"] == "en"
    assert run("models", "add", str(config), "--name", "en_US-test-medium") == 2  # exists


@pytest.mark.parametrize("case", ["not-onnx"])  # goes through Piper's model loader
def test_broken_voice_is_not_half_registered(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    pytest.importorskip("piper")
    assert_not_half_registered(home, tmp_path, capsys, case)
