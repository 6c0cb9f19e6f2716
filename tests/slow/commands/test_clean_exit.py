"""Processes end cleanly (issue 10.1): worker threads joined and models released before exit.

``speechpipe translate`` used to abort after writing its output in about 1 run of 3-10
(SIGABRT, rc 134, "terminate called without an active exception"): a shared ASR worker thread
that was never joined held the last reference to the Whisper engine, so CTranslate2's
destructor ran on it during interpreter shutdown. Only repeated real runs show it, so these
are real subprocesses with the real models.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import soundfile as sf

from tests.helpers import OWN_SAMPLES


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)

RUNS_PER_INPUT = 15  # x 2 inputs = 30 consecutive runs


def translate(*args: str, cwd) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "speechpipe", "translate", *args],
        capture_output=True, text=True, timeout=300, cwd=cwd,
    )


def test_thirty_consecutive_translations_exit_zero(tmp_path):
    silence = tmp_path / "silence.wav"
    sf.write(silence, np.zeros(16_000 * 5, np.int16), 16_000)
    clip = OWN_SAMPLES / "wav" / "es_gato.wav"
    codes: list[tuple[str, int]] = []
    for i in range(RUNS_PER_INPUT):
        for name, source in (("clip", clip), ("silence", silence)):
            # out_*.wav: "silence.wav" in tmp_path would be the input itself, which translate
            # refuses (an output may not replace its input)
            result = translate(str(source), "--out", f"out_{name}.wav", "--pace", "fast",
                               cwd=tmp_path)
            codes.append((name, result.returncode))
            assert "terminate called" not in result.stderr, (i, name, result.stderr)
            assert result.returncode == 0, (i, name, result.returncode, result.stderr)
            assert "wrote" in result.stdout
    print(f"{len(codes)} runs, exit codes: {sorted({c for _, c in codes})}")


def _wait_for_line(stream, needle: str, timeout_s: float) -> list[str]:
    """Lines read from ``stream`` until one contains ``needle`` (fails after the timeout)."""
    lines: list[str] = []
    found = threading.Event()

    def read() -> None:
        for line in stream:
            lines.append(line)
            if needle in line:
                found.set()
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert found.wait(timeout_s), f"no {needle!r} within {timeout_s} s: {lines}"
    reader.join(timeout_s)
    return lines


def test_ctrl_c_mid_translation_exits_cleanly(tmp_path):
    """SIGINT while the replay runs (models loaded, ASR and TTS busy): exit 130 with one line,
    no abort, no traceback, no output file left behind."""
    clip = OWN_SAMPLES / "wav" / "es_hermano.wav"
    proc = subprocess.Popen(
        [sys.executable, "-m", "speechpipe", "-v", "translate", str(clip), "--out", "o.wav",
         "--pace", "realtime"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        # a runner started in the background ignores SIGINT, and a child inherits that:
        # the test is about the default disposition a user's Ctrl-C meets
        preexec_fn=_default_sigint,
    )
    try:
        assert proc.stderr is not None
        _wait_for_line(proc.stderr, "replaying", timeout_s=240)
        time.sleep(1.5)  # into the speech: decodes and syntheses under way
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode not in (134, -signal.SIGABRT), err
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err and "terminate called" not in err
    # -v (needed to see "replaying") logs progress at INFO, e.g. the session's "MT route"
    # line, which may come after "replaying": those are not part of the exit; nothing else
    # (no warning, no error) may be
    lines = [line for line in err.splitlines()
             if line.strip() and not re.match(r"\S+ \S+ INFO speechpipe[.\w]*: ", line)]
    assert lines == ["speechpipe: interrupted"], err
    # stdout: only what is printed at the start (the engines), no result of a run cut short
    assert out.splitlines() == ["translation: Whisper translate (neural, speech to English)",
                                "voice:       Piper neural voice en_US-joe-medium"], out
    assert not any(tmp_path.iterdir())  # no output, no temporary file


async def test_server_stop_joins_every_worker_thread_and_releases_the_models():
    """``serve``'s shutdown path: after ``stop`` no ASR/TTS worker thread is alive and the
    Whisper model is released (so nothing is left for interpreter shutdown to destroy)."""
    from speechpipe.server.serve import ServerApp

    def workers() -> set[threading.Thread]:
        # Thread objects, not names: the session-wide test pipeline's threads share the names.
        return {t for t in threading.enumerate()
                if t.is_alive() and t.name.startswith(("asr-batcher", "tts-"))}

    before = workers()  # the session-wide test pipeline's, if it was loaded already
    app = ServerApp("127.0.0.1", 0, webrtc=False)
    async with app.running():
        assert app.ready
        started = workers() - before
        assert any(t.name.startswith("asr-batcher") for t in started), started
    assert app.pipeline is not None
    assert app.pipeline.engine.model is None
    assert not app.pipeline.whisper.running_threads
    assert not any(t.is_alive() for t in started)
