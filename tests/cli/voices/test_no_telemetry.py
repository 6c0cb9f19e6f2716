"""onnxruntime's telemetry file (issue 21, item 11): loading a voice in a fresh home leaves no
``~/.cache/Microsoft/DeveloperTools/.onnxruntime/onnxruntime.db``. A real process loads the
real voice; the variable is removed from its environment first (this test process already
imported speechpipe, which set it).

onnxruntime also turns its telemetry off by itself when it sees a CI service's variable (``CI``,
``GITHUB_ACTIONS``, ``TF_BUILD``, ... measured: any of them leaves no file), so the child's
environment drops those too: otherwise under CI the first test would pass whatever speechpipe
did and the control below would fail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

LOAD_A_VOICE = """
import speechpipe
from speechpipe.voices import PiperSynthesizer, resolve_voice
voice = PiperSynthesizer(resolve_voice(None, "en"))
assert voice.synthesize("Hello.").size > 0
print("spoke")
"""


# The variables onnxruntime 1.32 checks to detect a CI service (strings in libonnxruntime),
# and the generic ``CI`` most services set.
CI_MARKERS = ("CI", "TF_BUILD", "GITHUB_ACTIONS", "GITLAB_CI", "CIRCLECI", "TRAVIS",
              "JENKINS_URL", "CODEBUILD_BUILD_ID", "BUILDKITE", "TEAMCITY_VERSION", "APPVEYOR",
              "BITBUCKET_BUILD_NUMBER")


def _run(code: str, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("ORT_DISABLE_TELEMETRY", "XDG_CACHE_HOME", *CI_MARKERS)}
    clean.update(HOME=str(home), SPEECHPIPE_HOME=str(home / "speechpipe"), **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=clean)


def _written(home: Path) -> list[Path]:
    return sorted(p for p in (home / ".cache" / "Microsoft").rglob("*") if p.is_file())


def test_loading_a_voice_writes_no_onnxruntime_telemetry(tmp_path: Path) -> None:
    pytest.importorskip("piper")
    result = _run(LOAD_A_VOICE, tmp_path)
    assert result.returncode == 0 and "spoke" in result.stdout, result.stderr
    assert _written(tmp_path) == []


def test_the_check_would_see_the_file(tmp_path: Path) -> None:
    """The control: a user who opts in (ORT_DISABLE_TELEMETRY=0) gets the file, so the test
    above looks in the right place."""
    pytest.importorskip("piper")
    result = _run(LOAD_A_VOICE, tmp_path, ORT_DISABLE_TELEMETRY="0")
    assert result.returncode == 0, result.stderr
    assert any(p.name == "onnxruntime.db" for p in _written(tmp_path)), _written(tmp_path)
