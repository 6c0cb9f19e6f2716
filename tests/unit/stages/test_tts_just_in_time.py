"""The TTS stage's just-in-time shell on a live (wall-clock) stream: held words are cut when
the queued speech is about to run out, even when no new hypothesis arrives."""

from __future__ import annotations

import asyncio

import numpy as np

from speechpipe.stages.channels import Channel
from speechpipe.stages.clock import WallStreamClock
from speechpipe.stages.frames import STREAM_RATE, SpeechChunk, TextHypothesis
from speechpipe.stages.phrases import PhraseOptions
from speechpipe.stages.tts import TtsStage
from tests.helpers import events_until_spoken

RATE = 16_000


async def fake_speak(text: str, speed: float = 1.0, due: float | None = None) -> np.ndarray:
    """0.6 s of tone per word: the test is about when phrases are cut, not about Piper
    (the real voice runs in tests/slow)."""
    return np.full(int(0.6 * RATE) * len(text.split()), 1000, np.int16)


def target(committed: str, revision: int, pts: int, final: bool = False) -> TextHypothesis:
    # mid-speech hypotheses carry a tentative tail (with none, the stage speaks everything:
    # the speaker has said nothing more yet)
    return TextHypothesis(side="target", utterance=0, revision=revision, committed=committed,
                          tentative="" if final else "more", language="en", audio_start=0,
                          audio_end=pts,
                          stream_pts=pts, final=final)


async def test_held_words_are_cut_when_the_speech_runs_out_without_a_new_hypothesis():
    clock = WallStreamClock()
    clock.begin()
    # issue 12's cutter (any held words, even one, go out when the queue runs low); issue 20's
    # phrase rules are in test_tts_wake.py
    stage = TtsStage(fake_speak, clock, RATE, PhraseOptions(
        cut="just_in_time", lead_s=0.5, min_words=1, clause_cut=False, keep_units=False))
    inbox: Channel[TextHypothesis] = Channel(16)
    events: Channel = Channel(64)
    task = asyncio.create_task(stage.run(inbox, events))
    await inbox.put(target("one two three", 1, 0))  # silent output: spoken at once (1.8 s)
    await asyncio.sleep(0.1)
    await inbox.put(target("one two three four", 2, 0))  # 1.7 s still queued: "four" waits
    # no new hypothesis: the queue runs low at ~1.3 s and "four" goes out (bounded wait)
    seen = await events_until_spoken(events, "four", within=5.0)
    await inbox.put(target("one two three four five", 3, 0, final=True))
    inbox.close()
    await asyncio.wait_for(task, 5)
    events.close()
    chunks = [e for e in [*seen, *[e async for e in events]] if isinstance(e, SpeechChunk)]
    assert [c.text for c in chunks] == ["one two three", "four", "five"]
    cut_at = chunks[1].stream_pts / STREAM_RATE
    assert 1.0 <= cut_at < 1.9, cut_at  # cut just in time, before the last hypothesis (2.1 s)
