"""Every option has a bound where it enters (issue 74): the CLI refuses a value out of range
in one short line with exit 2 before any model loads, by ``--set``, the shorthand flags and
``--config`` alike (a subprocess each; the bounds themselves: the unit tier)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from speechpipe.errors import echoed
from tests.helpers import ROOT

CLIP = str(ROOT / "samples" / "wav" / "es_gato.wav")
HUGE = "9" * 100_000  # one argv string may hold 128 KiB


def _short(value: object) -> str:
    return echoed(value, 40)


def _echoes_little(message: str) -> bool:
    """One line that repeats no more than ~80 characters of a value (the list of a group's
    options it may name is not an echo)."""
    longest_run = max((len(m.group()) for m in re.finditer(r"(.)\1*", message)), default=0)
    return "\n" not in message and longest_run < 100 and len(message) < 2000


def _speechpipe(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "speechpipe", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


@pytest.mark.parametrize("argv", [
    ("translate", CLIP, "--out", "o.wav", "--set", "asr.beam_size=100000"),
    ("translate", CLIP, "--out", "o.wav", "--set", "pipeline.asr_threads=" + "9" * 20),
    ("translate", CLIP, "--out", "o.wav", "--asr-model", "m" * 100_000),
    ("translate", CLIP, "--out", "o.wav", "--set", "piper.length_scale=1e308"),
    ("translate", CLIP, "--out", "o.wav", "--set", "asr.step_s=" + "1" * 5000),
    ("translate", CLIP, "--out", "o.wav", "--config", "nested.toml"),
    ("config", "--set", "asr.beam_size=" + HUGE),
    ("serve", "--port", "0", "--set", "quotas.client_ip_header=" + "h" * 100_000),
], ids=lambda argv: _short(" ".join(argv)))
def test_the_cli_refuses_them_in_one_short_line_with_exit_2_before_any_model(
    argv: tuple[str, ...], tmp_path: Path
) -> None:
    (tmp_path / "nested.toml").write_text("[pipeline]\nasr_model = " + "[" * 3000
                                          + "]" * 3000 + "\n")
    result = _speechpipe(*argv, cwd=tmp_path)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert _echoes_little(lines[0]), lines[0][:3000]
    assert not (tmp_path / "o.wav").exists()
