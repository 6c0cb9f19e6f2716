"""``speechpipe translate --subtitles/--source-subtitles``: subtitle paths refused before
any audio is processed (a subprocess)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import OWN_SAMPLES


def speechpipe(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "speechpipe", *args], capture_output=True,
                          text=True, timeout=600, cwd=cwd)


@pytest.mark.parametrize(("flags", "needle"), [
    (("--subtitles", "out.txt"), "must end in .vtt (WebVTT) or .srt"),
    (("--source-subtitles", "missing/out.vtt"), "output folder does not exist"),
    (("--subtitles", "a.vtt", "--source-subtitles", "a.vtt"), "name the same file"),
])
def test_a_bad_subtitle_path_is_refused_before_any_audio(
    tmp_path: Path, flags: tuple[str, ...], needle: str,
) -> None:
    clip = OWN_SAMPLES / "wav" / "es_gato.wav"
    result = speechpipe("translate", str(clip), "--out", "out.wav", *flags, cwd=tmp_path)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert not any(tmp_path.iterdir())  # nothing was written: no audio was processed
