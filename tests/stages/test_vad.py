"""VAD hysteresis on scripted voiced/unvoiced decisions (no audio needed for the logic)."""

import numpy as np

from speechpipe.stages.frames import FRAME_SAMPLES
from speechpipe.stages.vad import VadCore, VadOptions

DEFAULT = VadOptions()


def run(pattern: str, options: VadOptions = DEFAULT):
    """pattern: one char per 20 ms frame, 'x' voiced, '.' unvoiced."""
    decisions = iter(pattern)
    core = VadCore(options, classify=lambda _frame: next(decisions) == "x")
    frame = np.zeros(FRAME_SAMPLES, np.int16)
    events = []
    for i in range(len(pattern)):
        events.extend(core.process(frame, i * FRAME_SAMPLES)[1])
    return core, events


def test_short_blip_does_not_start_speech():
    _, events = run("..xx......" * 3)
    assert events == []


def test_start_needs_most_of_the_window_voiced_and_points_at_the_first_voiced_frame():
    _, events = run("...." + "x" * 20)
    start = events[0]
    assert start.kind == "start"
    assert start.pts == 4 * FRAME_SAMPLES
    assert start.detected_at > start.pts


def test_pause_then_end_after_the_hangover():
    options = VadOptions(pause_ms=240, hangover_ms=600)
    _, events = run("x" * 20 + "." * 40, options)
    kinds = [e.kind for e in events]
    assert kinds == ["start", "pause", "end"]
    pause, end = events[1], events[2]
    assert pause.pts == end.pts == 20 * FRAME_SAMPLES  # end of the last voiced frame
    assert pause.detected_at == (20 + 12) * FRAME_SAMPLES
    assert end.detected_at == (20 + 30) * FRAME_SAMPLES


def test_a_short_gap_is_a_pause_not_an_end():
    _, events = run("x" * 20 + "." * 15 + "x" * 20)
    assert [e.kind for e in events] == ["start", "pause"]


def test_max_utterance_length_forces_a_cut_and_continues():
    options = VadOptions(max_utterance_s=1.0)
    _, events = run("x" * 120, options)
    kinds = [(e.kind, e.forced) for e in events]
    assert ("end", True) in kinds
    assert [k for k, _ in kinds].count("start") >= 2


def test_flush_ends_the_open_utterance():
    core, events = run("x" * 20)
    flushed = core.flush(20 * FRAME_SAMPLES)
    assert [e.kind for e in flushed] == ["end"]
    assert core.flush(21 * FRAME_SAMPLES) == []


def test_real_webrtcvad_hears_nothing_in_silence():
    core = VadCore(VadOptions())
    frame = np.zeros(FRAME_SAMPLES, np.int16)
    events = [e for i in range(100) for e in core.process(frame, i * FRAME_SAMPLES)[1]]
    assert events == []
