"""Operations metrics: the listener-latency core, the admission wait and the ASR queue waits
as observed, and label sets that stay bounded (counted by a real server on loopback: the cli
tier)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from speechpipe.server.admission import AdmissionCore, AdmissionGate, AdmissionOptions
from speechpipe.server.metrics import ServerMetrics
from speechpipe.server.observe import ListenerLatency, Observation
from speechpipe.stages.frames import SpeechChunk, TextHypothesis, UtteranceEnd, VadEvent

live = pytest.mark.asyncio(loop_scope="session")  # the loop the fixtures run in

RATE = 16_000


def value(metrics: ServerMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_close_labels_stay_bounded() -> None:
    metrics = ServerMetrics()
    metrics.connection_closed(4321, "weird", session=False)  # a code the server never sends
    metrics.connection_closed(None, "client_closed", session=False)
    metrics.connection_closed(1001, "going_away", session=False)  # shutdown: no refusal
    assert value(metrics, "speechpipe_connections_closed_total", code="other",
                 reason="weird") == 1
    assert value(metrics, "speechpipe_refusals_total", code="other", reason="weird") == 1
    assert value(metrics, "speechpipe_refusals_total", code="client",
                 reason="client_closed") == 0
    assert value(metrics, "speechpipe_refusals_total", code="1001", reason="going_away") == 0


@live
async def test_admission_wait_is_observed_for_waiting_and_immediate_sessions() -> None:
    metrics = ServerMetrics()
    gate = AdmissionGate(AdmissionCore(AdmissionOptions(capacity=1, expected_session_s=1.0)),
                         on_admitted=metrics.load.admission_wait.observe)
    notices: list[str] = []

    async def notify(event: Any) -> None:
        notices.append(event.status)

    release = asyncio.Event()

    async def first() -> None:
        async with gate.slot("a", notify):
            await release.wait()

    async def second() -> None:
        async with gate.slot("b", notify):
            pass

    holder = asyncio.create_task(first())
    await asyncio.sleep(0.05)
    waiter = asyncio.create_task(second())
    await asyncio.sleep(0.3)
    release.set()
    await asyncio.wait_for(asyncio.gather(holder, waiter), 5)
    assert notices[0] == "queued" and notices[-1] == "admitted"
    count = value(metrics, "speechpipe_admission_wait_seconds_count")
    total = value(metrics, "speechpipe_admission_wait_seconds_sum")
    assert count == 2
    assert 0.25 <= total < 3.0  # the second waited ~0.3 s; the first not at all
    assert value(metrics, "speechpipe_admission_wait_seconds_bucket", le="0.01") == 1


# -- listener latency (pure core) -----------------------------------------------------------
def hyp(side: str, committed: str, audio_end_s: float, at_s: float, u: int = 0) -> TextHypothesis:
    return TextHypothesis(side, u, 1, committed, "x", "es",  # type: ignore[arg-type]
                          0, int(audio_end_s * RATE), int(at_s * RATE))


def chunk(at_s: float, seconds: float, u: int = 0) -> SpeechChunk:
    return SpeechChunk(np.zeros(int(seconds * 22050), np.int16), 22050, u, "w", int(at_s * RATE))


def test_listener_latency_from_scripted_events() -> None:
    core = ListenerLatency()
    seen: list[Observation] = []
    events = [
        VadEvent("start", 0, int(1.0 * RATE), int(1.3 * RATE)),
        hyp("source", "", 2.0, 2.2),  # nothing committed: no commit latency
        hyp("source", "uno", 3.0, 3.4),
        hyp("target", "one", 3.0, 3.5),
        chunk(3.6, 1.0),  # StartOffset 3.6 - 1.0
        hyp("target", "one", 4.0, 4.2),  # committed did not grow
        chunk(4.0, 1.5),  # laid after the first: 4.6 .. 6.1
        VadEvent("end", 0, int(5.0 * RATE), int(5.5 * RATE)),
        UtteranceEnd(0, int(6.0 * RATE), "uno", "one"),  # EndOffset 6.1 - 5.0
    ]
    for event in events:
        seen += core.feed(event)
    assert [(o.kind, o.side) for o in seen] == [
        ("commit", "source"), ("commit", "target"), ("start_offset", ""), ("end_offset", ""),
    ]
    assert seen[0].seconds == pytest.approx(0.4)
    assert seen[1].seconds == pytest.approx(0.5)
    assert seen[2].seconds == pytest.approx(2.6)
    assert seen[3].seconds == pytest.approx(1.1)
    assert not core._speech_start and not core._laid_end  # per-utterance state freed


def test_asr_queue_waits_are_counted_by_urgency() -> None:
    """Whether the decodes that end a phrase wait behind partials under load: the queue wait
    histogram has one series per urgency class (every one from the start), and a class it
    does not know goes to ``unknown`` (bounded labels)."""
    metrics = ServerMetrics()
    wait_count = "speechpipe_asr_queue_wait_seconds_count"
    for label in ("commit", "first_words", "refresh"):
        assert metrics.registry.get_sample_value(wait_count, {"urgency": label}) == 0
    metrics.load.batch_done(3, [0.5, 0.1, 0.2], 0.4, ["commit", "refresh", "refresh"])
    metrics.load.batch_done(2, [0.3, 0.0], 0.4, ["first_words", "sideways"])
    metrics.load.batch_done(1, [0.7], 0.4)  # an observer that does not say
    assert value(metrics, wait_count, urgency="commit") == 1
    assert value(metrics, wait_count, urgency="refresh") == 2
    assert value(metrics, wait_count, urgency="first_words") == 1
    assert value(metrics, wait_count, urgency="unknown") == 2
    assert value(metrics, "speechpipe_asr_queue_wait_seconds_sum",
                 urgency="refresh") == pytest.approx(0.3)
    assert value(metrics, "speechpipe_asr_batch_size_count") == 3
    # the call time of each request, by urgency and lane (no lane said: a usual worker)
    call_count = "speechpipe_asr_call_seconds_count"
    assert value(metrics, call_count, urgency="refresh", lane="usual") == 2
    metrics.load.batch_done(1, [0.1], 0.25, ["commit"], "urgent")
    metrics.load.batch_done(1, [0.1], 0.5, ["commit"], "sideways")  # bounded: usual
    assert value(metrics, call_count, urgency="commit", lane="urgent") == 1
    assert value(metrics, call_count, urgency="commit", lane="usual") == 2
    assert value(metrics, "speechpipe_asr_call_seconds_sum",
                 urgency="commit", lane="urgent") == pytest.approx(0.25)
