"""``speechpipe bench room --join-storm``: at tiny size against an in-process server (the
tests' model-free pipeline): both phases measure /healthz and the speaker's caption lag, the
storm's joins arrive from several loopback addresses and its refusals are counted."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from speechpipe.bench.room_storm import caption_lags, run_storm_phase
from speechpipe.transport.limits import RoomOptions, ServerLimits
from speechpipe.transport.websocket_server import SpeechServer
from tests.fakes import TickFactory

TONE = (np.sin(np.arange(2 * 16000) / 7) * 3000).astype(np.int16)  # 2 s: two captions pairs


def test_caption_lag_is_arrival_after_the_audio_it_covers_was_sent() -> None:
    events = [(12.5, {"type": "source", "audio_end": 2.0}), (13.0, {"type": "vad"}),
              (14.0, {"type": "target", "audio_end": 3.0})]
    assert caption_lags(events, t0=10.0) == [0.5, 1.0]


@pytest.mark.slow  # two real-time talks and a spawned client process (~12 s)
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


@pytest.mark.slow  # a real-time talk and a spawned client process (~6 s)
@pytest.mark.asyncio(loop_scope="session")
async def test_refused_joins_are_counted_by_close_code() -> None:
    limits = ServerLimits(rooms=RoomOptions(join_per_ip_s=0.1, join_ip_burst=2))
    async with SpeechServer(TickFactory(), limits=limits) as srv:
        url = f"ws://127.0.0.1:{srv.port}/ws"
        storm = await run_storm_phase(url, TONE, "es", rate=50, count=6, addresses=1)
    assert storm.speaker_close == 1000
    assert storm.joins["ok"] == 2 and storm.joins["4016"] == 4


def test_bad_storm_rate_exits_2_with_one_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "speechpipe", "bench", "room", "--join-storm",
                           "-5"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "--join-storm" in proc.stderr
