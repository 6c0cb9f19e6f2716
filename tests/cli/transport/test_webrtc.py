"""WebRTC with an in-process aiortc peer: a peer that never connects is closed after the
timeout (real UDP sockets on the test address)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection
from websockets.asyncio.client import connect

from speechpipe.transport.codes import CloseCode
from speechpipe.transport.limits import ServerLimits
from speechpipe.transport.websocket_server import SpeechServer
from tests.fakes import WavTrack
from tests.helpers import read_events, wait_for_event

# local_ice: skips where aiortc's ICE would use the machine's interface addresses (outside a
# private network namespace), which the socket guard refuses (tests/netguard.py)
pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.usefixtures("local_ice")]


class _NeverAnswered:
    """Scripted session for the timeout test: ICE mechanics need no models."""

    def __init__(self, request: Any) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=1)

    async def __aenter__(self) -> _NeverAnswered:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass

    async def push(self, frame: Any) -> None:
        pass

    def flush(self) -> None:
        pass

    async def finish(self) -> None:
        await self.queue.put(None)

    async def events(self) -> Any:
        await self.queue.get()
        return
        yield


async def test_peer_that_never_connects_is_closed_after_the_timeout() -> None:
    limits = ServerLimits(webrtc_connect_timeout_s=1.0)
    async with SpeechServer(_NeverAnswered, port=0, limits=limits) as server:
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        pc.addTrack(WavTrack(np.zeros(16000, np.int16)))
        events: list[dict[str, Any]] = []
        try:
            async with connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
                await ws.send(json.dumps({"type": "start"}))
                reader = asyncio.create_task(read_events(ws, events))
                await wait_for_event(events, "started")
                await pc.setLocalDescription(await pc.createOffer())
                await ws.send(json.dumps({"type": "offer", "sdp": pc.localDescription.sdp}))
                await wait_for_event(events, "answer")  # ... which the client never applies
                error = await wait_for_event(events, "error", within=10)
                assert (error["code"], error["fatal"]) == ("webrtc_timeout", False)
                conn = next(iter(server.connections))
                assert conn.peer is None
                await ws.send(json.dumps({"type": "stop"}))
                await asyncio.wait_for(reader, 10)
                assert ws.close_code == CloseCode.NORMAL
        finally:
            await pc.close()
