"""``speechpipe bench room --join-storm``: a bad storm rate is one line and exit code 2 (a
subprocess)."""

from __future__ import annotations

import subprocess
import sys


def test_bad_storm_rate_exits_2_with_one_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "speechpipe", "bench", "room", "--join-storm",
                           "-5"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "--join-storm" in proc.stderr
