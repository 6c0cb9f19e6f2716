"""``speechpipe bench room``: its pure figures (digest, spread as read and at the sockets, per
100 listeners, the speaker's EndOffset, the open-files limit); its bad input: the cli tier."""

from __future__ import annotations

import math
import resource

import numpy as np
import pytest

from speechpipe.bench.room import (
    listener_digest,
    open_files_soft_limit,
    per_hundred,
    speaker_end_offsets,
    spread,
)
from speechpipe.bench.room_spread import (
    arrival_times,
    missing_arrivals,
    spread_lines,
    stamped_with_the_next,
    widest_messages,
)
from speechpipe.transport.client import ClientRun, ListenerRun


def run_with(audio: list[tuple[float, bytes]], captions: list[str]) -> ListenerRun:
    run = ListenerRun()
    for i, text in enumerate(captions):
        run.events.append((float(i), {"type": "target", "utterance": i, "committed": text,
                                      "final": True, "speaker": "s"}))
    for t, pcm in audio:
        run.audio.append((t, {"type": "audio"}, pcm))
    return run


def test_digests_differ_when_captions_or_speech_bytes_differ() -> None:
    a = run_with([(0.0, b"\x01\x00")], ["hello"])
    b = run_with([(5.0, b"\x01\x00")], ["hello"])
    assert listener_digest(a) == listener_digest(b), "arrival times do not matter"
    assert listener_digest(a) != listener_digest(run_with([(0.0, b"\x02\x00")], ["hello"]))
    assert listener_digest(a) != listener_digest(run_with([(0.0, b"\x01\x00")], ["hullo"]))


def test_spread_is_first_to_last_listener_per_chunk() -> None:
    runs = [run_with([(1.0, b""), (2.0, b"")], []), run_with([(1.25, b""), (2.5, b"")], [])]
    chunks, _ = spread(runs)
    assert chunks == [0.25, 0.5]


def test_the_spread_at_the_sockets_uses_kernel_times_and_leaves_out_missing_ones() -> None:
    a = run_with([(1.0, b""), (2.0, b"")], ["x"])
    b = run_with([(1.5, b""), (2.5, b"")], ["x"])
    a.audio_arrived, b.audio_arrived = [100.0, 200.0], [100.01, math.nan]
    a.arrived, b.arrived = [99.0], [99.02]
    chunks, messages = spread([a, b], arrival_times)
    assert chunks == [pytest.approx(0.01)], "the chunk b has no kernel time for is left out"
    assert messages == [pytest.approx(0.02)]
    assert spread([a, b]) == ([0.5, 0.5], [0.0]), "read times by default"
    assert missing_arrivals([a, b]) == 1


def test_a_listeners_reply_to_its_own_stop_is_not_fan_out() -> None:
    """Each listener gets ``end`` when *it* sends ``stop`` (the bench stops 1000 of them one
    after another): that is no message the room fanned out, so it has no spread, and the
    widest messages name the room's messages by their types."""
    a, b = run_with([], ["x", "y"]), run_with([], ["x", "y"])
    for run, stopped_at in ((a, 10.0), (b, 10.5)):
        run.events.append((stopped_at, {"type": "end", "stream_t": 0}))
    a.arrived, b.arrived = [1.0, 2.0, 10.0], [1.01, 2.03, 10.5]
    assert spread([a, b]) == ([], [0.0, 0.0])
    assert spread([a, b], arrival_times)[1] == [pytest.approx(0.01), pytest.approx(0.03)]
    assert [(i, kind) for i, kind, _ in widest_messages([a, b])] == [(1, "target"), (0, "target")]
    a.arrived = [1.0, 1.0, 10.0]  # read together: the first stamped with the second's time
    assert stamped_with_the_next([a]) == 0.5


def test_the_bench_prints_both_spreads_by_name() -> None:
    a, b = run_with([(1.0, b"")], []), run_with([(1.1, b"")], [])
    a.audio_arrived, b.audio_arrived = [50.0], [50.02]
    read, sockets, bar = spread_lines([a, b])
    assert "as read by the listener processes" in read and "p95 100.0 ms" in read
    assert "kernel receive time" in sockets and "p95 20.0 ms" in sockets
    assert "at the sockets 20.0 / nan ms NO" in bar
    unrecorded = spread_lines([run_with([(1.0, b"")], [])])
    assert "not recorded" in unrecorded[1]


