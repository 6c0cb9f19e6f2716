"""Bad input at the CLI, as a user meets it (a subprocess each): one clear line on stderr and a
non-zero exit, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from tests.helpers import OWN_SAMPLES, assert_one_line_error, speechpipe


def test_missing_file(tmp_path):
    result = speechpipe("translate", "nope.wav", "--out", "o.wav", tmp_path=tmp_path)
    assert_one_line_error(result, "nope.wav", "no such file")


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_an_input_that_is_no_regular_file_is_named(tmp_path, kind):
    """Issue 74 review: a FIFO or a device as the input was "no such file"."""
    if kind == "fifo":
        os.mkfifo(tmp_path / "in.wav")
        name = "in.wav"
    else:
        name = "/dev/zero"
    result = speechpipe("translate", name, "--out", "o.wav", tmp_path=tmp_path)
    assert_one_line_error(result, name, "not a regular file")


def test_garbage_file(tmp_path):
    (tmp_path / "garbage.wav").write_bytes(b"RIFF\x00\x00garbage" * 50)
    result = speechpipe("translate", "garbage.wav", "--out", "o.wav", tmp_path=tmp_path)
    assert_one_line_error(result, "garbage.wav", "not a readable audio file")


def test_empty_file(tmp_path):
    (tmp_path / "empty.wav").write_bytes(b"")
    result = speechpipe("translate", "empty.wav", "--out", "o.wav", tmp_path=tmp_path)
    assert_one_line_error(result, "empty.wav")


def test_zero_length_audio(tmp_path):
    sf.write(tmp_path / "zero.wav", np.zeros(0, np.int16), 16000)
    result = speechpipe("translate", "zero.wav", "--out", "o.wav", tmp_path=tmp_path)
    assert_one_line_error(result, "zero.wav", "no audio")


def test_bad_option_override(tmp_path):
    clip = OWN_SAMPLES / "wav" / "es_gato.wav"
    result = speechpipe("translate", str(clip), "--out", "o.wav", "--set", "asr.nope=1",
                        tmp_path=tmp_path)
    assert_one_line_error(result, "asr has no option 'nope'")


def test_missing_manifest(tmp_path):
    result = speechpipe("eval", "missing.jsonl", tmp_path=tmp_path)
    assert_one_line_error(result, "missing.jsonl")


def test_malformed_manifest(tmp_path):
    (tmp_path / "m.jsonl").write_text('{"file": "a.wav", "lang": "es"}\nnot json\n')
    result = speechpipe("eval", "m.jsonl", tmp_path=tmp_path)
    assert_one_line_error(result, "m.jsonl:2")


def test_serve_rejects_an_unknown_option_before_listening(tmp_path):
    result = speechpipe("serve", "--port", "0", "--set", "asr.no_such_option=1",
                        tmp_path=tmp_path)
    assert_one_line_error(result, "asr has no option 'no_such_option'")


# -- issue 10.8: a header that lies about the sample rate ----------------------------------

def test_input_rate_below_8_khz_is_refused_before_any_work(tmp_path):
    """A 32 KB WAV whose header says 1 Hz used to become 16,000 s of audio (3.4 GB RSS)."""
    noise = (np.random.default_rng(0).standard_normal(16_000) * 3000).astype(np.int16)
    sf.write(tmp_path / "one_hz.wav", noise, 1)
    assert (tmp_path / "one_hz.wav").stat().st_size < 40_000
    result = speechpipe("translate", "one_hz.wav", "--out", "o.wav", tmp_path=tmp_path)
    assert_one_line_error(result, "one_hz.wav", "sample rate 1 Hz", "8000 Hz")
    assert result.returncode == 2
    assert not (tmp_path / "o.wav").exists()
    sf.write(tmp_path / "rate_7999.wav", noise, 7_999)
    result = speechpipe("translate", "rate_7999.wav", "--out", "o.wav", tmp_path=tmp_path)
    assert_one_line_error(result, "sample rate 7999 Hz")


def test_float_file_with_nan_is_refused_before_the_models_load(tmp_path):
    audio = np.zeros(48_000, np.float32)
    audio[30_000] = np.nan
    sf.write(tmp_path / "nan.wav", audio, 48_000, subtype="FLOAT")
    result = speechpipe("translate", "nan.wav", "--out", "o.wav", tmp_path=tmp_path)
    assert_one_line_error(result, "nan.wav", "NaN")
    assert result.returncode == 2


# -- issue 10.9: --out and --trace are checked before the translation runs -----------------

@pytest.mark.parametrize(("out", "needle"), [
    ("o.txt", "'.txt' is not an audio format"),
    ("noext", "has no audio file extension"),
    ("folder", "is a folder"),
    ("folder.wav", "is a folder"),
    ("/dev/full", "is a device, not a regular file"),
    ("missing/o.wav", "output folder does not exist"),
])
def test_bad_output_path_fails_at_once(tmp_path, out, needle):
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder.wav").mkdir()
    clip = OWN_SAMPLES / "wav" / "es_gato.wav"
    result = speechpipe("translate", str(clip), "--out", out, tmp_path=tmp_path)
    assert_one_line_error(result, needle)
    assert result.returncode == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "folder.wav"]


def test_output_that_cannot_be_opened_fails_at_once(tmp_path):
    (tmp_path / "full.wav").symlink_to("/dev/full")  # right extension, a device that refuses
    clip = OWN_SAMPLES / "wav" / "es_gato.wav"
    result = speechpipe("translate", str(clip), "--out", "full.wav", tmp_path=tmp_path)
    assert_one_line_error(result, "full.wav", "is a symbolic link")  # never followed
    assert result.returncode == 2
    assert (tmp_path / "full.wav").is_symlink()


def test_bad_trace_path_fails_at_once(tmp_path):
    clip = OWN_SAMPLES / "wav" / "es_gato.wav"
    result = speechpipe("translate", str(clip), "--out", "o.wav", "--trace", "nope/t.jsonl",
                        tmp_path=tmp_path)
    assert_one_line_error(result, "nope", "output folder does not exist")
    assert not any(tmp_path.iterdir())


def test_bad_output_rate_fails_at_once(tmp_path):
    clip = OWN_SAMPLES / "wav" / "es_gato.wav"
    result = speechpipe("translate", str(clip), "--out", "o.wav", "--output-rate", "0",
                        tmp_path=tmp_path)
    assert_one_line_error(result, "output sample rate 0")
    assert not any(tmp_path.iterdir())


# -- issue 10.10: token lifetimes -----------------------------------------------------------

@pytest.mark.parametrize("ttl", ["nan", "inf", "-inf", "-5", "0", "1e30"])
def test_token_ttl_must_be_a_sane_number_of_seconds(tmp_path, ttl):
    result = subprocess.run(
        [sys.executable, "-m", "speechpipe", "token", f"--ttl={ttl}"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={**os.environ, "SPEECHPIPE_AUTH_SECRET": "s" * 40},
    )
    assert_one_line_error(result, "time to live")
    assert result.returncode == 2
    assert not result.stdout


def test_token_with_a_sane_ttl_is_issued(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "speechpipe", "token", "--ttl", "90"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={**os.environ, "SPEECHPIPE_AUTH_SECRET": "s" * 40},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(".") == 2  # a JWT: header.claims.signature
