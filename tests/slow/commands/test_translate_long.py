"""``speechpipe translate`` on long inputs: bounded memory (issue 10.8) and a progress bar
that shows tenths on a terminal and stays out of logs (issue 16.5)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from tests.helpers import OWN_SAMPLES


def _synth_long_input(path: Path, seconds: float) -> None:
    """48 kHz stereo float: noise with a real spoken sentence every 30 s."""
    rate = 48_000
    speech, speech_rate = sf.read(OWN_SAMPLES / "wav" / "es_gato.wav", dtype="float32")
    speech = soxr.resample(speech, speech_rate, rate)
    rng = np.random.default_rng(0)
    with sf.SoundFile(path, "w", rate, 2, "FLOAT") as fh:
        t = 0.0
        while t < seconds:
            n = min(10.0, seconds - t)
            block = (rng.standard_normal(int(rate * n)) * 0.002).astype(np.float32)
            if int(t) % 30 == 0 and n >= 5:
                block[: len(speech)] += speech
            fh.write(np.stack([block, block * 0.9], axis=1))
            t += n


def _run_measured(args: list[str], cwd: Path) -> tuple[int, str, str, float]:
    """Run ``speechpipe`` with stdout/stderr to files (not a terminal): (exit code, stdout,
    stderr, peak RSS in MB of that process alone)."""
    with open(cwd / "stdout.txt", "w") as out, open(cwd / "stderr.txt", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "speechpipe", *args],
                                stdout=out, stderr=err, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return (proc.returncode, (cwd / "stdout.txt").read_text(), (cwd / "stderr.txt").read_text(),
            usage.ru_maxrss / 1024)


def test_long_input_streams_in_bounded_memory_and_keeps_logs_quiet(tmp_path):
    """A 150 s input costs no more memory than a 35 s one (holding it whole costs >80 MB
    more: 58 MB of float32 stereo plus its mono mix), and with stderr going to a file there
    is no progress bar at all: the summary lines on stdout say how it went."""
    short, long = tmp_path / "short.wav", tmp_path / "long.wav"
    _synth_long_input(short, 35.0)
    _synth_long_input(long, 150.0)
    figures = {}
    # one sentence is spoken every 30 s (at 0, 30, ...): 2 in 35 s, 5 in 150 s
    for name, source, sentences in (("short", short, 2), ("long", long, 5)):
        rc, out, err, rss = _run_measured(
            ["translate", str(source), "--out", f"{name}_out.wav", "--pace", "fast"], tmp_path)
        assert rc == 0, err
        assert err == "", err  # no bar, no refreshes: nothing on a non-terminal stderr
        # language (and, when the detection is unsure, a hint under it), one line per
        # utterance (its time, then source -> translation), the offsets, the audio figures,
        # wrote
        # (after the engines, printed at the start)
        lines = [line for line in out.splitlines() if not line.lstrip().startswith("unsure")]
        assert lines[:2] == ["translation: Whisper translate (neural, speech to English)",
                             "voice:       Piper neural voice en_US-joe-medium"], out
        lines = lines[2:]
        assert len(lines) == 4 + sentences and lines[-1] == f"wrote {name}_out.wav", out
        assert lines[0].startswith("language:"), out  # the summary names the language
        assert all(re.match(r"\d+:\d\d\.\d  \S.*  ->  ", line)
                   for line in lines[1:1 + sentences]), out
        assert lines[-3].startswith("StartOffset:") and lines[-2].startswith("audio:"), out
        info = sf.info(tmp_path / f"{name}_out.wav")
        assert info.duration >= sf.info(source).duration
        figures[name] = rss
    print(f"peak RSS: 35 s input {figures['short']:.0f} MB, "
          f"150 s input {figures['long']:.0f} MB")
    assert figures["long"] < figures["short"] + 40


def test_progress_bar_on_a_terminal_shows_tenths(tmp_path):
    """stderr on a pseudo-terminal: the bar appears, its counts are in tenths of a second."""
    _synth_long_input(tmp_path / "in.wav", 31.0)
    leader, follower = pty.openpty()
    # a terminal of 0 columns (a fresh pty's size) gets no bar from tqdm at all
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "speechpipe", "translate", "in.wav", "--out", "o.wav",
         "--pace", "fast"],
        stdout=subprocess.DEVNULL, stderr=follower, cwd=tmp_path,
    )
    os.close(follower)
    shown = b""
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1.0)
            if ready:
                try:
                    data = os.read(leader, 4096)
                except OSError:  # the child closed the terminal
                    break
                if not data:
                    break
                shown += data
            elif proc.poll() is not None:
                break
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    assert proc.returncode == 0
    text = shown.decode("utf-8", "replace")
    counts = re.findall(r"(\d+(?:\.\d+)?)/31\.0\b", text)
    assert len(counts) >= 2, text  # drawn, then refreshed as the replay went on
    print(f"bar counts shown: {counts}")
    assert all(re.fullmatch(r"\d+\.\d", c) for c in counts), counts
    assert not re.search(r"\d\.\d{3,}", text), text
