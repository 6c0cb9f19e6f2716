"""The shared batching ASR worker (``models/workers/batching.py``) on scripted engines (the
real model: the slow tier).

- Ordering and dropping are about the queue, not the model: priority ordering, a superseded
  partial is never computed (engine calls counted), finals are never dropped, a cancelled
  caller's request is skipped, errors reach only their request.
- The ASR stage on the worker: under a slow engine, stale partials are superseded (never an
  error event) and the committed text still comes out whole."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Sequence

import numpy as np
import pytest

from speechpipe.errors import Superseded, WorkerError
from speechpipe.models.workers.batching import (
    PRIORITY_LIVE,
    PRIORITY_REPLAY,
    URGENCIES,
    AsrBatcher,
    BatchOptions,
    decode_deadline_s,
    urgency,
)
from speechpipe.stages.asr import AsrOptions, AsrStage
from speechpipe.stages.channels import Channel
from speechpipe.stages.clock import WallStreamClock
from speechpipe.stages.frames import STREAM_RATE, ErrorEvent, TextHypothesis, VadEvent
from speechpipe.stages.vad import LabeledAudio
from tests.fakes import ScriptedEngine, hold_worker, req

# -- scripted engine -----------------------------------------------------------------------


def test_priority_order_live_finals_then_live_partials_then_replay():
    engine = ScriptedEngine()
    batcher = AsrBatcher(engine, BatchOptions(enabled=False, workers=1))
    try:
        hold_worker(engine, batcher)
        replay_final = batcher.submit(req(partial=False), priority=PRIORITY_REPLAY)
        live_partial = batcher.submit(req(), priority=PRIORITY_LIVE)
        live_final = batcher.submit(req(partial=False), priority=PRIORITY_LIVE)
        engine.gate.set()
        for future in (replay_final, live_partial, live_final):
            future.result(5)
    finally:
        batcher.close()
    order = [call[0] for call in engine.calls[1:]]
    # live before replay; within live, the final's shorter deadline goes first
    assert [r.partial for r in order] == [False, True, False]
    assert order[0] is not None and order[2].partial is False
    assert engine.calls[1][0] is not engine.calls[3][0]
    assert len(engine.calls) == 4  # one call each: batching off


def test_the_observer_hears_each_requests_wait_and_urgency():
    """A commit, an utterance's first words and a refresh queued behind a running call: the
    observer (the server's metrics) gets one wait and one urgency class per request, the
    classes that ``decode_deadline_s`` serves them by."""

    class Heard:
        def __init__(self) -> None:
            self.batches: list[tuple[int, list[float], list[str]]] = []
            self.lanes: list[str] = []

        def batch_done(self, requests: int, waits: list[float], seconds: float,
                       urgencies: Sequence[str] = (), lane: str = "usual") -> None:
            self.batches.append((requests, list(waits), list(urgencies)))
            self.lanes.append(lane)

        def dropped(self, reason: str) -> None:
            pass

    engine = ScriptedEngine()
    batcher = AsrBatcher(engine, BatchOptions(enabled=False, workers=1))
    heard = Heard()
    batcher.observer = heard
    options = BatchOptions()
    refresh, commit = req(), req(partial=False)
    first_words = dataclasses.replace(req(), opening=True)
    assert [urgency(r) for r in (commit, first_words, refresh)] == list(URGENCIES)
    assert [decode_deadline_s(r, options) for r in (commit, first_words, refresh)] == [
        options.final_deadline_s, options.opening_deadline_s, options.partial_deadline_s]
    try:
        hold_worker(engine, batcher)
        futures = [batcher.submit(r, priority=PRIORITY_LIVE)
                   for r in (refresh, first_words, commit)]
        time.sleep(0.05)  # they wait behind the held call
        engine.gate.set()
        for future in futures:
            future.result(5)
    finally:
        batcher.close()
    assert [b[2] for b in heard.batches] == [["commit"], ["commit"], ["first_words"],
                                             ["refresh"]]  # the held call was a commit too
    assert all(len(waits) == requests == 1 for requests, waits, _ in heard.batches)
    assert min(b[1][0] for b in heard.batches[1:]) >= 0.04  # they did wait
    assert heard.lanes == ["usual"] * 4  # no urgent lane here


def test_a_batch_is_the_most_urgent_request_and_its_bucket():
    engine = ScriptedEngine()
    batcher = AsrBatcher(
        engine, BatchOptions(window_s=0.0, max_batch=3, workers=1, group_min_queue=2)
    )
    try:
        hold_worker(engine, batcher)
        other_bucket = batcher.submit(req(5.0), priority=PRIORITY_LIVE)
        a = [batcher.submit(req(1.2), priority=PRIORITY_REPLAY) for _ in range(2)]
        urgent = batcher.submit(req(1.5, partial=False), priority=PRIORITY_LIVE)
        engine.gate.set()
        for future in (other_bucket, *a, urgent):
            future.result(5)
    finally:
        batcher.close()
    first, second = engine.calls[1], engine.calls[2]
    assert first[0].partial is False  # the live final leads ...
    assert len(first) == 3  # ... and takes both replay requests of its bucket along
    assert len(second) == 1 and len(second[0].audio) == 5 * STREAM_RATE
    assert batcher.stats.engine_calls == 3 and batcher.stats.mean_batch == pytest.approx(5 / 3)


def test_superseded_partial_is_never_computed():
    engine = ScriptedEngine()
    batcher = AsrBatcher(engine, BatchOptions(window_s=0.0, workers=1))
    try:
        hold_worker(engine, batcher)
        old = req(1.0)
        old_future = batcher.submit(old)
        newer = req(1.9)
        new_future = batcher.replace(old, newer)
        assert new_future is not None
        with pytest.raises(Superseded):
            old_future.result(1)
        newest = req(1.95)
        newest_future = batcher.replace(newer, newest)  # again: it is still queued
        assert newest_future is not None
        assert isinstance(new_future.exception(1), Superseded)
        engine.gate.set()
        assert newest_future.result(5).decodes
    finally:
        batcher.close()
    computed = {id(r) for call in engine.calls for r in call}
    assert id(old) not in computed and id(newer) not in computed and id(newest) in computed
    assert len(engine.calls) == 2  # the blocker, then only the newest request
    assert batcher.stats.superseded == 2


def test_finals_and_running_requests_are_never_dropped():
    engine = ScriptedEngine()
    batcher = AsrBatcher(engine, BatchOptions(window_s=0.0, workers=1))
    try:
        running = req(9.0)  # a partial the worker is already computing
        engine.gate.clear()
        running_future = batcher.submit(running)
        assert engine.entered.wait(5)
        final = req(1.0, partial=False)
        final_future = batcher.submit(final)
        assert batcher.replace(final, req(2.0)) is None
        assert batcher.withdraw(final) is False
        assert batcher.replace(running, req(2.0)) is None
        assert batcher.withdraw(running) is False
        engine.gate.set()
        assert final_future.result(5).decodes
        assert running_future.result(5).decodes
    finally:
        batcher.close()
    assert batcher.stats.superseded == 0 and batcher.stats.withdrawn == 0


async def test_a_cancelled_callers_request_is_skipped():
    engine = ScriptedEngine()
    batcher = AsrBatcher(engine, BatchOptions(window_s=0.0, workers=1))
    try:
        await asyncio.to_thread(hold_worker, engine, batcher)
        gone = req(1.0)
        waiter = asyncio.ensure_future(batcher.recognize(gone))
        await asyncio.sleep(0.01)
        waiter.cancel()  # the session ended
        with contextlib.suppress(asyncio.CancelledError):
            await waiter
        await asyncio.sleep(0.01)  # the cancellation reaches the worker's future
        kept = batcher.submit(req(1.0))
        engine.gate.set()
        await asyncio.wrap_future(kept)
    finally:
        batcher.close()
    assert id(gone) not in {id(r) for call in engine.calls for r in call}
    assert batcher.stats.cancelled == 1


def test_an_error_reaches_only_its_request_and_the_worker_goes_on():
    engine = ScriptedEngine()
    batcher = AsrBatcher(
        engine, BatchOptions(window_s=0.0, max_batch=4, workers=1, group_min_queue=2)
    )
    try:
        hold_worker(engine, batcher)
        bad = req(1.0)
        engine.fail.add(id(bad))
        futures = [batcher.submit(r) for r in (req(1.0), bad, req(1.0))]
        engine.gate.set()
        assert isinstance(futures[1].exception(5), WorkerError)
        assert futures[0].result(5).decodes and futures[2].result(5).decodes
        after = batcher.submit(req(1.0))
        assert after.result(5).decodes
    finally:
        batcher.close()
    assert batcher.stats.failed == 1


# -- the ASR stage on the worker ----------------------------------------------------------

async def test_stage_supersedes_stale_partials_under_a_slow_worker():
    """A worker slower than the audio: partials queued behind other sessions' work are
    replaced by newer ones (never computed, never an error event); the text comes out whole."""
    engine = ScriptedEngine(call_s=0.45)
    batcher = AsrBatcher(engine, BatchOptions(window_s=0.0, max_batch=1, workers=1))
    client = batcher.client()
    stage = AsrStage(client, WallStreamClock(), options=AsrOptions(step_s=0.2, min_voiced_s=0.2),
                     language="es", queue=client)
    inbox: Channel[LabeledAudio] = Channel(1000)
    outbox: Channel[TextHypothesis] = Channel(1000)
    events: Channel = Channel(1000)

    async def speak() -> None:
        other = batcher.client()  # another session keeps the worker busy
        for _ in range(4):
            asyncio.ensure_future(other(req(6.0, partial=False)))
        start = int(0.2 * STREAM_RATE)
        chunk = int(0.1 * STREAM_RATE)
        inbox.put_nowait(LabeledAudio(np.full(start, 100, np.int16), 0, start,
                                      (VadEvent("start", 0, 0, start),), time.monotonic()))
        pts = start
        while pts < 4 * STREAM_RATE:
            await asyncio.sleep(0.05)
            inbox.put_nowait(LabeledAudio(np.full(chunk, 100, np.int16), pts, chunk, (),
                                          time.monotonic()))
            pts += chunk
        inbox.put_nowait(LabeledAudio(np.zeros(chunk, np.int16), pts, 0,
                                      (VadEvent("end", 0, pts, pts + chunk),), time.monotonic()))
        inbox.close()

    try:
        async with asyncio.timeout(30):
            async with asyncio.TaskGroup() as group:
                group.create_task(speak())
                group.create_task(stage.run(inbox, outbox, events))
    finally:
        batcher.close()
    events.close()  # the stage leaves it open (the TTS stage closes it in a pipeline)
    hypotheses = [h async for h in outbox]
    emitted = [e async for e in events]
    assert not [e for e in emitted if isinstance(e, ErrorEvent)]
    assert stage.superseded >= 1
    computed = [r for call in engine.calls for r in call if len(r.tasks) == 2]
    assert len(computed) < batcher.stats.submitted - 4  # stale partials were not computed
    source = [h for h in hypotheses if h.side == "source"]
    assert source[-1].final
    assert source[-1].committed.split() == "uno dos tres cuatro cinco seis siete ocho".split()
    for before, after in zip(source, source[1:], strict=False):
        assert after.committed.startswith(before.committed)


def test_partials_keep_their_beam_only_when_nobody_waits_behind_them():
    """``greedy_partials_backlog``: a partial dispatched while others still wait is decoded
    greedy; one with an empty queue behind it, and every final, keep the beam."""
    engine = ScriptedEngine()
    batcher = AsrBatcher(engine, BatchOptions(enabled=False, workers=1,
                                              greedy_partials_backlog=2))
    beam = dict(beam_size=5)
    try:
        hold_worker(engine, batcher)
        queued = [batcher.submit(dataclasses.replace(req(), **beam)) for _ in range(3)]
        final = batcher.submit(dataclasses.replace(req(partial=False), **beam))
        engine.gate.set()
        for future in (*queued, final):
            future.result(5)
        alone = batcher.submit(dataclasses.replace(req(), **beam))  # nobody waits now
        alone.result(5)
    finally:
        batcher.close()
    beams = [(call[0].partial, call[0].beam_size) for call in engine.calls[1:]]
    # the final goes first (shorter deadline) and keeps its beam with three behind it; the
    # first partial leaves two waiting (greedy), the second one, the third and the lone none
    assert beams == [(False, 5), (True, 1), (True, 5), (True, 5), (True, 5)]
    assert batcher.stats.greedy_partials == 1
