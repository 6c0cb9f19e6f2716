"""``speechpipe bench room``'s bad input, as a user runs it (a subprocess): exit 2 with one
line."""

from __future__ import annotations

import subprocess
import sys


def test_bad_listener_count_exits_2_with_one_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "speechpipe", "bench", "room", "--listeners",
                           "0"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "--listeners" in proc.stderr