def test_per_hundred_is_the_rooms_extra_over_n_times_100() -> None:
    assert per_hundred(812.0, 800.0, 200) == pytest.approx(6.0)
    assert per_hundred(10.5, 8.0, 1000) == pytest.approx(0.25)
    assert math.isnan(per_hundred(1.0, 0.0, 0))


def speaker_run(chunks: list[tuple[float, float]], finals: list[float]) -> ClientRun:
    """Speech 1.0-4.0 s by the VAD; ``chunks`` (arrival, seconds) of speech at 16 kHz."""
    run = ClientRun()
    run.events += [(1.2, {"type": "vad", "kind": "start", "t": 1.0}),
                   (4.1, {"type": "vad", "kind": "end", "t": 4.0})]
    for t in finals:
        run.events.append((t, {"type": "target", "final": True, "utterance": 0}))
    run.events.append((9.0, {"type": "target", "final": False, "utterance": 1}))
    for arrived, seconds in chunks:
        samples = int(seconds * 16000)
        run.audio.append((arrived, {"type": "audio", "samples": samples, "sample_rate": 16000},
                          np.zeros(samples, np.int16)))
    return run


def test_speaker_end_offset_lays_speech_back_to_back_from_the_last_voiced_sample() -> None:
    # 2 s chunk at 3.0 plays to 5.0; the 1 s chunk at 4.5 waits for it: ends at 6.0
    run = speaker_run([(3.0, 2.0), (4.5, 1.0)], finals=[3.5, 5.5])
    end, chunk, text = speaker_end_offsets(run)
    assert end == pytest.approx(2.0) and end == run.offsets()[1]
    assert chunk == pytest.approx(0.5)
    assert text == pytest.approx(1.5), "the last final target, not a later tentative one"


def test_speaker_end_offset_is_nan_without_speech() -> None:
    assert all(math.isnan(x) for x in speaker_end_offsets(ClientRun()))
    end, chunk, text = speaker_end_offsets(speaker_run([], finals=[5.0]))
    assert math.isnan(end) and math.isnan(chunk) and text == pytest.approx(1.0)


def test_open_files_soft_limit_goes_to_the_hard_limit_or_says_why_not() -> None:
    assert open_files_soft_limit(1300, 1024, 4096) == 4096
    assert open_files_soft_limit(1300, 20000, 20000) == 20000, "high enough already"
    assert open_files_soft_limit(1300, 1024, resource.RLIM_INFINITY) == 1300
    with pytest.raises(RuntimeError, match="hard limit is 1024") as caught:
        open_files_soft_limit(1300, 1024, 1024)
    assert "\n" not in str(caught.value)


def test_the_server_side_fanout_delay_comes_from_the_histogram_between_two_scrapes():
    from speechpipe.bench.server_process import bucket_quantile, histogram_buckets

    def text(counts: list[int]) -> str:
        bounds = ["0.001", "0.01", "0.05", "+Inf"]
        lines = ["# HELP speechpipe_room_fanout_delay_seconds d",
                 "# TYPE speechpipe_room_fanout_delay_seconds histogram"]
        lines += [f'speechpipe_room_fanout_delay_seconds_bucket{{le="{b}"}} {c}.0'
                  for b, c in zip(bounds, counts, strict=True)]
        lines += [f"speechpipe_room_fanout_delay_seconds_count {counts[-1]}.0",
                  "speechpipe_room_fanout_delay_seconds_sum 1.0"]
        return "\n".join(lines) + "\n"

    name = "speechpipe_room_fanout_delay_seconds"
    before = histogram_buckets(text([5, 5, 5, 5]), name)  # the lone phase's, left out
    after = histogram_buckets(text([5, 55, 100, 105]), name)
    assert after[0.01] == 55.0
    # 100 new: 50 under 10 ms, 45 more under 50 ms, 5 over
    assert bucket_quantile(before, after, 0.5) == 0.01
    assert bucket_quantile(before, after, 0.95) == 0.05
    assert bucket_quantile(before, after, 0.99) == float("inf")
    assert bucket_quantile(after, after, 0.5) is None
