"""WebRTC with two in-process aiortc peers: a client sends a recording over a peer
connection (signalling on the session's WebSocket) and records the translated track."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import av
import numpy as np
import pytest
from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from websockets.asyncio.client import connect

from speechpipe.transport.codes import CloseCode
from speechpipe.transport.file_replay import read_audio
from tests.fakes import WavTrack
from tests.helpers import read_events, wait_for_event

# local_ice: skips where aiortc's ICE would use the machine's interface addresses (outside a
# private network namespace), which the socket guard refuses (tests/netguard.py)
pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.usefixtures("local_ice")]

RATE = 48_000


class TrackRecorder:
    """Reads the translated track as it plays: (arrival seconds, mono int16 frame)."""

    def __init__(self) -> None:
        self.frames: list[tuple[float, np.ndarray]] = []
        self.task: asyncio.Task[None] | None = None

    def start(self, track: MediaStreamTrack, clock: WavTrack) -> None:
        async def read() -> None:
            resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
            while True:
                try:
                    frame = await track.recv()
                except MediaStreamError:
                    return
                now = time.monotonic() - (clock.t0 or clock.clock0 or time.monotonic())
                for out in resampler.resample(frame):
                    self.frames.append((now, out.to_ndarray().reshape(-1).copy()))

        self.task = asyncio.create_task(read())

    def loud_times(self, threshold: float = 500.0) -> list[float]:
        """Arrival times of frames that carry speech (RMS above ``threshold``)."""
        return [
            t for t, f in self.frames
            if len(f) and np.sqrt(np.mean(f.astype(np.float64) ** 2)) > threshold
        ]


async def test_webrtc_round_trip_carries_translated_speech(
    live_server: Any, spanish_clip: tuple[Any, dict[str, Any]]
) -> None:
    path, entry = spanish_clip
    audio = np.concatenate([read_audio(path), np.zeros(16000 * 4, np.int16)])
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    mic = WavTrack(audio, pc)
    recorder = TrackRecorder()
    pc.addTrack(mic)
    pc.on("track", lambda track: recorder.start(track, mic))
    events: list[dict[str, Any]] = []
    try:
        async with connect(f"ws://127.0.0.1:{live_server.server.port}/ws") as ws:
            await ws.send(json.dumps({"type": "start", "source_lang": "es", "sample_rate": 48000}))
            reader = asyncio.create_task(read_events(ws, events))
            await wait_for_event(events, "started")
            await pc.setLocalDescription(await pc.createOffer())
            await ws.send(json.dumps({"type": "offer", "sdp": pc.localDescription.sdp}))
            answer = await wait_for_event(events, "answer")
            await pc.setRemoteDescription(RTCSessionDescription(answer["sdp"], "answer"))
            await asyncio.wait_for(mic.done.wait(), 60)
            await ws.send(json.dumps({"type": "stop"}))
            await asyncio.wait_for(reader, 30)
            assert ws.close_code == CloseCode.NORMAL
    finally:
        await pc.close()
    assert not [e for e in events if e["type"] == "error"], events
    target = " ".join(e["committed"] for e in events if e["type"] == "target" and e["final"])
    assert target or any(e["type"] == "target" for e in events), "captions arrived"
    audio_events = [e for e in events if e["type"] == "audio"]
    assert audio_events and all(e["via"] == "webrtc" for e in audio_events)

    assert recorder.frames, "the translated track was received"
    levels = [np.sqrt(np.mean(f.astype(np.float64) ** 2)) for _, f in recorder.frames]
    quiet = float(np.percentile(levels, 10))
    loud = recorder.loud_times()
    assert quiet < 50, "silence between phrases is silent"
    assert len(loud) * 0.02 > 1.0, "over a second of translated speech on the track"
    vad = [e for e in events if e["type"] == "vad"]
    speech_start = min(e["t"] for e in vad if e["kind"] == "start")
    speech_end = max((e["t"] for e in vad if e["kind"] == "end"), default=len(audio) / 16000)
    print(f"\nwebrtc: StartOffset {loud[0] - speech_start:.2f} s, "
          f"EndOffset {loud[-1] + 0.02 - speech_end:.2f} s, "
          f"{len(loud) * 0.02:.1f} s of speech frames")
    assert not live_server.server.connections
