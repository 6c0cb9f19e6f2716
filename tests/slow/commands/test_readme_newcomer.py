"""What a newcomer meets first (issue 21, item 16): ``translate`` prints the detected
language and traces it (the real models)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from speechpipe.evaluation.trace import (
    source_language_confidence,
)
from tests.helpers import OWN_SAMPLES


def test_translate_prints_the_detected_language_and_traces_it(tmp_path: Path) -> None:
    clip = OWN_SAMPLES / "wav" / "es_gato.wav"
    result = subprocess.run(
        [sys.executable, "-m", "speechpipe", "translate", str(clip), "--out", "o.wav",
         "--trace", "t.jsonl", "--pace", "fast"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    shown = re.search(r"^language:\s+(\S+) \(detected, confidence (\d\.\d\d)\)$",
                      result.stdout, re.M)
    assert shown is not None, result.stdout
    records = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    traced = source_language_confidence(records)
    language, confidence = next(iter(traced.items()))
    assert shown.group(1) == language, (shown.group(0), traced)
    assert confidence is not None and f"{confidence:.2f}" == shown.group(2)
    # an unsure detection says what to do about it
    assert (confidence < 0.5) == ("pass --source-lang" in result.stdout), result.stdout
