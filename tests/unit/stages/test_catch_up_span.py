"""Issue 20, lead 1: the speaking rate follows the ear-voice span (how long ago the listener's
speaker said the words about to be spoken), is capped, and the rest of an utterance after its
final hypothesis is spoken at the finish rate; the backlog rule before it stays selectable."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from speechpipe.config import Config, apply_overrides
from speechpipe.errors import InputError
from speechpipe.stages.channels import Channel
from speechpipe.stages.clock import BasisStreamClock
from speechpipe.stages.frames import STREAM_RATE, SpeechChunk, TextHypothesis
from speechpipe.stages.phrases import PhraseOptions
from speechpipe.stages.tts import (
    CatchUpOptions,
    TtsStage,
    catch_up_speed,
    phrase_speed,
    span_speed,
    words_source_time,
)

RATE = 16_000
SPAN = CatchUpOptions(span_s=1.0, ramp_s=2.0, max_speed=1.4, finish_speed=1.3, speed_step=0.0)


# -- the pure rule -----------------------------------------------------------------------------
def test_the_rate_is_one_up_to_the_threshold_then_rises_to_the_cap():
    assert span_speed(0.0, SPAN) == 1.0
    assert span_speed(1.0, SPAN) == 1.0  # at the threshold
    assert span_speed(2.0, SPAN) == pytest.approx(1.2)  # half way up the 2 s ramp
    assert span_speed(3.0, SPAN) == pytest.approx(1.4)  # the top of the ramp
    assert span_speed(30.0, SPAN) == pytest.approx(1.4)  # capped, however long the lag


@given(st.floats(-5, 60), st.floats(-5, 60), st.booleans())
def test_the_rate_never_falls_as_the_span_grows_and_stays_within_its_bounds(a, b, finishing):
    options = CatchUpOptions()  # the defaults, rounded to 0.05
    low, high = sorted((a, b))
    assert span_speed(low, options, finishing) <= span_speed(high, options, finishing)
    for span in (low, high):
        speed = span_speed(span, options, finishing)
        assert 1.0 <= speed <= options.max_speed
        assert speed == pytest.approx(round(speed / 0.05) * 0.05)  # on the cache's steps


def test_after_the_final_hypothesis_the_rest_is_spoken_at_the_finish_rate():
    assert span_speed(0.5, SPAN, finishing=True) == pytest.approx(1.3)
    assert span_speed(0.5, SPAN, finishing=False) == 1.0
    # a longer lag than the finish rate answers keeps the faster rate
    assert span_speed(2.9, SPAN, finishing=True) == pytest.approx(1.38)
    assert span_speed(0.5, CatchUpOptions(finish_speed=1.0), finishing=True) == 1.0  # off


def test_the_words_are_placed_in_the_hypothesis_audio_by_their_position_in_its_text():
    hyp = TextHypothesis(side="target", utterance=0, revision=3, committed="a b c",
                         tentative="d e f", language="en", audio_start=2 * STREAM_RATE,
                         audio_end=5 * STREAM_RATE, stream_pts=5 * STREAM_RATE)
    assert words_source_time(hyp, 0, SPAN) == pytest.approx(2.0)  # the first word: the start
    assert words_source_time(hyp, 3, SPAN) == pytest.approx(3.5)  # half way through the text
    end = CatchUpOptions(source_time="end")
    assert words_source_time(hyp, 0, end) == pytest.approx(5.0)  # the upper bound


def test_the_backlog_rule_is_still_selectable_and_ignores_the_span():
    old = CatchUpOptions(mode="backlog")
    # 9 s after the words were said but nothing queued: the old rule does not speed up
    assert phrase_speed(old, now_s=10.0, queued_until_s=0.0, source_s=1.0, finishing=True) == 1.0
    assert phrase_speed(old, now_s=10.0, queued_until_s=11.5, source_s=9.9,
                        finishing=False) == catch_up_speed(1.5, old) == 1.15
    assert phrase_speed(old, now_s=10.0, queued_until_s=12.0, source_s=9.9,
                        finishing=False) == 1.3
    new = CatchUpOptions()
    assert new.mode == "span"  # the default
    assert phrase_speed(new, now_s=10.0, queued_until_s=0.0, source_s=1.0,
                        finishing=False) == new.max_speed


def test_the_options_are_set_and_checked_from_the_command_line():
    config = apply_overrides(Config(), ["catch_up.mode=backlog", "catch_up.max_speed=1.25"])
    assert config.pipeline.catch_up.mode == "backlog"
    assert config.pipeline.catch_up.max_speed == 1.25
    for bad in ("catch_up.mode=fast", "catch_up.source_time=start", "catch_up.max_speed=0.8",
                "catch_up.ramp_s=0"):
        with pytest.raises(InputError):
            apply_overrides(Config(), [bad])


# -- the stage asks for these rates ------------------------------------------------------------
def _hyp(committed: str, tentative: str, end_s: float, final: bool = False) -> TextHypothesis:
    pts = int(end_s * STREAM_RATE)
    return TextHypothesis(side="target", utterance=0, revision=1, committed=committed,
                          tentative=tentative, language="en", audio_start=0, audio_end=pts,
                          stream_pts=pts, final=final)


async def _speeds(catch_up: CatchUpOptions,
                  script: list[TextHypothesis]) -> list[tuple[str, float]]:
    """The (phrase, speed) pairs the stage synthesizes for a scripted replay (basis clock:
    the stream time of a decision is the audio it was based on)."""
    asked: list[tuple[str, float]] = []

    async def speak(text: str, speed: float, due: float | None = None) -> np.ndarray:
        asked.append((text, speed))  # 1 s per word whatever the speed: only the rate matters
        return np.full(RATE * len(text.split()), 1000, np.int16)

    stage = TtsStage(speak, BasisStreamClock(), RATE, PhraseOptions(lead_s=1.5), catch_up)
    inbox: Channel[TextHypothesis] = Channel(16)
    events: Channel = Channel(64)
    for hyp in script:
        await inbox.put(hyp)
    inbox.close()
    await stage.run(inbox, events)
    chunks = [e async for e in events if isinstance(e, SpeechChunk)]
    # the voice gets a mid-sentence phrase as a continuation (a trailing comma: voice_text)
    assert [c.text.removesuffix(",") for c in chunks] == [
        text.removesuffix(",") for text, _ in asked]
    return [(text.removesuffix(","), speed) for text, speed in asked]


SCRIPT = [
    # at 2 s: "alpha beta" (said from 0 s) starts at once: span 2 s; 2 s of speech queued
    _hyp("alpha beta", "gamma delta", 2.0),
    # at 3 s: 1 s left < lead 1.5 s, "gamma delta" (word 2 of 6 over 0..3 s: said at 1 s)
    # starts when the queue ends, at 4 s: span 3 s
    _hyp("alpha beta gamma delta", "epsilon zeta", 3.0),
]


async def test_the_stage_speaks_faster_as_the_ear_voice_span_grows():
    asked = await _speeds(SPAN, SCRIPT)
    assert [text for text, _ in asked] == ["alpha beta", "gamma delta"]
    assert [speed for _, speed in asked] == pytest.approx([1.2, 1.4])


async def test_the_stage_speaks_the_rest_after_the_final_at_the_finish_rate():
    said = [_hyp("alpha beta", "gamma", 1.0)]  # span 1 s: at the threshold, the normal rate
    assert [s for _, s in await _speeds(SPAN, said)] == [1.0]
    final = [_hyp("alpha beta", "", 1.0, final=True)]  # the speaker has stopped
    assert [s for _, s in await _speeds(SPAN, final)] == pytest.approx([1.3])


async def test_nothing_tentative_left_counts_as_finishing():
    """A pause decode committed everything heard: the rest is spoken at the finish rate at
    once, without waiting for the final (which comes after the VAD's hangover)."""
    caught_up = [_hyp("alpha beta", "", 1.0)]
    assert [s for _, s in await _speeds(SPAN, caught_up)] == pytest.approx([1.3])
    only_final = replace(SPAN, finish_when_caught_up=False)
    assert [s for _, s in await _speeds(only_final, caught_up)] == [1.0]


async def test_the_stage_keeps_the_backlog_rule_when_asked():
    asked = await _speeds(CatchUpOptions(mode="backlog"), SCRIPT)
    # nothing queued at first; then 1 s queued ahead (the old rule's first step)
    assert [speed for _, speed in asked] == [1.0, 1.15]
