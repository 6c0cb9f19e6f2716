"""VAD hysteresis on scripted voiced/unvoiced decisions (no audio needed for the logic)."""

import numpy as np
import pytest

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


def test_a_pause_ends_a_long_utterance_after_the_soft_maximum():
    """3 s of speech, a 0.3 s pause, 3 s more: one utterance with the soft cut at 15 s (a
    pause event), two with it at 2 s (the pause ends the first)."""
    pattern = "x" * 150 + "." * 15 + "x" * 150 + "." * 40
    _, events = run(pattern, VadOptions(soft_max_utterance_s=15.0))
    assert [e.kind for e in events] == ["start", "pause", "pause", "end"]
    _, events = run(pattern, VadOptions(soft_max_utterance_s=2.0))
    assert [e.kind for e in events] == ["start", "end", "start", "end"]
    assert not events[1].forced and events[1].pts == 150 * FRAME_SAMPLES


def test_a_hush_comes_before_a_pause_when_asked_for():
    """``hush_ms`` (off by default): a silence that may become a pause, for the ASR to decode
    ahead of it; the pause and the end come as before."""
    hush = VadOptions(hush_ms=160, pause_ms=240, hangover_ms=600)
    _, events = run("x" * 20 + "." * 40, hush)
    assert [e.kind for e in events] == ["start", "hush", "pause", "end"]
    assert events[1].pts == 20 * FRAME_SAMPLES  # the end of the last voiced frame
    assert events[1].detected_at == (20 + 8) * FRAME_SAMPLES
    _, events = run("x" * 20 + "." * 10 + "x" * 20, hush)  # 200 ms: a hush, not a pause
    assert [e.kind for e in events] == ["start", "hush"]
    _, events = run("x" * 20 + "." * 40)  # the default: none
    assert [e.kind for e in events] == ["start", "pause", "end"]
    with pytest.raises(ValueError, match="hush_ms"):
        VadOptions(hush_ms=240, pause_ms=240)
