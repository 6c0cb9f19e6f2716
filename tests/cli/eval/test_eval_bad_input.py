"""``speechpipe eval`` on bad manifests and paths (issue 21, item 13): one line, exit 2, and
before anything runs: no model loads and no clip is evaluated (stdout stays empty), so a bad
clip or an unwritable report is not found after the earlier clips took minutes. Real
processes, the project's own recordings."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import EVAL_GOOD_ROW, assert_one_line_error, eval_manifest, speechpipe


def _eval(tmp_path: Path, manifest: Path, *extra: str):
    result = speechpipe("eval", str(manifest), "--pace", "fast", *extra, tmp_path=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == "", "nothing ran before the error"
    return result


@pytest.mark.parametrize(("field", "value"), [
    ("file", 5), ("id", [1]), ("lang", 3), ("transcript", {"a": 1}), ("translation_en", 7),
])
def test_a_field_that_is_not_a_string(tmp_path: Path, field: str, value: object) -> None:
    manifest = eval_manifest(tmp_path, EVAL_GOOD_ROW, {**EVAL_GOOD_ROW, field: value})
    result = _eval(tmp_path, manifest)
    assert_one_line_error(result, "manifest.jsonl:2", f"'{field}' must be a string")


def test_deeply_nested_json(tmp_path: Path) -> None:
    deep = b'{"file": "es_gato.wav", "lang": "es", "x": ' + b"[" * 200_000 + b"]" * 200_000
    result = _eval(tmp_path, eval_manifest(tmp_path, EVAL_GOOD_ROW, deep + b"}"))
    assert_one_line_error(result, "manifest.jsonl:2", "nested too deeply")


def test_bad_utf8(tmp_path: Path) -> None:
    bad = b'{"file": "es_gato.wav", "lang": "es", "transcript": "caf\xe9"}'
    result = _eval(tmp_path, eval_manifest(tmp_path, EVAL_GOOD_ROW, bad))
    assert_one_line_error(result, "manifest.jsonl:2", "not UTF-8")


def test_an_unknown_language(tmp_path: Path) -> None:
    manifest = eval_manifest(tmp_path, EVAL_GOOD_ROW, {**EVAL_GOOD_ROW, "lang": "klingon"})
    result = _eval(tmp_path, manifest)
    assert_one_line_error(result, "manifest.jsonl:2", "unknown language 'klingon'")


def test_a_bad_clip_after_good_ones_is_found_before_any_runs(tmp_path: Path) -> None:
    manifest = eval_manifest(tmp_path, EVAL_GOOD_ROW, {**EVAL_GOOD_ROW, "file": "broken.wav"})
    (tmp_path / "broken.wav").write_bytes(b"RIFF\x00\x00garbage" * 50)
    result = _eval(tmp_path, manifest)
    assert_one_line_error(result, "manifest.jsonl:2", "broken.wav", "not a readable audio")


@pytest.mark.parametrize("report", ["/proc/report.json", "no/such/folder/report.json"])
def test_an_unwritable_report_fails_first(tmp_path: Path, report: str) -> None:
    result = _eval(tmp_path, eval_manifest(tmp_path, EVAL_GOOD_ROW), "--report", report)
    assert_one_line_error(result)


@pytest.mark.parametrize("limit", ["-1", "0"])
def test_a_limit_below_one(tmp_path: Path, limit: str) -> None:
    """``--limit -1`` silently dropped the last clip (``clips[:-1]``)."""
    manifest = eval_manifest(tmp_path, EVAL_GOOD_ROW, EVAL_GOOD_ROW)
    result = _eval(tmp_path, manifest, "--limit", limit)
    assert_one_line_error(result, "--limit must be 1 or more")
