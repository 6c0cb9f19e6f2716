"""Admission on a real server with ``--capacity 1`` over the real pipeline: what the N+1th
and N+2th clients receive (the pure core: the unit tier)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.client import connect

from speechpipe.server.admission import AdmissionOptions
from speechpipe.server.options import LoadOptions
from speechpipe.transport.codes import CloseCode

# -- a real server, real pipeline ---------------------------------------------------------

async def _open(url: str) -> Any:
    ws = await connect(url, max_size=None)
    await ws.send(json.dumps({"type": "start", "source_lang": "es", "sample_rate": 16000}))
    return ws


async def _next(ws: Any) -> dict[str, Any]:
    return json.loads(await asyncio.wait_for(ws.recv(), 30))


@pytest.mark.asyncio(loop_scope="session")
async def test_the_next_sessions_are_queued_then_refused_with_documented_messages(pipeline):
    from speechpipe.server.serve import ServerApp

    load = LoadOptions(admission=AdmissionOptions(
        capacity=1, max_queue=1, max_wait_s=600.0, expected_session_s=30.0,
        status_interval_s=0.5,
    ), degrade_enabled=False)  # the pipeline is shared with other tests: keep it at level 0
    app = ServerApp("127.0.0.1", 0, pipeline=pipeline, load=load)
    await app.start()
    await app.load()
    url = f"ws://127.0.0.1:{app.server.port}/ws"
    try:
        first = await _open(url)
        assert (await _next(first))["type"] == "started"

        second = await _open(url)  # the N+1th: waits in line, hears why and for how long
        queued = await _next(second)
        assert queued["type"] == "status" and queued["status"] == "queued"
        assert queued["detail"]["position"] == 1
        assert 0 < queued["detail"]["estimated_wait_s"] <= 30
        assert queued["detail"]["capacity"] == 1 and queued["message"]

        third = await _open(url)  # the N+2th: the line is full -> refused, retry hint, 1013
        refused = await _next(third)
        assert refused["type"] == "error" and refused["code"] == "over_capacity"
        assert refused["fatal"] is True and refused["retry_after_s"] >= 5
        await third.wait_closed()
        assert third.close_code == CloseCode.TRY_AGAIN

        more = await _next(second)  # still waiting: periodic updates
        assert more["status"] == "queued"

        await first.send(np.zeros(1600, "<i2").tobytes())
        await first.send(json.dumps({"type": "stop"}))
        while (await _next(first))["type"] != "end":
            pass
        await first.wait_closed()
        assert first.close_code == CloseCode.NORMAL

        event = await _next(second)
        while event.get("status") == "queued":
            event = await _next(second)
        assert event["type"] == "status" and event["status"] == "admitted"
        assert event["detail"]["waited_s"] > 0
        assert (await _next(second))["type"] == "started"
        await second.send(json.dumps({"type": "stop"}))
        while (await _next(second))["type"] != "end":
            pass
        await second.close()
        await asyncio.sleep(2 * load.tick_s)  # the load monitor exports what happened
        metrics = app.metrics.text().decode()
        assert "speechpipe_sessions_refused_total 1.0" in metrics
        assert "speechpipe_capacity_sessions 1.0" in metrics
        assert "speechpipe_asr_batch_size_count" in metrics
    finally:
        await app.stop(close_pipeline=False)
