"""Issue 20, item 3 on the TTS side: held committed words never wait for the utterance's final
hypothesis while the output is silent. The stage wakes itself when the segmenter could cut
(``JustInTimeSegmenter.wake_at``): when the queued speech runs low, or, for a word that makes
no phrase on its own, once the output has been silent long enough; never for a lone word while
speech is still queued."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import numpy as np
import pytest

from speechpipe.stages.channels import Channel
from speechpipe.stages.clock import BasisStreamClock, WallStreamClock
from speechpipe.stages.frames import STREAM_RATE, SpeechChunk, TextHypothesis
from speechpipe.stages.phrases import PhraseOptions
from speechpipe.stages.tts import TtsStage
from tests.helpers import events_until_spoken

RATE = 16_000
OPTIONS = PhraseOptions(lead_s=1.0, hold_silence_s=0.5, hold_wait_s=1.0)


class ScriptedClock(WallStreamClock):
    """A live session's clock whose wall time the test sets: the stage's decisions are judged
    at scripted times, without sleeping."""

    def __init__(self) -> None:
        super().__init__(start=0.0)
        self.now = 0.0

    def wall_seconds(self) -> float:
        return self.now


async def speak(text: str, speed: float = 1.0, due: float | None = None) -> np.ndarray:
    """0.5 s of tone per word: these tests are about when phrases are cut (Piper runs in
    tests/slow)."""
    return np.full(int(0.5 * RATE) * len(text.split()), 1000, np.int16)


def target(committed: str, at_s: float, final: bool = False) -> TextHypothesis:
    """Mid-speech hypotheses carry a tentative tail (with none, everything heard is committed
    and the stage speaks it at once: ``test_caught_up_words_are_spoken_at_once``)."""
    pts = int(at_s * STREAM_RATE)
    return TextHypothesis(side="target", utterance=0, revision=1, committed=committed,
                          tentative="" if final else "more", language="en", audio_start=0,
                          audio_end=pts,
                          stream_pts=pts, final=final)


async def spoken(events: Channel) -> list[str]:
    """The phrases spoken since the last call."""
    out = []
    while len(events):
        event = await events.get()
        if isinstance(event, SpeechChunk):
            out.append(event.text)
    return out


async def test_a_lone_held_word_is_spoken_after_the_silence_without_waiting_for_the_final():
    clock = ScriptedClock()
    stage = TtsStage(speak, clock, RATE, OPTIONS)
    events: Channel = Channel(64)
    clock.now = 1.0
    await stage._on_target(target("red green blue", 1.0), events)
    assert await spoken(events) == ["red green blue"]  # silent output: at once; queued until 2.5 s
    clock.now = 1.2
    await stage._on_target(target("red green blue yellow", 1.2), events)
    assert await spoken(events) == []  # speech plays: "yellow" waits
    # the stage will wake when the queue has run out and 0.5 s of silence passed (3.0 s)
    assert stage._wake_in() == pytest.approx(3.0 - 1.2 + 0.01)
    clock.now = 2.4  # 0.1 s of speech still queued: a lone word never goes out now
    await stage._wake(events)
    assert await spoken(events) == []
    clock.now = 3.01
    await stage._wake(events)
    assert await spoken(events) == ["yellow"]  # no new hypothesis, no final: spoken anyway
    assert stage._wake_in() is None  # nothing held
    clock.now = 4.0
    await stage._on_target(target("red green blue yellow pink.", 4.0, final=True), events)
    assert await spoken(events) == ["pink."]


async def test_held_words_that_make_a_phrase_are_cut_when_the_queue_runs_low():
    clock = ScriptedClock()
    stage = TtsStage(speak, clock, RATE, OPTIONS)
    events: Channel = Channel(64)
    clock.now = 1.0
    await stage._on_target(target("red green blue", 1.0), events)
    clock.now = 1.2
    await stage._on_target(target("red green blue yellow orange", 1.2), events)
    assert await spoken(events) == ["red green blue"]
    assert stage._wake_in() == pytest.approx(2.5 - 1.0 - 1.2 + 0.01)  # 1 s before the end
    clock.now = 1.6
    await stage._wake(events)
    assert await spoken(events) == ["yellow orange"]


async def test_the_live_loop_wakes_for_a_lone_word_before_the_final_comes():
    clock = WallStreamClock()
    clock.begin()
    stage = TtsStage(speak, clock, RATE, OPTIONS)
    inbox: Channel[TextHypothesis] = Channel(16)
    events: Channel = Channel(64)
    task = asyncio.create_task(stage.run(inbox, events))
    await inbox.put(target("red green blue", 0))  # spoken at once: 1.5 s
    await asyncio.sleep(0.1)
    await inbox.put(target("red green blue yellow", 0))  # held
    # no hypothesis: the queue ends at ~1.5 s, +0.5 s of silence, then "yellow" (bounded)
    seen = await events_until_spoken(events, "yellow", within=5.0)
    await inbox.put(target("red green blue yellow pink.", 0, final=True))
    inbox.close()
    await asyncio.wait_for(task, 5)
    events.close()
    chunks = [e for e in [*seen, *[e async for e in events]] if isinstance(e, SpeechChunk)]
    # "yellow" went out alone, before the final (else "yellow pink." would be one phrase) ...
    assert [c.text for c in chunks] == ["red green blue", "yellow", "pink."]
    # ... and not before the queued speech had ended and the silence had lasted 0.5 s
    queue_end = chunks[0].stream_pts / STREAM_RATE + chunks[0].duration
    assert chunks[1].stream_pts / STREAM_RATE >= queue_end + OPTIONS.hold_silence_s - 1e-3


def caught_up(committed: str, at_s: float) -> TextHypothesis:
    """A pause decode's hypothesis: everything heard is committed, nothing tentative."""
    pts = int(at_s * STREAM_RATE)
    return TextHypothesis(side="target", utterance=0, revision=2, committed=committed,
                          tentative="", language="en", audio_start=0, audio_end=pts,
                          stream_pts=pts)


