"""``speechpipe bench cost``: the playlist and session offsets, the summary of repeated runs
and the steal reading (pure; a real run: the slow tier)."""

from __future__ import annotations

import numpy as np
import pytest

from speechpipe.bench.cost import CostInput, _offset, playlists, repeat_summary, steal_seconds
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


def test_repeated_runs_are_summarized_by_median_range_and_ratio():
    def row(name, variant, cpu, lag, sessions=1):
        return {"input": name, "sessions": sessions, "variant": variant,
                "cpu_per_audio_s": cpu, "commit_lag_p95": lag, "end_offset_p50": None}
    rows = [row("mono", "base", 0.30, 0.4), row("mono", "v", 0.27, 0.5),
            row("mono", "base", 0.36, 0.6), row("mono", "v", 0.28, 0.3),
            row("mono", "base", 0.32, 0.5), row("mono", "v", 0.40, 0.4),
            row("mono", "base", 0.50, None, sessions=8)]
    base, variant, eight = repeat_summary(rows)
    assert (base["variant"], base["runs"]) == ("base", 3)
    assert base["cpu_per_audio_s"] == {"median": 0.32, "min": 0.30, "max": 0.36}
    assert base["cpu_vs_first"] == 1.0
    assert variant["cpu_per_audio_s"]["median"] == 0.28
    assert variant["cpu_vs_first"] == pytest.approx(0.28 / 0.32, abs=1e-3)
    assert base["end_offset_p50"] is None  # no clip offsets: nothing to summarize
    assert eight["cpu_vs_first"] == 1.0 and eight["commit_lag_p95"] is None  # own baseline


def test_steal_is_read_from_the_cpu_line_of_proc_stat():
    import os

    tick = os.sysconf("SC_CLK_TCK")
    line = f"cpu  4705 356 584 3699 23 23 0 {3 * tick} 0 0"
    assert steal_seconds(line) == pytest.approx(3.0)
    assert steal_seconds("intr 1 2 3") is None
    assert steal_seconds("cpu 1 2") is None  # too short: no steal field
    live = steal_seconds()
    assert live is None or live >= 0


def test_a_repeat_count_below_one_is_refused_with_one_line(capsys):
    from speechpipe.cli import main

    code = main(["bench", "cost", "--file", "samples/wav/es_gato.wav", "--repeat", "0"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["speechpipe: error: --repeat 0: give a count >= 1"]


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
