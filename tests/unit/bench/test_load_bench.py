"""``speechpipe bench load``: its measurements on scripted event logs (a real run against the
live server: the slow tier)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from speechpipe.bench.load import (
    ClientRun,
    Clip,
    LevelReport,
    ListenerRule,
    _print_row,
    commit_latencies,
    committed_by_end,
    end_offset_split,
    ladder_summary,
    load_clips,
    percentile,
    playlist,
    solo_demand,
    speaker_language,
    utterance_offsets,
)
from tests.helpers import ROOT


def test_commit_latency_counts_only_events_whose_committed_text_grew():
    events = [
        {"type": "target", "utterance": 0, "committed": "", "stream_t": 1.0, "audio_end": 0.9},
        {"type": "target", "utterance": 0, "committed": "Hello", "stream_t": 2.2,
         "audio_end": 2.0},
        {"type": "source", "utterance": 0, "committed": "Hola", "stream_t": 2.2,
         "audio_end": 2.0},
        {"type": "target", "utterance": 0, "committed": "Hello", "stream_t": 3.5,
         "audio_end": 3.0},  # tentative change only
        {"type": "target", "utterance": 0, "committed": "Hello there", "stream_t": 4.0,
         "audio_end": 3.1},
        {"type": "target", "utterance": 1, "committed": "Bye", "stream_t": 9.0,
         "audio_end": 8.5},
    ]
    assert commit_latencies(events, "target") == pytest.approx([0.2, 0.9, 0.5])
    assert commit_latencies(events, "source") == pytest.approx([0.2])


def test_offsets_lay_speech_back_to_back_per_utterance():
    run = ClientRun(0)
    run.events = [
        (0.7, {"type": "vad", "kind": "start", "utterance": 0, "t": 0.5}),
        (4.0, {"type": "vad", "kind": "end", "utterance": 0, "t": 3.5}),
    ]
    run.audio = [  # 1 s chunks arriving at 2.0 and 2.5: the second plays from 3.0
        (2.0, {"utterance": 0, "samples": 16000, "sample_rate": 16000}, np.zeros(16000)),
        (2.5, {"utterance": 0, "samples": 16000, "sample_rate": 16000}, np.zeros(16000)),
    ]
    starts, ends = utterance_offsets(run)
    assert starts == pytest.approx([1.5]) and ends == pytest.approx([0.5])


def test_the_end_offset_splits_into_queued_late_and_silent_time():
    second = {"samples": 16000, "sample_rate": 16000}
    run = ClientRun(0)
    run.events = [
        (0.1, {"type": "vad", "kind": "start", "utterance": 0, "t": 0.0}),
        (3.6, {"type": "vad", "kind": "end", "utterance": 0, "t": 3.0}),
        (5.0, {"type": "vad", "kind": "start", "utterance": 1, "t": 5.0}),
        (8.6, {"type": "vad", "kind": "end", "utterance": 1, "t": 8.0}),
    ]
    run.audio = [
        # utterance 0: 2 s received at 2.5 (1.5 s still to play at the end, 3.0), then 1 s
        # received at 5.0, 0.5 s after the output went silent: EndOffset 3.0 = 1.5 + 1 + 0.5
        (2.5, {"utterance": 0, **second, "samples": 32000}, np.zeros(32000)),
        (5.0, {"utterance": 0, **second}, np.zeros(16000)),
        # utterance 1: all received before its end, 0.5 s to play then
        (7.5, {"utterance": 1, **second}, np.zeros(16000)),
    ]
    (q0, late0, silence0), (q1, late1, silence1) = end_offset_split(run)
    assert (q0, late0, silence0) == pytest.approx((1.5, 1.0, 0.5))
    assert (q1, late1, silence1) == pytest.approx((0.5, 0.0, 0.0))
    _, ends = utterance_offsets(run)
    assert ends == pytest.approx([q0 + late0 + silence0, q1 + late1 + silence1])


def test_the_share_committed_by_the_speakers_end_counts_each_side_against_its_final():
    run = ClientRun(0)
    run.events = [
        (0.1, {"type": "vad", "kind": "start", "utterance": 0, "t": 0.0}),
        (2.0, {"type": "source", "utterance": 0, "committed": "a b c"}),
        (2.0, {"type": "target", "utterance": 0, "committed": "x"}),
        (3.6, {"type": "vad", "kind": "end", "utterance": 0, "t": 3.0}),
        (3.7, {"type": "source", "utterance": 0, "committed": "a b c d"}),
        (3.7, {"type": "target", "utterance": 0, "committed": "x y z w"}),
        (5.0, {"type": "vad", "kind": "start", "utterance": 1, "t": 5.0}),
        (8.6, {"type": "vad", "kind": "end", "utterance": 1, "t": 8.0}),
        (8.7, {"type": "source", "utterance": 1, "committed": ""}),  # noise: nothing said
        (8.7, {"type": "target", "utterance": 1, "committed": ""}),
    ]
    assert committed_by_end(run) == [(0.75, 0.25)]


def test_a_level_holds_only_when_every_listener_was_served():
    def level(**kw):
        figures = dict(started=2, finished=2, start_offsets=[1.8, 2.2],
                       end_offsets=[1.5, 1.9, 2.0, 3.0], target_commit=[3.0] * 5)
        return LevelReport("x", 2, **{**figures, **kw})

    assert level().holds()  # a slow commit p95 alone no longer fails a level
    assert not level(queued=1).holds()
    assert not level(finished=1).holds()
    assert not level(end_offsets=[2.1, 2.2, 2.3]).holds()  # EndOffset p50 > 2.0
    assert not level(end_offsets=[1.0] * 9 + [6.0]).holds()  # EndOffset p95 > 3.5
    assert not level(start_offsets=[2.6, 2.7]).holds()  # StartOffset p50 > 2.5
    assert not level(end_offsets=[], start_offsets=[]).holds()  # nothing heard
    assert level(end_offsets=[2.1] * 3).holds(ListenerRule(end_offset_p50=2.2))
    assert math.isnan(percentile([], 95))


def test_the_ladder_levels_a_level_ran_at_are_summarized():
    assert ladder_summary([0, 0, 3, 3, 3]) == "0:40% 3:60%"
    assert ladder_summary([]) == "-"


def test_a_row_names_its_configuration_by_the_start_of_its_name(capsys):
    row = {"config": "no-batching", "sessions": 8, "holds": False, "ladder": "0:100%"}
    row |= dict.fromkeys(("started", "queued", "refused", "finished", "commit_p50",
                          "commit_p95", "commit_p99", "source_commit_p95", "start_offset_p50",
                          "start_offset_p95", "end_offset_p50", "end_offset_p95",
                          "server_cpu_cores", "bench_cpu_cores", "other_cpu_cores",
                          "mean_batch", "dropped", "asr_wait_mean", "max_degrade"), 1.25)
    _print_row(row)
    first, second = capsys.readouterr().out.splitlines()
    assert first.split()[0] == "no-batch"  # not "batching", the other configuration
    assert second.split() == ["config:", "no-batching"]


def test_playlists_rotate_clips_per_client():
    clips = [Clip("a", "es", np.full(16000, 1, np.int16)),
             Clip("b", "es", np.full(16000, 2, np.int16))]
    first, lang = playlist(clips, 0, 3.0)
    second, _ = playlist(clips, 1, 3.0)
    assert lang == "es" and len(first) >= 3 * 16000
    assert first[0] == 1 and second[0] == 2


def test_a_session_is_one_speaker_in_one_language():
    clips = [Clip("a", "es", np.full(16000, 1, np.int16)),
             Clip("b", "fr", np.full(16000, 2, np.int16)),
             Clip("c", "es", np.full(16000, 3, np.int16))]
    gap = 16000  # one second of silence follows each clip

    def spoken(audio):
        return [int(audio[k]) for k in range(0, len(audio), 16000 + gap)]

    sessions = [playlist(clips, i, 6.0) for i in range(4)]
    assert [lang for _, lang in sessions] == ["es", "fr", "es", "fr"]
    assert [speaker_language(clips, i) for i in range(4)] == ["es", "fr", "es", "fr"]
    assert spoken(sessions[0][0]) == [1, 3, 1]  # only the Spanish clips
    assert spoken(sessions[2][0]) == [3, 1, 3]  # rotated: says something else meanwhile
    assert spoken(sessions[1][0]) == [2, 2, 2]
    audio, lang = playlist(clips, 0, 6.0, detect_language=True)
    assert lang == "auto" and spoken(audio) == [1, 3, 1]
    audio, lang = playlist(clips, 0, 6.0, mix_languages=True)
    assert lang == "auto" and spoken(audio) == [1, 2, 3]


def test_solo_demand_scales_one_sessions_cpu_to_the_level():
    assert solo_demand(0.28, 8, 2) == {"per_session_cores": 0.28, "sessions": 8,
                                       "cores_needed": 2.24, "machine_cores": 2}
    assert solo_demand(math.nan, 8, 2) is None  # a server the bench did not start


def test_the_benches_read_a_manifest_as_eval_does(tmp_path: Path) -> None:
    """One manifest reader (``evaluation.manifest.load_manifest``) and one audio reader
    (``read_audio``) for eval and the benches: the bench's clips are eval's rows and audio, and
    a bad line is refused with eval's error naming it."""
    from speechpipe.errors import InputError
    from speechpipe.evaluation.manifest import load_manifest
    from speechpipe.transport.file_replay import read_audio

    manifest = ROOT / "samples" / "manifest.jsonl"
    rows = {row["id"]: row for row in load_manifest(manifest)}
    clips = load_clips(manifest, limit=100)
    assert clips
    for clip in clips:
        assert clip.lang == rows[clip.id]["lang"]
        assert np.array_equal(clip.audio, read_audio(rows[clip.id]["path"]))
    bad = tmp_path / "manifest.jsonl"
    bad.write_text('{"file": "a.wav", "lang": "es", "translation_en": "x"}\n{"file": "b.wav"}\n')
    with pytest.raises(InputError, match=r"manifest.jsonl:2: a clip needs 'file' and 'lang'"):
        load_clips(bad)