async def test_caught_up_words_are_spoken_at_once_even_while_speech_plays():
    """Nothing tentative left: no later word can join the held ones until the speaker goes
    on, so they are spoken now (queued after the speech playing), not after the hangover."""
    clock = ScriptedClock()
    stage = TtsStage(speak, clock, RATE, OPTIONS)
    events: Channel = Channel(64)
    clock.now = 1.0
    await stage._on_target(target("red green blue", 1.0), events)
    assert await spoken(events) == ["red green blue"]
    clock.now = 1.3  # the pause decode: "yellow" is the last word heard, speech still plays
    await stage._on_target(caught_up("red green blue yellow", 1.3), events)
    assert await spoken(events) == ["yellow"]
    # the option off: the lone word waits for the queue to run out and the silence
    held = TtsStage(speak, clock, RATE, replace(OPTIONS, flush_when_caught_up=False))
    clock.now = 1.0
    await held._on_target(target("red green blue", 1.0), events)
    await spoken(events)
    clock.now = 1.3
    await held._on_target(caught_up("red green blue yellow", 1.3), events)
    assert await spoken(events) == []


async def test_each_phrase_is_asked_for_by_when_its_listener_runs_out_of_speech():
    """The voice is shared by many sessions and serves the earliest due first
    (``GuardedExecutor.submit_due``): a phrase whose listener hears nothing is due now, one
    whose listener still has speech queued is due when that speech ends; a replay paced by the
    basis clock has no wall time and asks with no due."""
    asked: list[tuple[str, float | None, float]] = []

    async def recording_speak(text: str, speed: float = 1.0,
                              due: float | None = None) -> np.ndarray:
        asked.append((text, due, time.monotonic()))
        return await speak(text, speed, due)

    clock = ScriptedClock()
    stage = TtsStage(recording_speak, clock, RATE, OPTIONS)
    events: Channel = Channel(64)
    clock.now = 1.0
    await stage._on_target(target("red green blue", 1.0), events)  # 1.5 s: queued until 2.5
    clock.now = 1.3
    await stage._on_target(caught_up("red green blue yellow", 1.3), events)
    (first, first_due, first_at), (second, second_due, second_at) = asked
    assert (first, second) == ("red green blue,", "yellow,")  # the sentence goes on
    assert first_due == pytest.approx(first_at, abs=0.01)  # nothing queued: due now
    assert second_due == pytest.approx(second_at + 2.5 - 1.3, abs=0.01)  # when the 1.5 s end
    asked.clear()
    replay = TtsStage(recording_speak, BasisStreamClock(), RATE, OPTIONS)
    await replay._on_target(caught_up("red green blue", 1.0), events)
    assert [due for _, due, _ in asked] == [None]
