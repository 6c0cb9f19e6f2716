"""``speechpipe models pull``'s refusals in process: a long value is echoed in a bounded
part (the pulls themselves, as a user runs them: the cli tier)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub")
pytest.importorskip("ctranslate2")

CT2_REPO = "speechpipe-test/opus-mt-en-es-ct2"


@pytest.mark.parametrize("args", [["x" * 100_000], ["--name", "n" * 100_000, CT2_REPO]])
def test_a_refusal_echoes_a_bounded_part_of_a_long_value(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        args: list[str]) -> None:
    from speechpipe.cli import main

    monkeypatch.setenv("SPEECHPIPE_HOME", str(tmp_path / "home"))
    assert main(["models", "pull", *args]) == 2  # refused before the hub is asked
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and len(err) < 300, err[:400]
