"""What a new user meets after the Quick start (issue 47), on the real models: the same file
gives the same output at the fast pace, a seeded voice speaks the same way each time, and
SIGTERM mid-translation leaves no partial file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT

CLIP = str(ROOT / "samples" / "wav" / "es_gato.wav")


def speechpipe(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-P", "-m", "speechpipe", *args],
                          capture_output=True, text=True, timeout=300, cwd=cwd)


def test_sigterm_mid_translation_leaves_no_partial_file(tmp_path: Path) -> None:
    """``timeout`` and container stops send SIGTERM: the run ends as Ctrl-C ends it (exit
    143, one line) and the temporary ``.o.wav.*.part`` is removed."""
    import signal
    import threading
    import time

    clip = Path(CLIP).with_name("es_hermano.wav")
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "speechpipe", "-v", "translate", str(clip), "--out",
         "o.wav", "--pace", "realtime"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    lines: list[str] = []
    replaying = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "replaying" in line:
                replaying.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert replaying.wait(240), lines
        time.sleep(1.0)  # into the speech: the .part file is being written
        assert any(p.name.endswith(".part") for p in tmp_path.iterdir())
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    assert proc.returncode == 128 + signal.SIGTERM, (proc.returncode, lines)
    assert "Traceback" not in "".join(lines)
    assert lines[-1].strip() == "speechpipe: terminated", lines
    assert not any(tmp_path.iterdir()), list(tmp_path.iterdir())  # no output, no .part


def test_a_seeded_voice_speaks_the_same_way_each_time() -> None:
    """Piper draws random noise (phoneme lengths, timbre): two loads of the voice, each
    asked the same things in the same order, give the same samples (piper.seed)."""
    from speechpipe.voices.piper_engine import PiperOptions, PiperSynthesizer
    from speechpipe.voices.registry import resolve_voice

    voice = resolve_voice(None, "en", ())
    runs = []
    for _ in range(2):
        synthesizer = PiperSynthesizer(voice, PiperOptions(seed=3))
        runs.append([synthesizer.synthesize("My brother works in a hospital.").tobytes()
                     for _ in range(2)])
    assert runs[0] == runs[1]
    assert runs[0][0] != runs[0][1]  # still noise: the second call draws new values


def test_the_same_file_gives_the_same_output_at_fast_pace(tmp_path: Path) -> None:
    """translate's default (--pace fast): the decode schedule follows the audio, not the
    wall clock, and the voice is seeded, so two runs write the same bytes and summary."""
    runs = []
    for name in ("one.wav", "two.wav"):
        result = speechpipe("translate", str(Path(CLIP).with_name("es_cafe.wav")), "--out",
                            name, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        runs.append(([line for line in result.stdout.splitlines()
                      if not line.startswith(("StartOffset", "audio:", "wrote"))],
                     (tmp_path / name).read_bytes()))
    assert runs[0][0] == runs[1][0]
    assert runs[0][1] == runs[1][1]
