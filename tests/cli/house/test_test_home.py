"""The test run's own ``SPEECHPIPE_HOME`` (tests/conftest.py): a subprocess the tests start
writes in the same temporary home, never in the user's cache."""

from __future__ import annotations

from pathlib import Path

from speechpipe.models.home import speechpipe_home


def test_a_subprocess_the_tests_start_writes_in_the_same_home():
    """CLIs, servers and benches the tests start inherit the run's home (the environment),
    so what they build lands there too."""
    import subprocess
    import sys

    code = "from speechpipe.models.home import speechpipe_home; print(speechpipe_home())"
    result = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True,
                            timeout=60, check=True)
    assert Path(result.stdout.strip()) == speechpipe_home()
