"""``speechpipe serve --cluster`` as a user runs it (a subprocess): bad cluster flags fail with
one line, ``--cluster`` without Ray fails with one line, and Ray stays out of plain
``speechpipe serve``."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


def test_plain_serve_never_imports_ray():
    done = _run(
        "import sys\n"
        "from speechpipe.cli import build_parser\n"
        "from speechpipe.server.serve import ServerApp, serve_options\n"
        "args = build_parser().parse_args(['serve', '--capacity', '1'])\n"
        "serve_options(args)\n"
        "ServerApp('127.0.0.1', 0, load=serve_options(args)[2])\n"
        "print('ray' in sys.modules)\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_cluster_without_ray_fails_with_one_line():
    done = _run(
        "import sys\n"
        "sys.modules['ray'] = None  # as if not installed\n"
        "from speechpipe.cli import main\n"
        "sys.exit(main(['serve', '--capacity', '1', '--port', '0',\n"
        "               '--cluster', '127.0.0.1:6379', '--public-url', 'ws://a/ws']))\n"
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert lines == ["speechpipe: --cluster needs Ray: pip install 'speechpipe[cluster]'"]


@pytest.mark.parametrize("argv, message", [
    (["--cluster", "127.0.0.1:6379"], "--cluster needs --public-url"),
    (["--cluster", "nohostport", "--public-url", "ws://a/ws"], "--cluster wants HEAD:PORT"),
    (["--cluster", "h:1", "--public-url", "http://a/ws"], "must start with ws://"),
])
def test_bad_cluster_flags_fail_with_one_line(argv: list[str], message: str):
    done = subprocess.run([sys.executable, "-m", "speechpipe", "serve", "--capacity", "1",
                           "--port", "0", *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]
