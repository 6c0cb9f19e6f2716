"""Admission control: the pure core (slots, line, estimates, refusals) and, on a real server
with ``--capacity 1`` over the real pipeline, what the N+1th and N+2th clients receive."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.client import connect

from speechpipe.config import PipelineOptions
from speechpipe.errors import AdmissionError
from speechpipe.server.admission import AdmissionCore, AdmissionGate, AdmissionOptions
from speechpipe.server.options import LoadOptions
from speechpipe.stages.frames import StatusEvent
from speechpipe.transport.codes import CloseCode


def core(**kwargs: Any) -> AdmissionCore:
    defaults: dict[str, Any] = {"capacity": 2, "max_queue": 3, "max_wait_s": 1000.0,
                                "expected_session_s": 100.0}
    return AdmissionCore(AdmissionOptions(**{**defaults, **kwargs}))


def test_admits_up_to_capacity_then_queues_in_order():
    c = core()
    assert c.request(1, "a", now=0).kind == "admitted"
    assert c.request(2, "b", now=10).kind == "admitted"
    third = c.request(3, "c", now=20)
    fourth = c.request(4, "d", now=20)
    assert (third.kind, third.position) == ("queued", 1)
    assert (fourth.kind, fourth.position) == ("queued", 2)
    # expected remaining: a 100-20=80, b 100-10=90 -> position 1 waits 80, position 2 90
    assert third.wait_s == pytest.approx(80) and fourth.wait_s == pytest.approx(90)
    assert c.release(1, now=30) == [3]  # first come, first served
    assert c.status(4, now=30).position == 1
    assert c.release(4, now=31) == []  # a waiting client gave up: nobody promoted
    assert c.status(3, now=31).kind == "admitted"


def test_refuses_when_the_line_is_full_or_the_wait_too_long():
    c = core(max_queue=1)
    c.request(1, "a", now=0)
    c.request(2, "b", now=0)
    assert c.request(3, "c", now=0).kind == "queued"
    full = c.request(4, "d", now=0)
    assert full.kind == "refused" and "line is full" in full.reason
    assert full.wait_s >= c.options.min_retry_s
    slow = core(max_wait_s=50.0)
    slow.request(1, "a", now=0)
    slow.request(2, "b", now=0)
    refused = slow.request(3, "c", now=0)  # would wait ~100 s
    assert refused.kind == "refused" and refused.wait_s == pytest.approx(100)
    assert slow.refused == 1


def test_wait_estimate_wraps_round_the_slots_and_learns_session_length():
    c = core(capacity=2, max_queue=10)
    c.request(1, "a", now=0)
    c.request(2, "b", now=0)
    # positions 1, 2 wait for the two slots, 3 for the first slot's second turn
    assert c.estimated_wait(3, now=0) == pytest.approx(100 + 100)
    c.release(1, now=20)  # a 20 s session pulls the expected length down
    assert c.expected_session_s < 100


def test_per_client_cap_counts_active_and_waiting():
    c = core(per_client=2, capacity=1)
    assert c.request(1, "same", now=0).kind == "admitted"
    assert c.request(2, "same", now=0).kind == "queued"
    capped = c.request(3, "same", now=0)
    assert capped.kind == "refused" and "already has 2" in capped.reason
    assert c.request(4, "other", now=0).kind == "queued"


async def test_gate_sends_queued_then_admitted_and_refuses_with_a_retry_hint():
    gate = AdmissionGate(core(capacity=1, max_queue=1))
    heard: list[StatusEvent] = []

    async def notify(event: StatusEvent) -> None:
        heard.append(event)

    first = gate.slot("a", notify)
    await first.__aenter__()
    waiting = asyncio.ensure_future(gate.slot("b", notify).__aenter__())
    await asyncio.sleep(0.05)
    assert [e.status for e in heard] == ["queued"]
    assert heard[0].detail["position"] == 1 and heard[0].detail["estimated_wait_s"] > 0
    with pytest.raises(AdmissionError) as refused:
        async with gate.slot("c", notify):
            pass
    assert refused.value.retry_after_s >= 5
    await first.__aexit__(None, None, None)
    await asyncio.wait_for(waiting, 5)
    assert heard[-1].status == "admitted"


def test_cli_flags_reach_the_options():
    from speechpipe.cli import build_parser
    from speechpipe.config import Config
    from speechpipe.server.serve import serve_config

    parser = build_parser()
    config = serve_config(parser.parse_args([
        "serve", "--capacity", "3", "--max-queue", "2", "--per-client-sessions", "1",
        "--no-degrade"]))
    assert config.pipeline == PipelineOptions()
    load = config.server.load
    assert load.admission.capacity == 3 and load.admission.max_queue == 2
    assert load.admission.per_client == 1
    assert load.degrade_enabled is False
    # unset flags keep the dataclass defaults (one place for every default)
    assert serve_config(parser.parse_args(["serve"])).server.load == LoadOptions()
    assert serve_config(parser.parse_args(["serve"])).server.load == Config().server.load


# -- a real server, real pipeline ---------------------------------------------------------

async def _open(url: str) -> Any:
    ws = await connect(url, max_size=None)
    await ws.send(json.dumps({"type": "start", "source_lang": "es", "sample_rate": 16000}))
    return ws


async def _next(ws: Any) -> dict[str, Any]:
    return json.loads(await asyncio.wait_for(ws.recv(), 30))


@pytest.mark.slow
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
