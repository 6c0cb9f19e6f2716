"""``bench room --client-nice``: a niceness out of range is one line and exit code 2 (a
subprocess)."""

from __future__ import annotations

import subprocess
import sys


def test_a_niceness_out_of_range_is_one_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "speechpipe", "bench", "room",
                           "--client-nice", "20"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "--client-nice 0-19" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
