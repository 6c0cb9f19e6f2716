"""The urgent lane of the shared ASR worker (``workers.asr_lanes``, ``workers.batching``).

- Scripted engines (which thread runs which request is about the queue, not the model): a
  commit runs on the lane while every usual worker is held by a partial; the lane takes
  no partial that only refreshes; the usual workers take a commit when the lane is busy;
  with ``urgent_first_words`` (the default) the lane takes an utterance's first partials
  too; without a lane nothing changes; off Linux there is no lane; a commit stuck on the
  lane is abandoned at its deadline and the lane goes on, on a thread started in its place
  (named as the lane's, at the process's priority).
- Real threads (Linux): the usual workers and their model's threads run at
  ``background_nice``, the lane at the process's own priority; ``lower_priority`` never
  raises a thread's priority.

The real model (the pipeline's lane decodes what the engine decodes alone): the slow tier."""

from __future__ import annotations

import dataclasses
import os
import threading
import time

import pytest

from speechpipe.errors import WorkerTimeout
from speechpipe.models.whisper.engine import WhisperResult
from speechpipe.models.workers import asr_lanes
from speechpipe.models.workers import guard as worker_guard
from speechpipe.models.workers.asr_lanes import (
    PER_THREAD_PRIORITY,
    lower_priority,
    lower_this_thread,
    threads_now,
    urgent_lane_workers,
)
from speechpipe.models.workers.batching import AsrBatcher, BatchOptions, urgent_classes
from speechpipe.models.workers.guard import LatencyBudget, WorkerGuard
from tests.fakes import ScriptedEngine, req

linux_only = pytest.mark.skipif(not PER_THREAD_PRIORITY, reason="per-thread nice is Linux's")


class RecordingEngine(ScriptedEngine):
    """A scripted engine that notes the nice value of the thread running each call."""

    def __init__(self, native_threads: frozenset[int] = frozenset()) -> None:
        super().__init__()
        self.native_threads = native_threads
        self.nice: list[int] = []
        self.threads: list[str] = []  # the name of the thread that ran each call

    def run_batch(self, requests):
        self.nice.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        self.threads.append(threading.current_thread().name)
        return super().run_batch(requests)


