"""``speechpipe bench room --join-storm``: at tiny size against an in-process server (the
tests' model-free pipeline): both phases measure /healthz and the speaker's caption lag, the
storm's joins arrive from several loopback addresses and its refusals are counted."""

from __future__ import annotations

import numpy as np
import pytest

from speechpipe.bench.room_storm import run_storm_phase
from speechpipe.transport.limits import RoomOptions, ServerLimits
from speechpipe.transport.websocket_server import SpeechServer
from tests.fakes import TickFactory

TONE = (np.sin(np.arange(2 * 16000) / 7) * 3000).astype(np.int16)  # 2 s: two captions pairs


@pytest.mark.asyncio(loop_scope="session")
async def test_a_tiny_storm_against_a_live_server() -> None:
    async with SpeechServer(TickFactory()) as srv:
        url = f"ws://127.0.0.1:{srv.port}/ws"
        base = await run_storm_phase(url, TONE, "es")
        storm = await run_storm_phase(url, TONE, "es", rate=50, count=12, addresses=3)
    for phase in (base, storm):
        assert phase.speaker_close == 1000
        assert phase.lags_s and phase.health_s and not phase.health_failed
    assert not base.joins
    assert dict(storm.joins) == {"ok": 12}
    assert "joins: 12 admitted" in storm.line("storm")


@pytest.mark.asyncio(loop_scope="session")
async def test_refused_joins_are_counted_by_close_code() -> None:
    limits = ServerLimits(rooms=RoomOptions(join_per_ip_s=0.1, join_ip_burst=2))
    async with SpeechServer(TickFactory(), limits=limits) as srv:
        url = f"ws://127.0.0.1:{srv.port}/ws"
        storm = await run_storm_phase(url, TONE, "es", rate=50, count=6, addresses=1)
    assert storm.speaker_close == 1000
    assert storm.joins["ok"] == 2 and storm.joins["4016"] == 4
