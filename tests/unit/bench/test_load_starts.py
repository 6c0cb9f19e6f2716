"""``speechpipe bench load --starts``: solo / synchronized / staggered starts, judged per
recording at the client's clock: the maths on scripted runs (a real run: the slow tier)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from speechpipe.bench.load import (
    ClientRun,
    Clip,
    StartCase,
    _print_cases,
    playlist_recordings,
    recording_offsets,
    voiced_span,
)
from speechpipe.bench.load_client import recording_owner
from speechpipe.evaluation.scores import end_offset_parts, laid_back_to_back

RATE = 16_000


def _tone(seconds: float, amplitude: int = 8000) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (amplitude * np.sin(2 * np.pi * 220 * t)).astype(np.int16)


def _recording(lead_s: float, voiced_s: float, tail_s: float) -> np.ndarray:
    return np.concatenate([np.zeros(int(lead_s * RATE), np.int16), _tone(voiced_s),
                           np.zeros(int(tail_s * RATE), np.int16)])


def test_the_voiced_span_is_where_the_recording_is_loud_not_its_silence():
    first, end = voiced_span(_recording(0.5, 2.0, 0.3))
    assert first == pytest.approx(0.5 * RATE, abs=320) and end == pytest.approx(2.5 * RATE,
                                                                                  abs=320)
    # a faint hiss 40 dB under the speech is not voiced
    hiss = (np.random.default_rng(0).standard_normal(RATE) * 60).astype(np.int16)
    first, end = voiced_span(np.concatenate([hiss, _tone(1.0), hiss]))
    assert first == pytest.approx(RATE, abs=320) and end == pytest.approx(2 * RATE, abs=320)
    assert voiced_span(np.zeros(RATE, np.int16)) == (0, RATE)  # nothing voiced: all of it


def test_a_playlist_of_n_recordings_knows_each_ones_voiced_span_on_the_stream_clock():
    clips = [Clip("a", "es", _recording(0.5, 1.0, 0.5)), Clip("b", "es", _recording(0.2, 2.0, 0.2))]
    audio, lang, spans = playlist_recordings(clips, 0, count=3, gap_s=0.8)
    assert lang == "es" and len(spans) == 3
    # a (2.0 s) + 0.8 s, b (2.4 s) + 0.8 s, a again
    assert len(audio) == pytest.approx((2.0 + 0.8 + 2.4 + 0.8 + 2.0 + 0.8) * RATE, abs=2)
    expected = [(0.5, 1.5), (2.8 + 0.2, 2.8 + 2.2), (6.0 + 0.5, 6.0 + 1.5)]
    for (first, end), (f, e) in zip(spans, expected, strict=True):
        assert first == pytest.approx(f, abs=0.02) and end == pytest.approx(e, abs=0.02)
    _, _, rotated = playlist_recordings(clips, 1, count=1, gap_s=0.8)  # the next language
    assert len(rotated) == 1


def _chunk(utterance: int, seconds: float) -> dict:
    return {"utterance": utterance, "samples": int(seconds * RATE), "sample_rate": RATE}


def test_recordings_are_judged_by_their_own_utterances_translated_audio():
    run = ClientRun(0)
    # recording 0 voiced 0.5..3.0 s (two server utterances), recording 1 voiced 4.0..6.0 s
    run.events = [
        (0.6, {"type": "vad", "kind": "start", "utterance": 0, "t": 0.45}),
        (1.9, {"type": "vad", "kind": "start", "utterance": 1, "t": 1.8}),
        (4.1, {"type": "vad", "kind": "start", "utterance": 2, "t": 3.7}),  # 0.3 s early
    ]
    run.audio = [
        (2.5, _chunk(0, 1.0), np.zeros(0, np.int16)),   # first audio 2.0 s after 0.5
        (3.2, _chunk(1, 1.0), np.zeros(0, np.int16)),   # laid 3.5..4.5
        (4.2, _chunk(2, 1.0), np.zeros(0, np.int16)),   # queued behind it: 4.5..5.5 — but
        (7.0, _chunk(2, 0.5), np.zeros(0, np.int16)),   # its end arrives late: 7.0..7.5
    ]
    (first0, end0), (first1, end1) = recording_offsets(run, [(0.5, 3.0), (4.0, 6.0)])
    assert first0 == pytest.approx(2.0) and end0 == pytest.approx(4.5 - 3.0)
    # recording 1's first translated audio is its own (4.2), not recording 0's tail
    assert first1 == pytest.approx(0.2) and end1 == pytest.approx(7.5 - 6.0)
    assert recording_offsets(run, [(0.5, 3.0), (4.0, 6.0), (9.0, 10.0)])[2] is None


def test_an_utterance_belongs_to_the_recording_nearest_after_its_silence():
    # recordings voiced 0.5..3.0 s and 4.0..6.0 s: the silence between them ends at 3.5 s
    spans = [(0.5, 3.0), (4.0, 6.0)]
    assert recording_owner(0.0, spans) == 0
    assert recording_owner(3.4, spans) == 0  # a late start in the first one's tail
    # the VAD's pre-roll and start window put a start 0.5-0.7 s before the first voiced
    # frame: the second recording's utterance, not the first's
    assert recording_owner(3.35 + 0.2, spans) == 1 and recording_owner(3.6, spans) == 1
    run = ClientRun(0)
    run.events = [(0.6, {"type": "vad", "kind": "start", "utterance": 0, "t": 0.2}),
                  (3.9, {"type": "vad", "kind": "start", "utterance": 1, "t": 3.45 + 0.1})]
    run.audio = [(3.0, _chunk(0, 1.0), np.zeros(0, np.int16)),   # laid 3.0..4.0
                 (7.0, _chunk(1, 1.0), np.zeros(0, np.int16))]   # laid 7.0..8.0
    (_, end0), (first1, end1) = recording_offsets(run, spans)
    assert end0 == pytest.approx(4.0 - 3.0)  # not 8.0 - 3.0: the next one's speech
    assert first1 == pytest.approx(3.0) and end1 == pytest.approx(2.0)


def test_a_case_pools_every_recording_and_the_sessions_first_ones(capsys):
    run = ClientRun(0, close_code=1000)
    run.events = [(0.6, {"type": "vad", "kind": "start", "utterance": 0, "t": 0.5}),
                  (4.1, {"type": "vad", "kind": "start", "utterance": 1, "t": 4.0})]
    run.audio = [(2.5, _chunk(0, 1.0), np.zeros(0, np.int16)),
                 (5.0, _chunk(1, 1.5), np.zeros(0, np.int16))]
    case = StartCase("2 synchronized", 2)
    case.add(run, [(0.5, 3.0), (4.0, 6.0)])
    case.add(ClientRun(1, error="timeout"), [(0.5, 3.0), (4.0, 6.0)])
    row = case.row()
    assert row["finished"] == 1 and row["errors"] == 1 and row["recordings"] == 4
    assert row["heard"] == 2 and row["first_p50"] == pytest.approx(1.5)
    assert row["session_first_p50"] == pytest.approx(2.0)
    assert row["end_p50"] == pytest.approx(((3.5 - 3.0) + (6.5 - 6.0)) / 2)
    assert row["server_cpu_per_audio_s"] is None  # no server measured
    _print_cases([row])
    out = capsys.readouterr().out
    assert "2 synchronized" in out and "server CPU" not in out
    case.audio_s, case.server_cpu_s = 12.0, 3.0
    _print_cases([case.row()])
    assert "server CPU-s per audio second streamed: 2 synchronized 0.25" in (
        capsys.readouterr().out)
    assert math.isnan(StartCase("none", 1).row()["first_p50"])


def test_the_end_offset_split_is_one_definition_for_trace_and_client():
    chunks = [(2.5, 2.0), (5.0, 1.0), (7.5, 1.0)]
    ends = laid_back_to_back(chunks)
    assert ends == pytest.approx([4.5, 6.0, 8.5])
    laid = [(a, e, d) for (a, d), e in zip(chunks, ends, strict=True)]
    # the speech ending at 3.0 owns the first two chunks: 1.5 s queued, 1 s late, 0.5 s idle
    queued, late, silence = end_offset_parts(laid, 3.0, [True, True, False])
    assert (queued, late, silence) == pytest.approx((1.5, 1.0, 0.5))
    assert queued + late + silence == pytest.approx(ends[1] - 3.0)
    assert end_offset_parts(laid, 3.0, [False, False, False]) is None


def test_a_case_says_why_sessions_did_not_finish() -> None:
    """12 on --capacity 8 synchronized showed 'done 4' and nothing else: the row now counts
    error codes, close codes and the waiting line."""
    from speechpipe.bench.load_starts import StartCase
    from speechpipe.transport.client import ClientRun

    case = StartCase("12 synchronized", 3)
    closed = ClientRun(0, events=[(5.0, {"type": "error", "code": "too_slow"})],
                       close_code=4010)
    waited = ClientRun(1, queued=True, close_code=1000)
    refused = ClientRun(2, refused=True, error="over_capacity", close_code=4002)
    for run in (closed, waited, refused):
        case.add(run, [])
    row = case.row()
    assert row["finished"] == 1 and row["errors"] == 2
    assert row["causes"] == {"client over_capacity": 1, "close 4002": 1, "close 4010": 1,
                             "error too_slow": 1, "queued": 1, "refused": 1}


def test_the_queue_wait_of_each_urgency_between_two_scrapes() -> None:
    """The starts bench reads the server's wait histogram per urgency before and after a
    case: requests and mean wait per class, from Prometheus text."""
    from speechpipe.bench.load_starts import queue_wait_means
    from speechpipe.bench.server_process import sums_by_label

    def text(commit: tuple[float, float], refresh: tuple[float, float]) -> str:
        name = "speechpipe_asr_queue_wait_seconds"
        return "\n".join([
            f"# HELP {name} wait",
            f'{name}_count{{urgency="commit"}} {commit[0]}',
            f'{name}_sum{{urgency="commit"}} {commit[1]}',
            f'{name}_count{{urgency="refresh"}} {refresh[0]}',
            f'{name}_sum{{urgency="refresh"}} {refresh[1]}',
            f'{name}_bucket{{le="0.1",urgency="commit"}} 3.0',
            "speechpipe_asr_batch_size_count 9.0"])

    def waits(body: str) -> tuple[dict[str, float], dict[str, float]]:
        name = "speechpipe_asr_queue_wait_seconds"
        return (sums_by_label(body, f"{name}_count", "urgency"),
                sums_by_label(body, f"{name}_sum", "urgency"))

    before = waits(text((2.0, 0.4), (5.0, 1.0)))
    assert before == ({"commit": 2.0, "refresh": 5.0}, {"commit": 0.4, "refresh": 1.0})
    after = waits(text((6.0, 2.0), (5.0, 1.0)))
    means = queue_wait_means(before, after)
    assert means == {"commit": (4, pytest.approx(0.4))}  # no refresh ran in between


def test_the_call_time_of_each_urgency_and_lane_between_two_scrapes() -> None:
    """The call-time histogram has two labels: the bench keys its sums by both, and names
    the lanes in words."""
    from speechpipe.bench.load_starts import call_label, queue_wait_means
    from speechpipe.bench.server_process import sums_by_label

    name = "speechpipe_asr_call_seconds"

    def text(lane_commits: float, worker_commits: float) -> str:
        return "\n".join([
            f'{name}_count{{lane="urgent",urgency="commit"}} {lane_commits}',
            f'{name}_sum{{lane="urgent",urgency="commit"}} {lane_commits * 0.4}',
            f'{name}_count{{lane="usual",urgency="commit"}} {worker_commits}',
            f'{name}_sum{{lane="usual",urgency="commit"}} {worker_commits * 1.0}',
            f'{name}_bucket{{lane="usual",le="0.1",urgency="commit"}} 0.0',
            f'{name}_count{{urgency="refresh"}} 7.0'])  # no lane label: left out

    def calls(body: str) -> tuple[dict[str, float], dict[str, float]]:
        labels = ("urgency", "lane")
        return (sums_by_label(body, f"{name}_count", labels),
                sums_by_label(body, f"{name}_sum", labels))

    before = calls(text(2.0, 1.0))
    assert before[0] == {"commit urgent": 2.0, "commit usual": 1.0}
    means = queue_wait_means(before, calls(text(5.0, 3.0)))
    assert means == {"commit urgent": (3, pytest.approx(0.4)),
                     "commit usual": (2, pytest.approx(1.0))}
    assert call_label("commit urgent") == "commit on the lane"
    assert call_label("first_words usual") == "first words on a worker"
