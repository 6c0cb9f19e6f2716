"""``speechpipe eval --offline-reference`` on a real clip with the real Whisper: scored and
cached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from speechpipe.evaluation.regret import regret
from speechpipe.evaluation.scores import normalize_text, sentence_bleu
from tests.helpers import (
    manifest_clip,
)

# --- one short real clip, the real model, twice ----------------------------------------------

CLIP = "es_fisher_2251"  # 1.9 s of telephone Spanish


def test_offline_reference_on_a_real_clip_is_scored_and_cached(tmp_path: Path):
    path, entry = manifest_clip(CLIP)
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text(json.dumps({**entry, "file": str(path)}) + "\n")
    # a home of its own (an empty offline cache) with the already assembled weights in it
    from speechpipe.models.whisper.weights import resolve_whisper_model

    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    (home / "models" / "whisper-base").symlink_to(resolve_whisper_model("whisper-base"))
    env = {**os.environ, "SPEECHPIPE_HOME": str(home)}

    def run(report: str) -> dict:
        result = subprocess.run(
            [sys.executable, "-m", "speechpipe", "eval", str(manifest), "--pace", "fast",
             "--offline-reference", "--report", report],
            capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
        assert result.returncode == 0, result.stderr[-2000:]
        assert "offline reference (whole clips, beam 5): BLEU" in result.stdout
        # not a terminal (a log, a pipe): no progress bars written into it
        assert "eval:" not in result.stderr and "offline reference:" not in result.stderr
        # a single eval names its machine and command like a comparison (figures from
        # different CPU kinds differ 2x: docs/benchmarks.md)
        from speechpipe.machine import describe_cpu

        lines = result.stdout.splitlines()
        assert lines[0].startswith("command: speechpipe eval ")
        assert lines[1].startswith(f"machine: {describe_cpu()}; load average at the end ")
        written = json.loads((tmp_path / report).read_text())
        assert written["settings"]["machine"] == describe_cpu()
        # each clip's subtitles beside the report, read back by a real WebVTT parser
        import webvtt

        folder = tmp_path / f"{Path(report).stem}-subtitles"
        for side, text in (("target", "target_text"), ("source", "source_text")):
            cues = webvtt.read(str(folder / f"{CLIP}.{side}.vtt"))
            assert " ".join(c.text for c in cues).split() == written["clips"][0][text].split()
        return written

    first = run("first.json")
    assert first["offline_reference"]["decoded"] == 2  # the translation and the captions
    assert first["offline_reference"]["cached"] == 0
    row = first["clips"][0]
    assert row["offline_text"].strip(), "the offline decode said something"
    assert row["offline_bleu"] == round(sentence_bleu(row["offline_text"],
                                                      entry["translation_en"]), 2)
    assert first["aggregate"]["offline_bleu"] is not None
    assert first["aggregate"]["bleu_gap"] == pytest.approx(
        first["aggregate"]["bleu"] - first["aggregate"]["offline_bleu"], abs=0.01)
    committed = regret(row["target_text"], row["offline_text"])
    assert row["regret_target"] == (None if committed is None else round(committed, 4))
    assert "regret_source" in row and "regret_target" in first["aggregate"]
    # hindsight regret: the loaded engine's own final decode of the utterance, nothing forced
    assert row["hindsight_target_text"].strip() and row["hindsight_source_text"].strip()
    assert row["hindsight_committed_words_target"] == len(
        normalize_text(row["target_text"]).split())
    assert 0.0 <= row["hindsight_regret_target"] <= 1.0
    assert "hindsight_regret_target" in first["aggregate"]
    # the yardstick's own noise: its decodes with silence around the utterance, 3 of them
    assert row["hindsight_noise_committed_words_target"] > 0
    assert 0.0 <= row["hindsight_noise_regret_target"] <= 1.0
    assert "hindsight_noise_regret_target" in first["aggregate"]
    entries = sorted((home / "eval-offline").glob("*.json"),
                     key=lambda p: json.loads(p.read_text())["task"], reverse=True)
    assert len(entries) == 2  # one utterance: no span decodes
    stored = json.loads(entries[0].read_text())
    assert stored["text"] == row["offline_text"] and stored["beam"] == 5
    assert stored["language"] == "es" and stored["task"] == "translate"
    assert json.loads(entries[1].read_text())["task"] == "transcribe"
    before = entries[0].stat()

    second = run("second.json")
    assert second["offline_reference"]["decoded"] == 0, "the second run decoded again"
    assert second["offline_reference"]["cached"] == 2
    assert second["clips"][0]["offline_text"] == row["offline_text"]
    after = entries[0].stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
