"""A node whose Ray head cannot be reached: ``speechpipe serve --cluster`` fails with one
line (real Ray)."""

from __future__ import annotations

import subprocess
import sys


def test_an_unreachable_head_fails_with_one_line():
    import socket

    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = subprocess.run([sys.executable, "-m", "speechpipe", "cluster", "status",
                           "--cluster", f"127.0.0.1:{port}"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        f"speechpipe: cannot reach the Ray head at 127.0.0.1:{port}: ConnectionRefusedError"]
