"""``speechpipe bench cost``: the playlist and session offsets (pure), and one real run whose
figures add up (the CPU split, encoder input, tokens)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from speechpipe.bench.cost import CostInput, _offset, playlists
from tests.helpers import SHARED_SAMPLES


def test_sessions_never_replay_the_same_audio_at_the_same_time():
    clips = [np.full(16_000 * (k + 1), k + 1, np.int16) for k in range(3)]
    gap = np.zeros(8_000, np.int16)
    audio = np.concatenate([clips[0], gap, clips[1], gap, clips[2], gap])
    spans = ((0.0, 1.0), (1.5, 3.5), (4.0, 7.0))
    item = CostInput("p", "es", audio, spans)
    rotated = _offset(item, 1)
    assert len(rotated.audio) == len(audio)
    assert rotated.audio[0] == 2  # starts with the second clip
    for begin, end in rotated.spans:  # every clip is where its span says
        values = set(rotated.audio[int(begin * 16_000): int(end * 16_000)].tolist())
        assert len(values) == 1 and 0 not in values
    single = CostInput("f", "es", clips[0], ((0.0, 1.0),))
    delayed = _offset(single, 2)
    assert delayed.spans[0][0] == pytest.approx(0.74)
    assert not delayed.audio[: int(0.7 * 16_000)].any()


def test_playlists_are_per_language_with_gaps():
    manifest = SHARED_SAMPLES / "manifest.jsonl"
    if not manifest.is_file():
        pytest.skip("needs ../shared/samples")
    lists = playlists(manifest, ["conversational_x_to_en"], gap_s=0.8)
    assert [p.lang for p in lists] == ["es"]
    spans = lists[0].spans
    assert len(spans) == 10
    gaps = [b[0] - a[1] for a, b in zip(spans, spans[1:], strict=False)]
    assert gaps == pytest.approx([0.8] * 9, abs=1e-3)


@pytest.mark.slow
def test_a_real_run_prints_figures_that_add_up(tmp_path, capsys):
    from speechpipe.cli import main

    report = tmp_path / "cost.json"
    code = main(["bench", "cost", "--file", "samples/wav/es_gato.wav", "--source-lang", "es",
                 "--pace", "fast", "--report", str(report)])
    assert code == 0
    out = capsys.readouterr().out
    assert "es_gato.wav" in out and "CPU/s" in out
    row = json.loads(report.read_text())["rows"][0]
    parts = sum(row[k] for k in ("encoder_per_audio_s", "decoder_per_audio_s",
                                 "tts_per_audio_s", "rest_per_audio_s"))
    assert row["cpu_per_audio_s"] > 0 and row["encoder_per_audio_s"] > 0
    assert row["decoder_per_audio_s"] > 0 and row["tts_per_audio_s"] > 0
    assert parts == pytest.approx(row["cpu_per_audio_s"], abs=0.01)
    assert row["encoded_audio_per_audio_s"] >= 1.0  # every second is encoded at least once
    assert row["generated_tokens_per_audio_s"] > 0
    assert row["commit_lag_p95"] is None  # fast pace: no wall-clock lag to report


def test_eval_reports_each_category_apart(capsys):
    from speechpipe.evaluation.evaluate import _aggregate, print_categories

    def row(clip_id: str, text: str) -> dict:
        return {"id": clip_id, "duration_s": 2.0, "cpu_per_audio_s": 0.1, "rtf": 0.5,
                "target_text": text, "source_text": "hola", "wer": 0.0, "asr_text": text,
                "words_in_non_speech": 0, "utterances_invented": 0, "utterances_dropped": 0,
                "start_offset": 1.0, "end_offset": 1.5}
    clips = [{"id": "a", "category": "read", "translation_en": "the cat sleeps now",
              "transcript": "hola"},
             {"id": "b", "category": "phone", "translation_en": "where are you going",
              "transcript": "hola"}]
    rows = [row("a", "the cat sleeps now"), row("b", "nothing like it")]
    aggregate = _aggregate(rows, clips, {}, 0.4, 4.0, 2.0)
    categories = aggregate["by_category"]
    assert categories["read"]["bleu"] == 100.0 and categories["phone"]["bleu"] < 10
    assert categories["read"]["clips"] == 1
    print_categories(aggregate)
    printed = capsys.readouterr().out
    assert "read" in printed and "phone" in printed
