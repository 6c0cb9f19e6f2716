"""Logs carry ids, sizes, timings and codes: never what was said. A scripted session on a
real server shows the check can fail: with ``log_content`` on, the text does appear (the real
session: the slow tier)."""

from __future__ import annotations

import json
import logging

import pytest
from websockets.asyncio.client import connect

from speechpipe.transport.limits import ServerLimits
from speechpipe.transport.websocket_server import SpeechServer
from tests.fakes import TickFactory
from tests.helpers import (
    FAKE_SOURCE,
    FAKE_TARGET,
    pcm,
    read_until_closed,
    recv_json,
    server_log,
)

live = pytest.mark.asyncio(loop_scope="session")


@live
async def test_log_content_switch_is_what_lets_text_into_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    for log_content in (False, True):
        caplog.clear()
        limits = ServerLimits(log_content=log_content)
        async with SpeechServer(TickFactory(), port=0, limits=limits) as srv:
            async with connect(f"ws://127.0.0.1:{srv.port}/ws") as ws:
                await ws.send(json.dumps({"type": "start"}))
                await recv_json(ws)
                for _ in range(60):
                    await ws.send(pcm(0.02))
                await ws.send(json.dumps({"type": "stop"}))
                seen = await read_until_closed(ws)
        assert any(isinstance(m, dict) and m.get("committed") == FAKE_TARGET for m in seen)
        logged = server_log(caplog.records)
        assert (FAKE_TARGET in logged) is log_content
        assert (FAKE_SOURCE in logged) is log_content
    logging.getLogger("piper").setLevel(logging.NOTSET)  # the next server guards it again
