"""Admission control's pure core: slots, the waiting line, wait estimates and refusals, and
the ``serve`` flags that set them (what clients of a real server receive: the slow tier)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from speechpipe.config import PipelineOptions
from speechpipe.errors import AdmissionError
from speechpipe.server.admission import AdmissionCore, AdmissionGate, AdmissionOptions
from speechpipe.server.options import LoadOptions
from speechpipe.stages.frames import StatusEvent


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
