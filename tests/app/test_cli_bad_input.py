"""Bad input at the CLI: one clear line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from tests.helpers import OWN_SAMPLES


def speechpipe(*args: str, tmp_path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "speechpipe", *args],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )


def assert_one_line_error(result, *needles: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_missing_file(tmp_path):
    result = speechpipe("translate", "nope.wav", "--out", "o.wav", tmp_path=tmp_path)
    assert_one_line_error(result, "nope.wav", "no such file")


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


@pytest.mark.slow
def test_unknown_language_code(tmp_path):
    clip = OWN_SAMPLES / "wav" / "es_gato.wav"
    result = speechpipe("translate", str(clip), "--out", "o.wav", "--source-lang", "xx",
                        tmp_path=tmp_path)
    assert_one_line_error(result, "unknown source language 'xx'")
    assert not (tmp_path / "o.wav").exists()


@pytest.mark.slow
def test_no_voice_for_the_target_language(tmp_path):
    clip = OWN_SAMPLES / "wav" / "es_gato.wav"
    result = speechpipe("translate", str(clip), "--out", "o.wav", "--target-lang", "de",
                        "--mt", "whisper", tmp_path=tmp_path)
    assert_one_line_error(result, "'de'")
    assert not (tmp_path / "o.wav").exists()


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


def test_serve_applies_set_overrides_and_load_flags():
    from speechpipe.cli import build_parser
    from speechpipe.server.serve import serve_options

    args = build_parser().parse_args([
        "serve", "--set", "asr.step_s=1.5", "--set", "batching.group_min_queue=2",
        "--no-batching", "--capacity", "3",
    ])
    options, _, load = serve_options(args)
    assert options.asr.step_s == 1.5
    assert options.batching.group_min_queue == 2
    assert options.batching.enabled is False
    assert load.admission.capacity == 3


def test_serve_default_admission_options_are_numbers():
    """Regression: the --max-queue default was the slots descriptor, not 16, so the first
    session that had to wait crashed its handler instead of being queued."""
    from speechpipe.cli import build_parser
    from speechpipe.server.admission import AdmissionOptions
    from speechpipe.server.serve import serve_options

    _, _, load = serve_options(build_parser().parse_args(["serve"]))
    assert load.admission.max_queue == AdmissionOptions().max_queue == 16
    assert load.admission.max_wait_s == AdmissionOptions().max_wait_s
