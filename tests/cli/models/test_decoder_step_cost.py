"""``scripts/decoder_step_cost.py``: bad input exits non-zero with one line (a subprocess)."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import ROOT

SCRIPT = ROOT / "scripts" / "decoder_step_cost.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def test_an_unreadable_file_exits_with_one_line(tmp_path):
    bad = tmp_path / "not-audio.wav"
    bad.write_text("not audio")
    done = run("--audio", str(bad))
    assert done.returncode != 0
    assert len(done.stderr.strip().splitlines()) == 1
    assert "cannot read audio" in done.stderr
