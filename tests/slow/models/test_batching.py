"""The shared batching ASR worker (``models/workers/batching.py``) on the real model: batched
results equal unbatched ones for the same inputs (real recordings cut to different lengths,
forced prefixes of different lengths, a detected language), both in ``engine.run_batch`` and
through the worker's thread; one bad request in a batch fails alone; a capped decode stops at
its cap."""

from __future__ import annotations

import asyncio

from speechpipe.models.whisper.engine import (
    DecodeTask,
    WhisperRequest,
    WhisperResult,
)
from speechpipe.models.workers.batching import (
    AsrBatcher,
    BatchOptions,
)
from speechpipe.stages.frames import STREAM_RATE
from tests.helpers import CLIPS, CONTEXTS, load_16k, real_requests, same


def test_batched_results_equal_unbatched_on_real_clips(pipeline):
    engine = pipeline.engine
    requests = real_requests()
    alone = [engine.run(r) for r in requests]
    together = engine.run_batch(requests)
    for single, batched in zip(alone, together, strict=True):
        assert isinstance(batched, WhisperResult)
        assert same(single, batched)
    sizes = [r.batch_requests for r in together]  # four shared one bucket: really batched
    assert sizes.count(4) == 4 and sizes.count(1) == 2
    assert all(d.continuation for r in alone for d in r.decodes), "real speech gives words"
    contexts = [len(engine.context_ids(r)["translate"]) for r in requests]
    assert contexts[5] > contexts[3] > 0 == contexts[0]  # canonical context lengths


def test_a_capped_decode_generates_no_token_past_its_cap(pipeline):
    """``max_length`` is exact: CTranslate2 stops at the cap (nothing generated to be cut),
    with and without context (caps chosen so that ``MAX_LENGTH_STEP`` adds nothing: 8 new
    tokens after no context, or after 16 context tokens and <|startofprev|>)."""
    engine = pipeline.engine
    audio = load_16k(CLIPS[4])[: int(5.5 * STREAM_RATE)]
    for context in ("", CONTEXTS[5][1]):
        request = WhisperRequest(audio=audio, language="es", max_new_tokens=8, partial=True,
                                 max_context_tokens=16,
                                 tasks=(DecodeTask("translate", "", context),))
        before = engine.stats.snapshot()
        result = engine.run(request)
        after = engine.stats.snapshot()
        assert result.decodes[0].truncated  # 5.5 s of speech is more than 8 tokens
        generated = after["generated_tokens"] - before["generated_tokens"]
        kept = after["kept_tokens"] - before["kept_tokens"]
        assert generated == kept == 8
        assert (after["context_tokens"] - before["context_tokens"] > 0) == bool(context)


async def test_worker_batches_concurrent_sessions_with_equal_results(pipeline):
    engine = pipeline.engine
    requests = real_requests()[:4]  # one bucket
    alone = [engine.run(r) for r in requests]
    batcher = AsrBatcher(
        engine, BatchOptions(window_s=0.2, max_batch=8, workers=1, group_min_queue=2)
    )
    try:
        clients = [batcher.client() for _ in requests]
        results = await asyncio.gather(*(c(r) for c, r in zip(clients, requests, strict=True)))
    finally:
        batcher.close()
    for single, batched in zip(alone, results, strict=True):
        assert same(single, batched)
    assert batcher.stats.engine_calls == 1 and batcher.stats.max_batch_seen == 4
    assert all("asr.wait" in r.timings for r in results)


def test_one_bad_request_fails_alone_in_a_real_batch(pipeline):
    engine = pipeline.engine
    good = real_requests()[:3]
    bad = WhisperRequest(audio=good[0].audio, language="xx-not-a-language",
                         tasks=(DecodeTask("transcribe"),))
    outcomes = engine.run_batch([good[0], bad, good[1], good[2]])
    assert isinstance(outcomes[1], Exception)
    for request, outcome in zip(good, (outcomes[0], outcomes[2], outcomes[3]), strict=True):
        assert isinstance(outcome, WhisperResult)
        assert same(outcome, engine.run(request))
