"""Fast early steps for the translation, captions at their own cadence
(``asr.caption_step_s``; ``UtteranceDecoder`` on scripted results)."""

from __future__ import annotations

import numpy as np

from speechpipe.stages.asr import AsrOptions, UtteranceDecoder
from speechpipe.stages.frames import STREAM_RATE
from speechpipe.stages.model_api import DecodeKind, DecodeResult, WhisperResult


def _decoder(**options: float) -> UtteranceDecoder:
    return UtteranceDecoder(utterance=1, start_pts=0, options=AsrOptions(**options),
                            language="es", translate=True)


def _hear(decoder: UtteranceDecoder, seconds: float) -> None:
    samples = (np.random.default_rng(0).standard_normal(int(seconds * STREAM_RATE))
               * 8000).astype(np.int16)
    decoder.add(samples, len(samples))


def _land(decoder: UtteranceDecoder, tasks: tuple[str, ...], step: int = 0) -> None:
    """Hypotheses that never agree, so the early steps go on."""
    texts = {"transcribe": f"hola{step}", "translate": f"hello{step}"}
    decodes = tuple(DecodeResult(task, texts[task], -0.1, 0.0) for task in tasks)
    decoder.apply(WhisperResult(language="es", language_prob=1.0, decodes=decodes,
                                encode_s=0.0, decode_s=0.0), DecodeKind.PARTIAL, decoder.end)


def test_early_partials_decode_the_captions_every_other_step():
    decoder = _decoder(early_step_s=0.25, caption_step_s=0.5, step_s=1.0)
    _hear(decoder, 0.5)
    asked = []
    for step in range(4):
        assert decoder.due() == DecodeKind.PARTIAL
        tasks = tuple(t.task for t in decoder.request(DecodeKind.PARTIAL).tasks)
        asked.append(tasks)
        _land(decoder, tasks, step)
        _hear(decoder, 0.25)
    assert asked == [("transcribe", "translate"), ("translate",),
                     ("transcribe", "translate"), ("translate",)]


def test_a_pause_decode_always_decodes_the_captions():
    decoder = _decoder(early_step_s=0.25, caption_step_s=0.5)
    _hear(decoder, 0.5)
    _land(decoder, ("transcribe", "translate"))
    _hear(decoder, 0.25)
    assert [t.task for t in decoder.request(DecodeKind.PAUSE).tasks] == ["transcribe", "translate"]
    assert [t.task for t in decoder.request(DecodeKind.PARTIAL).tasks] == ["translate"]


def test_with_the_default_cadence_every_partial_decodes_both():
    decoder = _decoder()  # early steps 0.5 s: never closer than caption_step_s
    _hear(decoder, 0.5)
    for _ in range(3):
        tasks = decoder.request(DecodeKind.PARTIAL).tasks
        assert [t.task for t in tasks] == ["transcribe", "translate"]
        _land(decoder, ("transcribe", "translate"))
        _hear(decoder, 0.5)
