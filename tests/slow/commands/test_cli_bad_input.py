"""Bad input the CLI finds only with the real models at hand (a language no voice speaks, an
unknown language code, a write that fails mid-run): one clear line on stderr and a non-zero
exit, never a traceback."""

from __future__ import annotations

import shutil
import subprocess
import sys

from tests.helpers import OWN_SAMPLES, assert_one_line_error, speechpipe


def test_unknown_language_code(tmp_path):
    clip = OWN_SAMPLES / "wav" / "es_gato.wav"
    result = speechpipe("translate", str(clip), "--out", "o.wav", "--source-lang", "xx",
                        tmp_path=tmp_path)
    assert_one_line_error(result, "unknown source language 'xx'")
    assert not (tmp_path / "o.wav").exists()


def test_no_voice_for_the_target_language(tmp_path):
    clip = OWN_SAMPLES / "wav" / "es_gato.wav"
    result = speechpipe("translate", str(clip), "--out", "o.wav", "--target-lang", "de",
                        "--mt", "whisper", tmp_path=tmp_path)
    assert_one_line_error(result, "'de'")
    assert not (tmp_path / "o.wav").exists()


def test_write_failure_during_the_run_is_one_line(tmp_path):
    """A failure only the write can show (the disk fills up; here a file size limit, which
    Python turns into EFBIG): one line, a non-zero exit, no partial file."""
    import resource

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (60_000, 60_000))

    clip = OWN_SAMPLES / "wav" / "es_gato.wav"  # ~300 KB of output at 22.05 kHz
    argv = [sys.executable, "-m", "speechpipe", "translate", str(clip), "--out", "o.wav",
            "--pace", "fast"]
    # the same run once without the limit: the model and the kept-token sets it caches in
    # the run's SPEECHPIPE_HOME are written then, not under the limit (where a cache write
    # fails with a warning of its own), whichever tests of the run came before
    warm = tmp_path / "warm"
    warm.mkdir()
    subprocess.run(argv, capture_output=True, timeout=600, cwd=warm, check=True)
    shutil.rmtree(warm)
    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=600, cwd=tmp_path,
        preexec_fn=limit_file_size,
    )
    assert_one_line_error(result, "o.wav", "writing the translated speech failed")
    assert result.returncode == 1
    assert not any(tmp_path.iterdir())  # neither o.wav nor its temporary file
