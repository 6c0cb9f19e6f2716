"""A room listener over WebRTC, real aiortc peers on loopback: the room's speech plays on the
listener's received track (its ``audio`` headers say ``via: webrtc``). The speaker's pipeline
is the test-only scripted one (a tone per second of audio): the transport is the point."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import av
import numpy as np
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from websockets.asyncio.client import connect

from speechpipe.transport.codes import CloseCode
from speechpipe.transport.websocket_server import SpeechServer
from tests.fakes import ScriptedPipeline
from tests.helpers import pcm, read_until_closed, recv_json, wait_for

# local_ice: skips where aiortc's ICE would use the machine's interface addresses
pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.usefixtures("local_ice")]


async def test_a_webrtc_listener_hears_the_room_on_its_track() -> None:
    async with SpeechServer(ScriptedPipeline().session) as srv:
        url = f"ws://127.0.0.1:{srv.port}/ws"
        speaker = await connect(url)
        await speaker.send(json.dumps({"type": "start", "role": "speaker"}))
        room = (await recv_json(speaker))["room"]
        listener = await connect(url)
        await listener.send(json.dumps({"type": "start", "role": "listener", "room": room}))
        assert (await recv_json(listener))["type"] == "started"
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        pc.addTransceiver("audio", direction="recvonly")
        loud: list[float] = []

        async def record(track: Any) -> None:
            resampler = av.AudioResampler(format="s16", layout="mono", rate=48000)
            while True:
                try:
                    frame = await track.recv()
                except MediaStreamError:
                    return
                for out in resampler.resample(frame):
                    samples = out.to_ndarray().reshape(-1).astype(np.float64)
                    loud.append(float(np.sqrt(np.mean(samples ** 2))) if len(samples) else 0.0)

        tasks: list[asyncio.Task[None]] = []
        pc.on("track", lambda track: tasks.append(asyncio.ensure_future(record(track))))
        try:
            await pc.setLocalDescription(await pc.createOffer())
            await listener.send(json.dumps({"type": "offer", "sdp": pc.localDescription.sdp}))
            answer = await recv_json(listener)
            assert answer["type"] == "answer"
            await pc.setRemoteDescription(RTCSessionDescription(answer["sdp"], "answer"))
            await wait_for(lambda: pc.connectionState == "connected", within=15, what="ICE")
            for _ in range(30):  # 3 s of audio at real time: three tones from the speaker
                await speaker.send(pcm(0.1))
                await asyncio.sleep(0.1)
            headers = []
            while len(headers) < 2:
                event = await recv_json(listener, within=10)
                if event["type"] == "audio":
                    headers.append(event)
            assert all(h["via"] == "webrtc" for h in headers)
            await wait_for(lambda: sum(1 for level in loud if level > 500) >= 5, within=10,
                           what="the tones on the listener's track")
            await listener.send(json.dumps({"type": "stop"}))
            await read_until_closed(listener)
            assert listener.close_code == CloseCode.NORMAL
            await speaker.send(json.dumps({"type": "stop"}))
            await read_until_closed(speaker)
            assert speaker.close_code == CloseCode.NORMAL
        finally:
            await pc.close()
            for task in tasks:
                task.cancel()
