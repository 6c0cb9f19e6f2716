"""``speechpipe eval --offline-reference`` (issue 24): the same Whisper weights on whole clips,
scored exactly like the streamed BLEU, cached so a repeated eval decodes nothing again; bad
options exit 2 with one line before any model loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from speechpipe.evaluation.evaluate import _aggregate, offline_scores, print_categories
from speechpipe.evaluation.offline import OfflineCache, cache_key
from speechpipe.evaluation.regret import regret
from speechpipe.evaluation.scores import corpus_bleu, normalize_text, sentence_bleu
from tests.helpers import (
    EVAL_GOOD_ROW,
    assert_one_line_error,
    eval_manifest,
    manifest_clip,
    speechpipe,
)

# --- pure parts ----------------------------------------------------------------------------


def test_the_cache_key_changes_with_each_input():
    base = ("a" * 64, "sha256:m", 5, "es", "translate")
    keys = {cache_key(*base),
            cache_key("b" * 64, *base[1:]), cache_key(base[0], "sha256:n", *base[2:]),
            cache_key(*base[:2], 1, *base[3:]), cache_key(*base[:3], "fr", base[4]),
            cache_key(*base[:4], "transcribe")}
    assert len(keys) == 6
    assert cache_key(*base) == cache_key(*base)


def test_the_cache_round_trip_and_a_corrupt_entry(tmp_path: Path):
    cache = OfflineCache(tmp_path / "c")
    assert cache.get("k") is None
    cache.put("k", "Hello there.", {"beam": 5})
    assert cache.get("k") == "Hello there."
    assert [p.name for p in (tmp_path / "c").iterdir()] == ["k.json"]  # no temp file left
    cache.path("k").write_text("{not json")
    assert cache.get("k") is None  # decoded again, not a crash


def test_an_unwritable_cache_keeps_the_result(tmp_path: Path):
    (tmp_path / "file").write_text("")
    OfflineCache(tmp_path / "file" / "c").put("k", "text", {})  # warns, does not raise


ROWS = [("a", "core", "the cat sleeps in the house", "the cat sleeps in a house",
         "the cat sleeps in the house"),
        ("b", "phone", "we went to the beach on sunday", "we go to beach",
         "we went to the beach on sunday")]


def _rows():
    clips, rows = [], []
    for clip_id, category, reference, streamed, offline in ROWS:
        clips.append({"id": clip_id, "category": category, "translation_en": reference})
        bleu = round(sentence_bleu(streamed, reference), 2)
        rows.append({"id": clip_id, "target_text": streamed, "bleu": bleu, "wer": None,
                     "duration_s": 2.0, "cpu_per_audio_s": 0.5, "rtf": 1.0,
                     "source_text": "", "words_in_non_speech": 0, "utterances_invented": 0,
                     "utterances_dropped": 0, "utterances_repeated": 0,
                     **offline_scores(offline, bleu, reference)})
    return clips, rows


def test_offline_bleu_is_scored_like_the_streamed_bleu_per_clip_category_and_total(capsys):
    clips, rows = _rows()
    assert rows[0]["offline_bleu"] == 100.0 and rows[0]["bleu_gap"] == rows[0]["bleu"] - 100.0
    aggregate = _aggregate(rows, clips, {}, 2.0, 4.0, 4.0)
    references = [c["translation_en"] for c in clips]
    streamed = corpus_bleu([r["target_text"] for r in rows], references)
    assert aggregate["offline_bleu"] == 100.0
    assert aggregate["bleu_gap"] == pytest.approx(streamed - 100.0, abs=0.01)
    phone = aggregate["by_category"]["phone"]
    assert phone["bleu_gap"] == pytest.approx(phone["bleu"] - phone["offline_bleu"], abs=0.01)
    assert phone["bleu_gap"] < -50
    print_categories(aggregate)
    out = capsys.readouterr().out
    assert "offBLEU" in out and "gap" in out and "repeated" in out
    assert f"{phone['bleu_gap']:.2f}" in out


def test_no_offline_figures_without_the_option():
    clips, rows = _rows()
    for row in rows:
        for key in ("offline_text", "offline_bleu", "bleu_gap"):
            del row[key]
    aggregate = _aggregate(rows, clips, {}, 2.0, 4.0, 4.0)
    assert "offline_bleu" not in aggregate and "bleu_gap" not in aggregate


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


# --- one short real clip, the real model, twice ----------------------------------------------

CLIP = "es_fisher_2251"  # 1.9 s of telephone Spanish


@pytest.mark.slow
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
