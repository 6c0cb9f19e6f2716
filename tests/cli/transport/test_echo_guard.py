"""Issue 46: the echo guard follows the participant's reported playout clock (``playout``),
over a real server on loopback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.client import ClientConnection, connect

from speechpipe.stages.channels import Channel
from speechpipe.stages.frames import AudioFrame, OutputEvent, SpeechChunk
from speechpipe.stages.request import SessionRequest
from speechpipe.transport.limits import RoomOptions, ServerLimits
from speechpipe.transport.websocket_server import SpeechServer
from tests.helpers import pcm, recv_json

# -- over a real socket -------------------------------------------------------------------

SPEECH_S = 20.0  # what Alice's pipeline says to Bob: far longer than the test runs
RATE = 16_000


class Talker:
    """A ``LiveSession`` without models: Alice's pipeline into Bob's language says
    ``SPEECH_S`` of speech on her first audio; every pipeline records whether the audio
    pushed into it was held (zeroed) by the echo guard."""

    def __init__(self, request: SessionRequest, heard: dict[str, list[bool]],
                 speech_s: float = SPEECH_S) -> None:
        self.request = request
        self.speech_s = speech_s
        self.heard = heard.setdefault(f"{request.source_lang}>{request.target_lang}", [])
        self.spoke = False
        self.channel: Channel[OutputEvent] = Channel(64, name="talker")

    async def __aenter__(self) -> Talker:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass

    async def push(self, frame: AudioFrame) -> None:
        self.heard.extend([bool(frame.samples.any())] * len(frame.samples))
        PUSHED.set()
        if (not self.spoke and self.request.source_lang == "fr"
                and self.request.target_lang == "es" and frame.samples.any()):
            self.spoke = True
            tone = (np.sin(np.arange(int(self.speech_s * RATE)) / 5) * 3000).astype(np.int16)
            await self.channel.put(SpeechChunk(tone, RATE, 0, "hola", frame.end))

    def flush(self) -> None:
        pass

    async def finish(self) -> None:
        self.channel.close()

    async def events(self) -> AsyncIterator[OutputEvent]:
        async for event in self.channel:
            yield event


PUSHED = asyncio.Event()  # a Talker got audio


async def _until(cond: Any, within: float = 10.0) -> None:
    async with asyncio.timeout(within):
        while not cond():
            await PUSHED.wait()
            PUSHED.clear()


async def _speech(ws: ClientConnection) -> int:
    """Read ``ws`` until an ``audio`` event and its PCM: the samples received."""
    async with asyncio.timeout(10):
        while True:
            message = await ws.recv()
            if isinstance(message, bytes):
                return len(message) // 2


@pytest.mark.asyncio(loop_scope="session")
async def test_the_guard_follows_the_clock_a_participant_reports() -> None:
    heard: dict[str, list[bool]] = {}
    limits = ServerLimits(rooms=RoomOptions(echo_tail_s=0.5, echo_report_tail_s=0.0))
    async with SpeechServer(lambda r: Talker(r, heard), limits=limits) as srv:
        url = f"ws://127.0.0.1:{srv.port}/ws"
        async with connect(url, max_size=4 << 20) as alice, \
                connect(url, max_size=4 << 20) as bob:
            await alice.send(json.dumps({"type": "start", "role": "participant",
                                         "source_lang": "fr", "target_lang": "de"}))
            started = await recv_json(alice)
            await bob.send(json.dumps({"type": "start", "role": "participant",
                                       "room": started["room"], "invite": started["invite"],
                                       "source_lang": "de", "target_lang": "es",
                                       "output_sample_rate": RATE}))
            assert (await recv_json(bob))["type"] == "started"
            await asyncio.sleep(0.5)  # Bob's language reaches Alice's feeds
            await alice.send(pcm(0.2))
            received = await _speech(bob)  # 20 s of Alice's translated speech
            assert received == SPEECH_S * RATE
            bob_heard = heard.setdefault("de>en", [])  # his own (captions) pipeline

            await bob.send(pcm(0.4))  # no report: the server's estimate holds his mic
            await _until(lambda: len(bob_heard) >= 0.4 * RATE)
            assert not any(bob_heard), "his microphone was held while the speech plays"

            await bob.send(json.dumps({"type": "playout", "played_s": 1e9}))  # hostile
            error = await recv_json(bob)
            assert error["type"] == "error" and error["code"] == "bad_message"
            assert not error.get("fatal")

            await bob.send(json.dumps({"type": "playout", "played_s": received / RATE}))
            await bob.send(pcm(0.4))  # he reports it all played: his mic opens at once
            await _until(lambda: len(bob_heard) >= 0.8 * RATE)
            assert all(bob_heard[int(0.4 * RATE):]), "the report opened his microphone"


@pytest.mark.asyncio(loop_scope="session")
async def test_a_late_playout_report_holds_the_microphone_past_the_servers_estimate() -> None:
    heard: dict[str, list[bool]] = {}
    # the server's own estimate: 0.3 s of speech, no tail; a report holds 60 s past its end
    limits = ServerLimits(rooms=RoomOptions(echo_tail_s=0.0, echo_report_tail_s=60.0))
    async with SpeechServer(lambda r: Talker(r, heard, speech_s=0.3), limits=limits) as srv:
        url = f"ws://127.0.0.1:{srv.port}/ws"
        async with connect(url) as alice, connect(url) as bob:
            await alice.send(json.dumps({"type": "start", "role": "participant",
                                         "source_lang": "fr", "target_lang": "de"}))
            started = await recv_json(alice)
            await bob.send(json.dumps({"type": "start", "role": "participant",
                                       "room": started["room"], "invite": started["invite"],
                                       "source_lang": "de", "target_lang": "es",
                                       "output_sample_rate": RATE}))
            assert (await recv_json(bob))["type"] == "started"
            await asyncio.sleep(0.5)  # Bob's language reaches Alice's feeds
            await alice.send(pcm(0.2))
            assert await _speech(bob) == 0.3 * RATE
            await bob.send(json.dumps({"type": "playout", "played_s": 0.0}))  # not yet
            await asyncio.sleep(1.0)  # the server's estimate (0.3 s from sending) has passed
            bob_heard = heard.setdefault("de>en", [])
            await bob.send(pcm(0.4))
            await _until(lambda: len(bob_heard) >= 0.4 * RATE)
            assert not any(bob_heard), "held: the reported playout has not ended"
