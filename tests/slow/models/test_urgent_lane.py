"""The urgent lane of the shared ASR worker on the real model: the pipeline's lane decodes
exactly what the engine decodes alone."""

from __future__ import annotations

import os

from speechpipe.models.workers.asr_lanes import (
    PER_THREAD_PRIORITY,
)
from tests.helpers import real_requests, same


def test_the_pipelines_lane_decodes_what_the_engine_decodes(pipeline):
    """The lane is a second copy of the same weights: a commit it runs equals ``engine.run``;
    its model's threads keep the process's priority, the engine's run below it."""
    engine, batcher = pipeline.engine, pipeline.whisper
    assert pipeline.urgent_engine is not None and batcher.urgent_engine is pipeline.urgent_engine
    assert pipeline.urgent_engine.model is not engine.model
    requests = [r for r in real_requests() if not r.partial][:2]
    assert requests
    before = batcher.stats.urgent_calls
    for request in requests:
        assert same(batcher.submit(request).result(120), engine.run(request))
    assert batcher.stats.urgent_calls > before
    if PER_THREAD_PRIORITY:
        base = os.getpriority(os.PRIO_PROCESS, 0)
        assert engine.native_threads and pipeline.urgent_engine.native_threads
        assert {os.getpriority(os.PRIO_PROCESS, t) for t in engine.native_threads} == {
            max(base, pipeline.options.batching.background_nice)}
        assert {os.getpriority(os.PRIO_PROCESS, t)
                for t in pipeline.urgent_engine.native_threads} == {base}
