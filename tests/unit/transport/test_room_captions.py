"""A room's captions (``transport.room_captions``): the store on scripted events through the
hub (the route over a real server: the cli tier)."""

from __future__ import annotations

import gc
import io
from typing import Any

import pytest
import webvtt

from speechpipe.stages.frames import STREAM_RATE, TextHypothesis, VadEvent
from speechpipe.transport.audio_io import OutputResampler
from speechpipe.transport.room_captions import RoomCaptions
from speechpipe.transport.room_shell import RoomHub, encode_outgoing


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def said(hub: RoomHub, room: Any, key: tuple[str, str], utterance: int, start: float,
         end: float, source: str, target: str, language: str = "es") -> None:
    """One utterance of a feed, published as a pipeline would (stream seconds)."""
    resampler = OutputResampler(16000)

    def publish(event: Any) -> None:
        hub.publish(room, key, encode_outgoing(event, key[0], resampler, 0.0), event)

    s, e = round(start * STREAM_RATE), round(end * STREAM_RATE)
    publish(VadEvent("start", utterance, s, s + 1600))
    publish(TextHypothesis("source", utterance, 1, "", source, language, s, e, e))
    publish(VadEvent("end", utterance, e, e + 4800))
    publish(TextHypothesis("source", utterance, 2, source, "", language, s, e, e, final=True))
    publish(TextHypothesis("target", utterance, 3, target, "", key[1], s, e, e, final=True))


def test_captions_per_language_on_the_room_clock_bounded_and_gone_with_the_room() -> None:
    clock = Clock()
    hub = RoomHub(clock=clock, captions=RoomCaptions(max_utterances=2, clock=clock))
    room = hub.new_room()
    clock.now = 110.1  # the speaker's first event (VAD's, decided at 1.1 s of its stream)
    said(hub, room, ("alice", "en"), 0, 1.0, 3.0, "Hola a todos.", "Hello everyone.")
    said(hub, room, ("alice", "en"), 1, 4.0, 6.0, "Bienvenidos.", "Welcome.")
    clock.now = 115.0  # a French listener came: a second pipeline on its own stream clock
    said(hub, room, ("alice", "fr"), 0, 0.0, 1.0, "Bienvenidos.", "Bienvenue.")
    en = hub.captions.cues(room, "en")
    assert [c.text for c in en] == ["Hello everyone.", "Welcome."]
    assert en[0].start == pytest.approx(10.0, abs=0.01)  # stream 1.0 s is room 10.0 s
    assert [c.text for c in hub.captions.cues(room, "fr")] == ["Bienvenue."]
    assert hub.captions.cues(room, "fr")[0].start == pytest.approx(15.0 - 0.1, abs=0.01)
    # Spanish: nobody translates into it, the speaker's own captions are in it
    assert [c.text for c in hub.captions.cues(room, "es")] == ["Hola a todos.", "Bienvenidos."]
    assert hub.captions.cues(room, "de") == []
    assert hub.captions.languages(room) == ["en", "es", "fr"]
    said(hub, room, ("alice", "en"), 2, 7.0, 8.0, "Gracias.", "Thank you.")
    assert [c.text for c in hub.captions.cues(room, "en")] == ["Welcome.", "Thank you."]
    vtt = webvtt.from_buffer(io.StringIO(hub.captions.vtt(room, "en")))
    assert [c.text for c in vtt] == ["Welcome.", "Thank you."]
    del vtt
    hub.registry.rooms.clear()  # the room ended: nothing else holds it
    del room
    gc.collect()
    assert len(hub.captions._rooms) == 0


def test_tentative_words_never_reach_the_file() -> None:
    hub = RoomHub()
    room = hub.new_room()
    resampler = OutputResampler(16000)
    event = TextHypothesis("target", 0, 1, "", "maybe these words", "en", 0, 16000, 16000)
    hub.publish(room, ("a", "en"), encode_outgoing(event, "a", resampler, 0.0), event)
    assert hub.captions.vtt(room, "en").strip() == "WEBVTT"
