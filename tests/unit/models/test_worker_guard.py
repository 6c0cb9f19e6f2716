"""Deadlines and circuit breakers on shared workers (``models.workers.guard``): the pure core,
the guarded executor with a hung call, and the text-MT worker on a real tiny CTranslate2 model
with faults injected at its boundary (``models.workers.faults``: a test seam, off otherwise)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from speechpipe.errors import WorkerError, WorkerTimeout, WorkerUnavailable
from speechpipe.models.workers import faults
from speechpipe.models.workers.guard import (
    BreakerState,
    CircuitBreaker,
    GuardedExecutor,
    LatencyBudget,
    WorkerGuard,
)


@pytest.fixture(autouse=True)
def _no_faults_left() -> Iterator[None]:
    yield
    faults.clear()


# --- the pure core -------------------------------------------------------------------------


def test_deadline_follows_the_measured_p99_within_floor_and_ceiling() -> None:
    budget = LatencyBudget(floor_s=0.5, ceiling_s=10.0, factor=4.0, window=100)
    assert budget.deadline_s() == 10.0  # nothing measured yet: the ceiling
    for _ in range(99):
        budget.observe(0.01)
    budget.observe(0.5)  # one slow call in 100 is above the p99 (nearest rank)
    assert budget.p99() == pytest.approx(0.01)
    for _ in range(5):
        budget.observe(0.5)
    assert budget.p99() == pytest.approx(0.5)
    assert budget.deadline_s() == pytest.approx(2.0)  # 4 x p99
    for _ in range(100):
        budget.observe(0.001)
    assert budget.deadline_s() == 0.5  # the floor: fast calls do not make it twitchy
    for _ in range(100):
        budget.observe(5.0)
    assert budget.deadline_s() == 10.0  # the ceiling
    with pytest.raises(ValueError):
        LatencyBudget(floor_s=2.0, ceiling_s=1.0)


def test_breaker_opens_after_repeated_failures_and_a_probe_closes_it() -> None:
    breaker = CircuitBreaker(failures=3, window_s=10.0, cooldown_s=2.0)
    breaker.failure(0.0)
    breaker.failure(1.0)
    assert breaker.state is BreakerState.CLOSED and breaker.allow(1.0)
    breaker.failure(20.0)  # the first two fell out of the window
    assert breaker.state is BreakerState.CLOSED
    breaker.failure(21.0)
    breaker.failure(22.0)
    assert breaker.state is BreakerState.OPEN and breaker.opened == 1
    assert not breaker.allow(23.0) and breaker.retry_after_s(23.0) == pytest.approx(1.0)
    assert breaker.allow(24.0)  # half-open: one probe
    assert breaker.state is BreakerState.HALF_OPEN
    assert not breaker.allow(24.5)  # nobody else while the probe runs
    breaker.failure(25.0)  # the probe failed: open again
    assert breaker.state is BreakerState.OPEN and breaker.opened == 2
    assert breaker.allow(27.0)
    assert not breaker.allow(27.1)
    assert breaker.allow(29.5)  # the probe never reported: another after a cooldown
    breaker.success(30.0)
    assert breaker.state is BreakerState.CLOSED and breaker.allow(30.0)


def test_guard_refuses_fast_while_open() -> None:
    now = [0.0]
    guard = WorkerGuard("x", breaker=CircuitBreaker(failures=2, cooldown_s=5.0),
                        clock=lambda: now[0])
    guard.failed()
    guard.failed()
    assert guard.health().down
    with pytest.raises(WorkerUnavailable) as info:
        guard.admit()
    assert info.value.code == "worker_unavailable" and info.value.retry_after_s == 5.0
    with pytest.raises(WorkerUnavailable):
        guard.refuse_if_down()
    assert guard.refused == 2
    now[0] = 5.0
    assert not guard.health().down  # half-open: takes a probe, /readyz says ready
    guard.refuse_if_down()  # a session may start
    guard.admit()  # the probe
    guard.succeeded(0.1)
    assert guard.health().breaker is BreakerState.CLOSED


# --- the executor: a hung call is abandoned, the queue goes on ---------------------------


def test_a_hung_job_is_abandoned_and_the_next_runs_on_a_new_thread() -> None:
    guard = WorkerGuard("drill", budget=LatencyBudget(floor_s=0.3, ceiling_s=0.3))
    executor = GuardedExecutor(guard, "drill-worker")
    stuck = threading.Event()
    try:
        started = time.monotonic()
        hung = executor.submit(stuck.wait, 5.0)
        queued = executor.submit(lambda: threading.current_thread().name)
        with pytest.raises(WorkerTimeout) as info:
            hung.result(timeout=3.0)
        abandoned_after = time.monotonic() - started
        assert 0.3 <= abandoned_after < 1.5, abandoned_after
        assert info.value.code == "worker_timeout"
        assert queued.result(timeout=2.0)  # the job queued behind the stuck one ran
        recovered = time.monotonic() - started - 0.3
        assert recovered < 2.0, recovered
        assert guard.abandoned == 1 and guard.restarts == 1
        failing = executor.submit(lambda: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            failing.result(timeout=2.0)
        assert guard.failures == 2
    finally:
        stuck.set()
        executor.shutdown(wait=True)


def test_the_queue_is_served_earliest_due_first_and_in_order_of_submission_on_ties() -> None:
    """``submit_due``: a job due sooner overtakes queued jobs due later (the TTS voice: a
    phrase whose listener is waiting goes before one whose listener still has speech
    queued); plain ``submit`` calls are due at once, so alone they stay first in, first out;
    a shutdown without cancelling runs what is queued before the thread ends."""
    guard = WorkerGuard("order", budget=LatencyBudget(floor_s=5.0, ceiling_s=5.0))
    executor = GuardedExecutor(guard, "order-worker")
    gate = threading.Event()
    served: list[str] = []
    try:
        blocker = executor.submit(gate.wait, 5.0)  # holds the thread while the queue fills
        now = time.monotonic()
        futures = [
            executor.submit_due(now + 3.0, served.append, "listener with 3 s queued"),
            executor.submit_due(now + 1.0, served.append, "listener with 1 s queued"),
            executor.submit(served.append, "plain 1"),
            executor.submit_due(now + 1.0, served.append, "another due in 1 s"),
            executor.submit(served.append, "plain 2"),
        ]
        gate.set()
        assert blocker.result(timeout=2.0)
        for future in futures:
            future.result(timeout=2.0)
        assert served == ["plain 1", "plain 2", "listener with 1 s queued",
                          "another due in 1 s", "listener with 3 s queued"]
        gate.clear()
        executor.submit(gate.wait, 0.2)
        last = executor.submit_due(time.monotonic() + 60.0, served.append, "due in a minute")
        executor.shutdown(wait=True)
        assert last.result(timeout=0) is None and served[-1] == "due in a minute"
    finally:
        gate.set()
        executor.shutdown(wait=True)


# --- the text-MT worker on a real tiny model ----------------------------------------------

ctranslate2 = pytest.importorskip("ctranslate2")
pytest.importorskip("sentencepiece")


@pytest.fixture(scope="module")
def nllb_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from speechpipe.bench.tiny_mt import build_tiny_mt

    root = tmp_path_factory.mktemp("tiny-mt-drill")
    return build_tiny_mt(root / "nllb", "nllb", spm_cache=root / "spm")


def test_mt_worker_survives_a_hang_and_an_exception_storm(nllb_path: Path) -> None:
    from speechpipe.models.mt.ct2_translator import Ct2TextTranslator, TextMtRequest
    from speechpipe.models.mt.ct2_worker import Ct2TranslationWorker

    guard = WorkerGuard("mt:drill", required=False,
                        budget=LatencyBudget(floor_s=0.5, ceiling_s=0.5),
                        breaker=CircuitBreaker(failures=3, cooldown_s=0.5))
    worker = Ct2TranslationWorker(Ct2TextTranslator(nllb_path, intra_threads=1), guard=guard,
                                  window_s=0.0, max_batch=1)
    request = TextMtRequest("The cat sees a dog today.", "en", "fr")

    async def drill() -> None:
        async with worker:
            assert (await worker.translate(request)).text  # healthy
            faults.arm("mt", "hang", seconds=5.0)
            hung = asyncio.ensure_future(worker.translate(request))
            await asyncio.sleep(0.05)
            other = asyncio.ensure_future(worker.translate(request))  # queued behind it
            with pytest.raises(WorkerTimeout):
                await asyncio.wait_for(hung, 3.0)
            assert (await asyncio.wait_for(other, 3.0)).text  # the replacement served it
            faults.release()
            assert guard.restarts == 1
            faults.arm("mt", "raise", times=3)
            for _ in range(2):  # two failures (plus the abandoned call): the breaker opens
                with pytest.raises(WorkerError):
                    await worker.translate(request)
            assert guard.health().down
            began = time.monotonic()
            with pytest.raises(WorkerUnavailable):
                await worker.translate(request)
            assert time.monotonic() - began < 0.05  # refused at once, not queued
            await asyncio.sleep(0.6)  # the cooldown: the next call is the probe
            with pytest.raises(WorkerError):  # the third injected failure: open again
                await worker.translate(request)
            assert guard.health().down
            await asyncio.sleep(0.6)
            assert (await worker.translate(request)).text  # the probe succeeds: closed
            assert guard.health().breaker is BreakerState.CLOSED

    asyncio.run(asyncio.wait_for(drill(), 20.0))


def test_a_warm_up_on_a_serving_worker_keeps_what_real_calls_measured() -> None:
    """``measured``/``restore``: a warm-up's tiny calls are not kept, and what real calls
    measured before it is (a drill or a reload warms a worker that is serving: its next
    deadline must still be the real calls', not the ceiling)."""
    budget = LatencyBudget(floor_s=0.5, ceiling_s=20.0)
    for seconds in (0.3, 0.4, 0.5):
        budget.observe(seconds)
    before = budget.deadline_s()
    kept = budget.measured()
    budget.observe(0.001)  # the warm-up's call
    budget.restore(kept)
    assert budget.count == 3 and budget.deadline_s() == before == 2.0
    budget.restore(())  # a worker that never served: the ceiling, as before any call
    assert budget.deadline_s() == 20.0
