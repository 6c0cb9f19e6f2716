"""Bad input at the CLI found by issue 21 (items 14 and 15): exit 2, one line on stderr, no
traceback, nothing written, and all of it before any model loads. Real processes, the
project's own recording."""

from __future__ import annotations

import pytest

from tests.helpers import OWN_SAMPLES, assert_one_line_error, speechpipe

CLIP = str(OWN_SAMPLES / "wav" / "es_gato.wav")


def test_an_unknown_voice_is_bad_input(tmp_path):
    result = speechpipe("translate", CLIP, "--out", "o.wav", "--voice", "nosuchvoice",
                        tmp_path=tmp_path)
    assert result.returncode == 2, result.stderr
    assert_one_line_error(result, "no Piper voice named 'nosuchvoice'", "en_US-joe-medium")
    assert not (tmp_path / "o.wav").exists()


def test_a_voice_of_another_language_is_bad_input(tmp_path, monkeypatch):
    result = speechpipe("translate", CLIP, "--out", "o.wav", "--voice", "en_US-joe-medium",
                        "--target-lang", "de", "--mt", "ct2:none", tmp_path=tmp_path)
    assert result.returncode == 2, result.stderr
    assert_one_line_error(result, "speaks en_US, not 'de'")


@pytest.mark.parametrize("lang", ["klingon", "xx", "e n"])
def test_an_unknown_target_language_says_so(tmp_path, lang):
    result = speechpipe("translate", CLIP, "--out", "o.wav", "--target-lang", lang,
                        tmp_path=tmp_path)
    assert result.returncode == 2, result.stderr
    assert_one_line_error(result, f"unknown target language {lang!r}")
    assert "text MT model" not in result.stderr
    assert not (tmp_path / "o.wav").exists()


def test_a_known_target_without_mt_model_still_says_what_is_missing(tmp_path):
    result = speechpipe("translate", CLIP, "--out", "o.wav", "--target-lang", "de",
                        tmp_path=tmp_path)
    assert result.returncode == 2, result.stderr
    assert_one_line_error(result, "'de' needs a text MT model")


@pytest.mark.parametrize(("flag", "path"), [
    ("--out", "/proc/o.wav"), ("--out", "/proc/self/o.wav"), ("--trace", "/proc/t.jsonl"),
])
def test_an_output_where_no_file_can_be_made(tmp_path, flag, path):
    """As root, ``os.access`` says /proc is writable; creating a file there fails."""
    extra = [] if flag == "--out" else ["--out", "o.wav"]
    result = speechpipe("translate", CLIP, *extra, flag, path, tmp_path=tmp_path)
    assert result.returncode == 2, result.stderr
    assert_one_line_error(result, "/proc")
    assert not (tmp_path / "o.wav").exists()
    assert not list(tmp_path.iterdir())
