"""The decode program: what a batch of Whisper requests is decoded into, decided here over the
engine's primitives (``models.whisper.engine.WhisperEngine``: encode, detect, generate, align,
one pass per encode bucket: ``run_bucket``). The engine computes; this module decides.

For each encode bucket of a batch (``model_api.run_by_bucket``: a failing bucket is run again
request by request), the program
1. runs the engine's pass: every request's decodes, guarded and aligned (``WhisperPass``);
2. keeps each translation in English (``request.check_target_language``,
   ``stages.redecode.keep_to_english``): one that reads as the source language is decoded again
   with ``<|en|>``, and once more unforced when its forced prefix is not English either;
3. recovers coverage (``request.recover_coverage``, ``stages.redecode.recover_coverage``): the
   audio a short translation left out is found by aligning the captions on the pass's encoder
   output and translated on its own (``asr.recover`` in the result's timings).

Every second decode is an engine pass of its own request (``run_bucket`` of one: the engine
never calls back into the program), so a request's decodes are the same in any batch. Blocking,
like the engine: the shared worker (``models.workers.batching.AsrBatcher``) runs the program
over its engines on its threads (``run_batch``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from speechpipe.stages.model_api import (
    DecodeResult,
    WhisperPass,
    WhisperRequest,
    WhisperResult,
    run_by_bucket,
)
from speechpipe.stages.redecode import keep_to_english, recover_coverage

__all__ = ["WhisperPrimitives", "DecodeProgram", "program_over"]


@runtime_checkable
class WhisperPrimitives(Protocol):
    """What the program needs of the Whisper engine (``WhisperEngine``)."""

    def encode_samples(self, n_audio: int) -> int:
        """The encode bucket (canonical encoder input, samples) of ``n_audio`` samples."""
        ...

    def run_bucket(self, requests: Sequence[WhisperRequest]) -> list[WhisperPass]:
        """One pass over requests of one encode bucket."""
        ...

    def source_time(self, audio: NDArray[np.float32],
                    encoder_output: NDArray[np.float32] | None, language: str, text: str,
                    offset: int) -> float | None:
        """Where in ``audio`` the word of ``text`` at character ``offset`` starts (seconds;
        None: the alignment cannot place it), on ``encoder_output`` or encoding ``audio``."""
        ...


class DecodeProgram:
    """The program over one engine. ``run``/``run_batch`` answer as the engine's would, with
    the second decodes the requests ask for (module docs)."""

    def __init__(self, engine: WhisperPrimitives) -> None:
        self.engine = engine

    def run(self, request: WhisperRequest) -> WhisperResult:
        """One request: a batch of one (the same code and result as inside any batch)."""
        return self._bucket([request])[0]

    def run_batch(self, requests: Sequence[WhisperRequest]) -> list[WhisperResult | Exception]:
        """``results[i]``: request i's result, or the exception that failed it."""
        return run_by_bucket(requests, lambda r: self.engine.encode_samples(len(r.audio)),
                             self._bucket)

    def _bucket(self, requests: Sequence[WhisperRequest]) -> list[WhisperResult]:
        """One engine pass over a bucket, then each request's second decodes: all language
        checks first, then all recoveries."""
        passes = self.engine.run_bucket(requests)
        decodes = [list(p.result.decodes) for p in passes]
        for row, request in enumerate(requests):
            language = passes[row].result.language
            if request.check_target_language and language != "en":
                decodes[row] = keep_to_english(request, language, decodes[row],
                                               self._first_decode)
        recover_s = [0.0] * len(requests)
        for row, request in enumerate(requests):
            if request.recover_coverage:
                start = time.perf_counter()
                decodes[row] = self.recover_coverage(request, passes[row].encoder_output,
                                                     passes[row].result.language, decodes[row])
                if any(d.recovered for d in decodes[row]):  # an extra decode ran
                    recover_s[row] = time.perf_counter() - start
        return [replace(p.result, decodes=tuple(d), timings={
                    **p.result.timings, **({"asr.recover": s} if s else {})})
                for p, d, s in zip(passes, decodes, recover_s, strict=True)]

    def _first_decode(self, request: WhisperRequest) -> DecodeResult:
        """A second decode: ``request`` in an engine pass of its own, its first decode."""
        return self.engine.run_bucket([request])[0].result.decodes[0]

    def recover_coverage(
        self, request: WhisperRequest, encoder_output: NDArray[np.float32], language: str,
        decodes: list[DecodeResult],
    ) -> list[DecodeResult]:
        """``stages.redecode.recover_coverage`` with the engine's alignment (from the audio's
        start on ``encoder_output``, the pass's; later starts are encoded again) and passes."""
        def source_time(audio_from: int, text: str, offset: int) -> float | None:
            return self.engine.source_time(request.audio[audio_from:], None if audio_from
                                           else encoder_output, language, text, offset)
        return recover_coverage(request, language, decodes, source_time, self._first_decode)


def program_over(engine: Any) -> Any:
    """``DecodeProgram`` over a Whisper engine (anything with ``WhisperPrimitives``); anything
    else (a stand-in that decodes whole requests itself: a scripted engine) as it is."""
    return DecodeProgram(engine) if isinstance(engine, WhisperPrimitives) else engine
