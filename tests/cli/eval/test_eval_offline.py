"""``speechpipe eval --offline-reference``: bad options exit 2 with one line before any model
loads (a subprocess)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import (
    EVAL_GOOD_ROW,
    assert_one_line_error,
    eval_manifest,
    speechpipe,
)

# --- bad input: exit 2, one line, nothing ran -----------------------------------------------


@pytest.mark.parametrize(("extra", "needle"), [
    (("--offline-reference", "--offline-beam", "0"), "--offline-beam must be a whole number"),
    (("--offline-reference", "--offline-beam", "five"), "not 'five'"),
    (("--offline-reference", "--offline-beam", "21"), "from 1 to 20"),
    (("--offline-beam", "3"), "--offline-beam needs --offline-reference"),
    (("--offline-reference", "--target-lang", "de", "--mt", "ct2:x"), "x-to-English"),
])
def test_bad_offline_options(tmp_path: Path, extra: tuple[str, ...], needle: str):
    manifest = eval_manifest(tmp_path, EVAL_GOOD_ROW)
    result = speechpipe("eval", str(manifest), "--pace", "fast", *extra, tmp_path=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == "", "nothing ran before the error"
    assert_one_line_error(result, needle)
