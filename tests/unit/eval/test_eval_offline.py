"""``speechpipe eval --offline-reference`` (issue 24): the same Whisper weights on whole clips,
scored exactly like the streamed BLEU, cached so a repeated eval decodes nothing again (a
scripted decoder here; the real one: the slow tier; bad options: the cli tier)."""

from __future__ import annotations

from pathlib import Path

import pytest

from speechpipe.evaluation.evaluate import _aggregate, offline_scores, print_categories
from speechpipe.evaluation.offline import OfflineCache, cache_key
from speechpipe.evaluation.scores import corpus_bleu, sentence_bleu

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