class HangsOnceEngine(RecordingEngine):
    """Its first call hangs until ``release`` is set (a stuck model call) and then fails;
    later calls answer at once. ``threads`` names the stuck call's thread first."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.hung = False

    def run_batch(self, requests):
        if self.hung:
            return super().run_batch(requests)
        self.hung = True
        self.threads.append(threading.current_thread().name)
        self.release.wait(10)
        return [RuntimeError("released after its deadline")] * len(requests)


def until(condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def lane(workers: int = 2, **options) -> tuple[RecordingEngine, RecordingEngine, AsrBatcher]:
    usual, urgent = RecordingEngine(), RecordingEngine()
    batcher = AsrBatcher(usual, BatchOptions(enabled=False, workers=workers, **options),
                         urgent_engine=urgent)
    return usual, urgent, batcher


def test_a_commit_overtakes_partials_that_hold_every_usual_worker():
    usual, urgent, batcher = lane()
    try:
        usual.gate.clear()
        partials = [batcher.submit(req(2.0)) for _ in range(2)]
        until(lambda: len(usual.calls) == 2)  # both usual workers inside a partial's call
        commit = batcher.submit(req(3.0, partial=False))
        assert isinstance(commit.result(5), WhisperResult)  # while the partials still run
        assert not any(p.done() for p in partials)
        usual.gate.set()
        for partial in partials:
            partial.result(5)
    finally:
        usual.gate.set()
        batcher.close()
    assert [r.partial for call in urgent.calls for r in call] == [False]
    assert batcher.stats.urgent_calls == 1


def test_the_lane_never_takes_a_partial_and_the_usual_workers_take_a_commit_it_cannot():
    usual, urgent, batcher = lane(workers=1)
    try:
        usual.gate.clear()
        urgent.gate.clear()
        held = batcher.submit(req(2.0))  # the usual worker: the lane takes no partial
        assert usual.entered.wait(5)
        first = batcher.submit(req(3.0, partial=False))  # only the lane is free
        assert urgent.entered.wait(5)
        usual.gate.set()
        held.result(5)
        second = batcher.submit(req(3.0, partial=False))  # the lane is busy: the usual worker
        second.result(5)
        batcher.submit(req(2.0)).result(5)
        assert not first.done()
        urgent.gate.set()
        first.result(5)
    finally:
        usual.gate.set()
        urgent.gate.set()
        batcher.close()
    assert [r.partial for call in urgent.calls for r in call] == [False]
    assert sorted(r.partial for call in usual.calls for r in call) == [False, True, True]


def test_the_observer_hears_which_lane_ran_each_call():
    """The server's metrics label each call with its lane: the partial on a usual worker,
    the commit that overtook it on the lane (``speechpipe_asr_call_seconds``)."""
    lanes: list[tuple[str, list[str]]] = []

    class Heard:
        def batch_done(self, requests, waits, seconds, urgencies=(), lane="usual"):
            lanes.append((lane, list(urgencies)))

        def dropped(self, reason):
            pass

    usual, urgent, batcher = lane(workers=1)
    batcher.observer = Heard()
    try:
        usual.gate.clear()
        partial = batcher.submit(req(2.0))
        assert usual.entered.wait(5)
        batcher.submit(req(3.0, partial=False)).result(5)  # on the lane, the partial held
        usual.gate.set()
        partial.result(5)
    finally:
        usual.gate.set()
        batcher.close()
    assert lanes == [("urgent", ["commit"]), ("usual", ["refresh"])]


def test_first_words_go_to_the_lane_only_when_asked():
    assert urgent_classes(BatchOptions()) == {"commit", "first_words"}
    assert urgent_classes(BatchOptions(urgent_first_words=False)) == {"commit"}
    opening = dataclasses.replace(req(2.0), opening=True)
    for first_words, lane_took in ((False, []), (True, [True])):
        usual, urgent, batcher = lane(urgent_first_words=first_words)
        try:
            usual.gate.clear()
            holders = [batcher.submit(req(2.0)) for _ in range(2)]
            until(lambda calls=usual.calls: len(calls) == 2)
            future = batcher.submit(opening)
            if first_words:
                future.result(5)
            usual.gate.set()
            future.result(5)
            for holder in holders:
                holder.result(5)
        finally:
            usual.gate.set()
            batcher.close()
        assert [r.partial for call in urgent.calls for r in call] == lane_took


def test_a_commit_stuck_on_the_lane_is_abandoned_and_a_new_lane_thread_takes_the_next(
        monkeypatch):
    """The watchdog replaces a stuck urgent thread with an urgent one: the next commit runs
    on the lane's model, on a thread named as the lane's, at the process's own priority,
    while the usual worker is held by a partial. A thread is born with its creator's nice
    value, and the watchdog starts the replacements: it must not be born of the first
    worker that called it, a usual one at ``background_nice`` (a fresh watchdog here, so
    the first call is the usual worker's whatever ran before)."""
    monkeypatch.setattr(worker_guard, "_WATCHDOG", worker_guard._Watchdog())
    usual, urgent = RecordingEngine(), HangsOnceEngine()
    guard = WorkerGuard("asr", required=True, budget=LatencyBudget(floor_s=0.3, ceiling_s=0.3))
    batcher = AsrBatcher(usual, BatchOptions(enabled=False, workers=1), urgent_engine=urgent,
                         guard=guard)
    try:
        batcher.submit(req(2.0)).result(5)  # the first guarded call: a usual worker's
        stuck = batcher.submit(req(3.0, partial=False))
        with pytest.raises(WorkerTimeout):
            stuck.result(5)  # failed at the deadline, its thread still inside the call
        until(lambda: guard.restarts == 1)  # counted just after the futures fail
        assert guard.abandoned == 1
        usual.gate.clear()
        held = batcher.submit(req(2.0))  # the usual worker: only the lane may take the next
        assert usual.entered.wait(5)
        assert isinstance(batcher.submit(req(3.0, partial=False)).result(5), WhisperResult)
        assert not held.done()
        usual.gate.set()
        held.result(5)
    finally:
        usual.gate.set()
        urgent.release.set()
        batcher.close()
    stuck_thread, replacement = urgent.threads
    assert stuck_thread != replacement and replacement.startswith("asr-batcher-urgent-")
    assert urgent.nice == [os.getpriority(os.PRIO_PROCESS, 0)]  # the replacement's call
    if PER_THREAD_PRIORITY and os.getpriority(os.PRIO_PROCESS, 0) < 10:
        assert set(usual.nice) == {10}  # the usual worker ran below it
    assert [r.partial for call in usual.calls for r in call] == [True, True]


def test_without_a_lane_every_request_runs_on_the_one_engine():
    usual, urgent = RecordingEngine(), RecordingEngine()
    batcher = AsrBatcher(usual, BatchOptions(workers=1, urgent_workers=0), urgent_engine=urgent)
    try:
        for partial in (True, False):
            batcher.submit(req(partial=partial)).result(5)
    finally:
        batcher.close()
    assert batcher.urgent_engine is None and not urgent.calls and len(usual.calls) == 2
    assert set(usual.nice) == {os.getpriority(os.PRIO_PROCESS, 0)}  # nobody lowered


def test_no_lane_where_threads_have_no_priorities_of_their_own(monkeypatch):
    assert urgent_lane_workers(0) == 0
    monkeypatch.setattr(asr_lanes, "PER_THREAD_PRIORITY", True)
    assert urgent_lane_workers(2) == 2
    monkeypatch.setattr(asr_lanes, "PER_THREAD_PRIORITY", False)  # macOS, Windows
    assert urgent_lane_workers(1) == 0  # no second model: the lane would not pay there


@linux_only
def test_the_usual_workers_and_their_model_threads_run_below_the_lane():
    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    if base >= 10:
        pytest.skip("this process already runs at nice >= 10")
    started, stop = threading.Event(), threading.Event()
    ids: list[int] = []

    def model_thread() -> None:  # stands for one of CTranslate2's inter-threads
        ids.append(threading.get_native_id())
        started.set()
        stop.wait(10)

    thread = threading.Thread(target=model_thread, daemon=True)
    thread.start()
    assert started.wait(5)
    usual, urgent = RecordingEngine(frozenset(ids)), RecordingEngine()
    batcher = AsrBatcher(usual, BatchOptions(enabled=False, workers=1, background_nice=12),
                         urgent_engine=urgent)
    try:
        assert os.getpriority(os.PRIO_PROCESS, ids[0]) == 12
        usual.gate.clear()
        partial = batcher.submit(req())
        assert usual.entered.wait(5)
        batcher.submit(req(partial=False)).result(5)  # only the lane is free
        usual.gate.set()
        partial.result(5)
    finally:
        usual.gate.set()
        stop.set()
        batcher.close()
    assert usual.nice == [12] and urgent.nice == [base]


@linux_only
def test_lowering_a_priority_never_raises_one():
    seen: dict[str, int] = {}
    before = threads_now()
    done = threading.Event()

    def worker() -> None:
        me = threading.get_native_id()
        assert me in threads_now() - before  # a new thread shows in /proc
        assert lower_this_thread(15) == 1
        assert lower_priority([me], 10) == 1  # already lower: left at 15
        seen["nice"] = os.getpriority(os.PRIO_PROCESS, me)
        done.set()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(10)
    assert done.is_set() and seen["nice"] == 15
    assert lower_priority([threading.get_native_id()], 0) == 0  # 0: nothing to do
