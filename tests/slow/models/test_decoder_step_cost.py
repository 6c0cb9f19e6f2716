"""``scripts/decoder_step_cost.py`` on a project sample with the real embedded Whisper: one row
per (beam, items) shape and window, each a real ``generate`` of the asked steps."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import ROOT

SCRIPT = ROOT / "scripts" / "decoder_step_cost.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def test_it_prints_a_step_cost_for_every_shape_and_window():
    done = run("--audio", str(ROOT / "samples/wav/de_wetter.wav"), "--windows", "1,2",
               "--tokens", "3")
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()
            if line.split() and line.split()[0].isdigit()]
    assert [(r[0], r[1], r[2]) for r in rows] == [
        (w, str(b), str(i)) for w in ("1", "2")
        for b, i in ((1, 1), (5, 1), (10, 1), (1, 5), (1, 10), (5, 2), (2, 5))]
    assert all(int(r[3]) == int(r[1]) * int(r[2]) for r in rows)  # hypotheses
    assert all(float(r[4]) > 0 and float(r[5]) > 0 for r in rows)  # call ms, ms per step


def test_a_restricted_vocabulary_steps_too():
    done = run("--audio", str(ROOT / "samples/wav/de_wetter.wav"), "--windows", "1",
               "--tokens", "3", "--vocabulary-words", "1000")
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()
            if line.split() and line.split()[0].isdigit()]
    assert len(rows) == 7 and all(float(r[5]) > 0 for r in rows)


def test_in_place_steps_are_timed_beside_ctranslate2s():
    done = run("--audio", str(ROOT / "samples/wav/de_wetter.wav"), "--windows", "1",
               "--tokens", "3", "--vocabulary-words", "1000", "--inplace")
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()
            if line.split() and line.split()[0].isdigit()]
    assert len(rows) == 7 and all(len(r) == 8 for r in rows)
    assert all(float(r[6]) > 0 and float(r[7]) > 0 for r in rows)  # ms per step, ratio
    alone = run("--inplace")
    assert alone.returncode != 0 and "needs --vocabulary-words" in alone.stderr
