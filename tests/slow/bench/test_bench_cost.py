"""``speechpipe bench cost``: one real run, repeated, whose figures add up (the CPU split,
encoder input, tokens) and are summarized."""

from __future__ import annotations

import json

import pytest


def test_a_real_run_prints_figures_that_add_up(tmp_path, capsys):
    from speechpipe.cli import main

    report = tmp_path / "cost.json"
    code = main(["bench", "cost", "--file", "samples/wav/es_gato.wav", "--source-lang", "es",
                 "--pace", "fast", "--repeat", "2", "--report", str(report)])
    assert code == 0
    out = capsys.readouterr().out
    assert "es_gato.wav" in out and "CPU/s" in out
    assert "over 2 interleaved runs:" in out
    figures = json.loads(report.read_text())
    (summary,) = figures["summary"]
    assert summary["runs"] == 2 and summary["cpu_vs_first"] == 1.0
    cpus = [r["cpu_per_audio_s"] for r in figures["rows"]]
    assert summary["cpu_per_audio_s"]["min"] == min(cpus)
    assert summary["cpu_per_audio_s"]["max"] == max(cpus)
    row = figures["rows"][0]
    assert row["steal_share"] is not None and row["steal_share"] >= 0  # Linux: /proc/stat
    parts = sum(row[k] for k in ("encoder_per_audio_s", "decoder_per_audio_s",
                                 "tts_per_audio_s", "rest_per_audio_s"))
    assert row["cpu_per_audio_s"] > 0 and row["encoder_per_audio_s"] > 0
    assert row["decoder_per_audio_s"] > 0 and row["tts_per_audio_s"] > 0
    assert parts == pytest.approx(row["cpu_per_audio_s"], abs=0.01)
    assert row["encoded_audio_per_audio_s"] >= 1.0  # every second is encoded at least once
    assert row["generated_tokens_per_audio_s"] > 0
    assert row["commit_lag_p95"] is None  # fast pace: no wall-clock lag to report
