"""The order decodes run in when sessions start together (issue 42), on the real engine: the
first words run first and decode the same."""

from __future__ import annotations

import dataclasses

from speechpipe.models.workers.batching import AsrBatcher, BatchOptions
from speechpipe.stages.frames import STREAM_RATE
from tests.helpers import CLIPS, load_16k, same


def test_on_the_real_engine_first_words_run_first_and_decode_the_same(pipeline):
    engine = pipeline.engine
    from speechpipe.models.whisper.engine import DecodeTask, WhisperRequest

    def request(clip: str, seconds: float, **kw) -> WhisperRequest:
        audio = load_16k(clip)[: int(seconds * STREAM_RATE)]
        return WhisperRequest(audio=audio, language="es",
                              tasks=(DecodeTask("transcribe"), DecodeTask("translate")),
                              **{"partial": True, **kw})

    blocker = request(CLIPS[0], 3.0, partial=False)
    refresh = request(CLIPS[1], 2.5)
    first = request(CLIPS[2], 2.5, opening=True)
    done: list[str] = []
    batcher = AsrBatcher(engine, BatchOptions(enabled=False, workers=1))
    try:
        futures = {"blocker": batcher.submit(blocker)}
        futures["refresh"] = batcher.submit(refresh)  # queued while the blocker runs ...
        futures["first"] = batcher.submit(first)  # ... and overtaken by the first words
        for name, future in futures.items():
            future.add_done_callback(lambda _, name=name: done.append(name))
        results = {name: future.result(120) for name, future in futures.items()}
    finally:
        batcher.close()
    # the blocker is the earliest deadline whenever the worker wakes; the other two queue
    # while it runs
    assert done == ["blocker", "first", "refresh"]
    unmarked = engine.run(dataclasses.replace(first, opening=False))
    assert same(results["first"], unmarked)  # the mark changes the order, not the decode
