"""Faults on a real server on loopback, scripted sessions: an error for a closed client is not
an error for the server, and a WebRTC session's sockets are gone within 2 s of its client
leaving."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest
from websockets.asyncio.client import connect

from speechpipe.transport.websocket_server import SpeechServer
from tests.fakes import TickFactory
from tests.helpers import (
    assert_released,
    errors,
    open_fds,
    read_until_closed,
    recv_json,
    wait_for,
)

live = pytest.mark.asyncio(loop_scope="session")


@live
@pytest.mark.usefixtures("local_ice")  # skips outside a private network namespace
async def test_webrtc_session_sockets_gone_within_2s() -> None:
    from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

    from tests.fakes import WavTrack

    async with SpeechServer(TickFactory(), port=0) as srv:
        tasks_before, fds_before = set(asyncio.all_tasks()), open_fds()
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        pc.addTrack(WavTrack(np.zeros(16000 * 10, np.int16), pc))
        ws = await connect(f"ws://127.0.0.1:{srv.port}/ws")
        try:
            await ws.send(json.dumps({"type": "start", "sample_rate": 48000}))
            await recv_json(ws)
            await pc.setLocalDescription(await pc.createOffer())
            await ws.send(json.dumps({"type": "offer", "sdp": pc.localDescription.sdp}))
            answer = await recv_json(ws, within=10)
            assert answer["type"] == "answer", answer
            await pc.setRemoteDescription(RTCSessionDescription(answer["sdp"], "answer"))
            await wait_for(lambda: any(c.peer is not None and c.peer.connected
                                       for c in srv.connections), within=10, what="peer up")
            server_peer = next(iter(srv.connections)).peer
            await wait_for(lambda: server_peer.frames_in > 10, what="audio over WebRTC")
            sockets = len(open_fds() - fds_before)
        finally:
            ws.transport.abort()
            await pc.close()
        t0 = time.monotonic()
        await assert_released(tasks_before, fds_before, within=2.0)
        print(f"\nwebrtc session: {sockets} new fds, released in {time.monotonic() - t0:.2f} s")
        assert sockets >= 4  # both peers' UDP sockets and both WebSocket ends were counted


@live
async def test_error_for_a_closed_client_is_not_an_error_for_the_server() -> None:
    """A client that leaves while its session is being refused or set up costs nothing."""
    factory = TickFactory()
    async with SpeechServer(factory, port=0) as srv:
        for _ in range(10):
            ws = await connect(f"ws://127.0.0.1:{srv.port}/ws")
            await ws.send(json.dumps({"type": "start", "sample_rate": 1}))  # refused: 4002
            ws.transport.abort()
        async with connect(f"ws://127.0.0.1:{srv.port}/ws") as ws:
            await ws.send(json.dumps({"type": "start"}))
            assert (await recv_json(ws))["type"] == "started"
            await ws.send(json.dumps({"type": "stop"}))
            assert not errors(await read_until_closed(ws))
        await wait_for(lambda: not srv.connections)
