"""The order decodes run in when sessions start together (issue 42): finals and the partials
of an utterance with nothing committed yet (``WhisperRequest.opening``) go ahead of partials
that only refresh tentative text; still earliest deadline first, so a refresh that waited
long enough gets its turn; a stale partial replaced by a newer one is never computed.

Scripted engine for the queue (the order is about the queue, not the model; calls are
counted); the ASR stage on the worker for which requests it marks (the real engine: the slow
tier)."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import numpy as np
import pytest

from speechpipe.errors import Superseded
from speechpipe.models.workers.batching import AsrBatcher, BatchOptions, decode_deadline_s
from speechpipe.stages.asr import AsrOptions, AsrStage
from speechpipe.stages.channels import Channel
from speechpipe.stages.clock import WallStreamClock
from speechpipe.stages.frames import STREAM_RATE, TextHypothesis, VadEvent
from speechpipe.stages.vad import LabeledAudio
from tests.fakes import ScriptedEngine, hold_worker, req


def opening(seconds: float = 1.0) -> object:
    return dataclasses.replace(req(seconds), opening=True)


def test_finals_and_first_words_have_the_short_deadline_refreshes_the_long_one():
    options = BatchOptions(partial_deadline_s=1.0, final_deadline_s=0.3, opening_deadline_s=0.2)
    assert decode_deadline_s(req(partial=False), options) == 0.3
    assert decode_deadline_s(opening(), options) == 0.2
    assert decode_deadline_s(req(), options) == 1.0
    # a final is a final whatever the mark says
    final = dataclasses.replace(req(partial=False), opening=True)
    assert decode_deadline_s(final, options) == 0.3


def test_in_a_burst_first_words_and_finals_go_ahead_of_refreshes():
    engine = ScriptedEngine()
    batcher = AsrBatcher(engine, BatchOptions(enabled=False, workers=1))
    try:
        hold_worker(engine, batcher)
        refreshes = [req(1.0 + k / 10) for k in range(3)]  # sessions with words committed
        first_words = [opening(2.0 + k / 10) for k in range(3)]  # sessions just started
        final = req(3.0, partial=False)
        futures = [batcher.submit(r) for r in (*refreshes, *first_words, final)]
        engine.gate.set()
        for future in futures:
            future.result(5)
    finally:
        batcher.close()
    order = [call[0] for call in engine.calls[1:]]
    # finals before partials stays; then the first words, then the refreshes, each in turn
    assert [id(r) for r in order] == [id(r) for r in (final, *first_words, *refreshes)]


def test_a_refresh_that_waited_long_enough_is_not_starved():
    now = [100.0]
    engine = ScriptedEngine()
    batcher = AsrBatcher(engine, BatchOptions(enabled=False, workers=1,
                                              partial_deadline_s=1.0, opening_deadline_s=0.3),
                         clock=lambda: now[0])
    try:
        hold_worker(engine, batcher)
        refresh = req(1.0)
        batcher.submit(refresh)  # due at 101.0
        now[0] = 100.5
        early = opening(1.5)
        batcher.submit(early)  # due at 100.8: ahead
        now[0] = 100.8
        late = opening(2.0)
        batcher.submit(late)  # due at 101.1: the refresh has waited its turn
        engine.gate.set()
        deadline = time.monotonic() + 5
        while batcher.stats.completed < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        batcher.close()
    assert [id(call[0]) for call in engine.calls[1:]] == [id(early), id(refresh), id(late)]


def test_a_stale_first_words_partial_is_replaced_and_keeps_its_place():
    engine = ScriptedEngine()
    batcher = AsrBatcher(engine, BatchOptions(enabled=False, workers=1))
    try:
        hold_worker(engine, batcher)
        old = opening(1.0)
        old_future = batcher.submit(old)
        refresh_future = batcher.submit(req(1.5))
        newer = opening(1.4)  # the same utterance, more audio: the old one is stale
        new_future = batcher.replace(old, newer)
        assert new_future is not None
        with pytest.raises(Superseded):
            old_future.result(1)
        engine.gate.set()
        new_future.result(5)
        refresh_future.result(5)
    finally:
        batcher.close()
    computed = [call[0] for call in engine.calls[1:]]
    assert all(r is not old for r in computed)  # never computed
    assert computed[0] is newer and len(computed) == 2


async def test_the_stage_marks_only_the_partials_before_anything_is_committed():
    """Real ASR stage on the worker (scripted engine: words by audio length, so partials
    agree and commit): the partials before the first committed words are marked, none after,
    and never a final."""
    engine = ScriptedEngine(call_s=0.02)
    batcher = AsrBatcher(engine, BatchOptions(window_s=0.0, max_batch=1, workers=1))
    client = batcher.client()
    stage = AsrStage(client, WallStreamClock(), options=AsrOptions(step_s=0.2, min_voiced_s=0.2),
                     language="es", queue=client)
    inbox: Channel[LabeledAudio] = Channel(1000)
    outbox: Channel[TextHypothesis] = Channel(1000)
    events: Channel = Channel(1000)

    async def speak() -> None:
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
    events.close()
    hypotheses = [h async for h in outbox]
    computed = [r for call in engine.calls for r in call]
    marks = [r.opening for r in computed if r.partial]
    assert True in marks and False in marks, marks
    first_plain = marks.index(False)
    assert not any(marks[first_plain:]), "once words are committed, partials only refresh"
    assert not any(r.opening for r in computed if not r.partial)
    target = [h for h in hypotheses if h.side == "target"]
    assert target[-1].final and target[-1].committed  # the text still comes out
