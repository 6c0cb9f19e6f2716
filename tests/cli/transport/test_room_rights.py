"""Issue 46: who may speak in a room, over a real socket: an intruder cannot speak, a
surrogate is refused, and a listener that answers pings outlives the idle timeout."""

from __future__ import annotations

import json
import logging

import pytest
from websockets.asyncio.client import connect

from speechpipe.transport.codes import CloseCode
from speechpipe.transport.websocket_server import SpeechServer
from tests.fakes import TickFactory
from tests.helpers import read_until_closed, recv_json


@pytest.mark.asyncio(loop_scope="session")
async def test_over_a_socket_an_intruder_cannot_speak_and_a_surrogate_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with SpeechServer(TickFactory()) as srv:
        url = f"ws://127.0.0.1:{srv.port}/ws"
        speaker = await connect(url)
        await speaker.send(json.dumps({"type": "start", "role": "speaker"}))
        started = await recv_json(speaker)
        room, invite = started["room"], started["invite"]
        for role in ("speaker", "participant"):  # the listener link's room id alone
            async with connect(url) as intruder:
                await intruder.send(json.dumps({"type": "start", "role": role, "room": room}))
                assert (await recv_json(intruder))["code"] == "not_a_speaker"
                await read_until_closed(intruder)
                assert intruder.close_code == CloseCode.NOT_A_SPEAKER
        async with connect(url) as guest:  # the invite is the right to speak
            await guest.send(json.dumps({"type": "start", "role": "participant",
                                         "room": room, "invite": invite}))
            assert (await recv_json(guest))["type"] == "started"
        for role in ("listener", "participant"):
            async with connect(url) as bad:  # a lone surrogate: 4000, no traceback
                await bad.send(json.dumps({"type": "start", "role": role, "room": room,
                                           "target_lang": "\ud800"}))
                assert (await recv_json(bad))["code"] == "bad_start"
                await read_until_closed(bad)
                assert bad.close_code == CloseCode.BAD_START
        await speaker.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.asyncio(loop_scope="session")
async def test_a_listener_that_answers_pings_outlives_the_idle_timeout() -> None:
    """A quiet talk: the speaker sends nothing, the listener sends nothing; with a 0.3 s idle
    timeout the listener is still there after 1.2 s (it answers pings), the speaker is not."""
    import asyncio

    from speechpipe.transport.limits import Quotas, ServerLimits

    limits = ServerLimits(quotas=Quotas(max_idle_s=0.3, audio_window_s=None))
    async with SpeechServer(TickFactory(), limits=limits) as srv:
        url = f"ws://127.0.0.1:{srv.port}/ws"
        speaker = await connect(url)
        await speaker.send(json.dumps({"type": "start", "role": "speaker"}))
        room = (await recv_json(speaker))["room"]
        listener = await connect(url)
        await listener.send(json.dumps({"type": "start", "room": room}))
        assert (await recv_json(listener))["type"] == "started"
        await read_until_closed(speaker)
        assert speaker.close_code == CloseCode.IDLE_TIMEOUT  # idle rules apply to speakers
        await asyncio.sleep(1.2)
        assert listener.close_code is None, "the listener stayed: it answers pings"
        await listener.close()
