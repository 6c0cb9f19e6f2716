"""What a newcomer meets first (issue 21, item 16): git ignores the Quick start's output
(``git check-ignore``, a subprocess)."""

from __future__ import annotations

import subprocess

from tests.helpers import ROOT


def test_translated_wav_is_ignored_by_git() -> None:
    result = subprocess.run(["git", "check-ignore", "-q", "translated.wav"], cwd=ROOT)
    assert result.returncode == 0
