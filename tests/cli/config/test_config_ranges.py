"""Every leaf of the options tree is checked when it is set (issue 21, item 12): the CLI
refuses NaN, infinities and values outside a leaf's range with exit 2 before loading models
(a subprocess each; the ranges themselves: the unit tier)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

OWN_SAMPLES = ROOT / "samples"


def _speechpipe(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "speechpipe", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


@pytest.mark.parametrize("argv", [
    ("translate", str(OWN_SAMPLES / "wav" / "es_gato.wav"), "--out", "o.wav",
     "--set", "asr.step_s=nan"),
    ("translate", str(OWN_SAMPLES / "wav" / "es_gato.wav"), "--out", "o.wav",
     "--set", "asr.step_s=inf"),
    ("eval", str(OWN_SAMPLES / "manifest.jsonl"), "--set", "asr.step_s=nan"),
    ("config", "--set", "limits.outgoing_capacity=0"),
    ("config", "--set", "limits.ping_interval_s=-1"),
    ("serve", "--port", "0", "--set", "limits.max_unread_bytes=-1"),
    ("serve", "--port", "0", "--set", "limits.max_message_bytes=0"),
])
def test_the_cli_refuses_them_with_exit_2_before_loading_models(
    argv: tuple[str, ...], tmp_path: Path
) -> None:
    result = _speechpipe(*argv, cwd=tmp_path)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "must be" in lines[0]
    assert not (tmp_path / "o.wav").exists()
