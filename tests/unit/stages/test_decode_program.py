"""The decode program (``stages.decode_program``) over scripted engine primitives: what it
asks of the engine, in which order, and what it returns. No model: the language identifier
is the real one (py3langid)."""

from __future__ import annotations

import numpy as np
import pytest

from speechpipe.stages.decode_program import DecodeProgram, WhisperPrimitives, program_over
from speechpipe.stages.model_api import (
    DecodeResult,
    DecodeTask,
    WhisperPass,
    WhisperRequest,
    WhisperResult,
)

RATE = 16_000
FRENCH = "parole est à monsieur Alain Ramadier pour soutenir l'amendement"
ENGLISH = "The floor is given to Mr. Alain Ramadier to support the amendment"
CAPTIONS = ("Bonjour. La parole est à monsieur Alain Ramadier pour soutenir l'amendement "
            "numéro douze, que la commission a repoussé ce matin après un long débat.")


class Primitives:
    """Scripted passes: each bucket call is recorded; captions are ``CAPTIONS``, a translate
    decode says ``ENGLISH``, or French when forced to continue "La" or asked in French with
    ``french``, or "Hello." on a window over 13.5 s with ``short``; a second decode in
    English forced to continue ``fail_on`` raises."""

    def __init__(self, *, french: bool = False, short: bool = False,
                 fail_on: str = "") -> None:
        self.calls: list[list[WhisperRequest]] = []
        self.aligned: list[tuple[int, bool, str]] = []  # (samples, on the pass's output, text)
        self.french, self.short, self.fail_on = french, short, fail_on

    def encode_samples(self, n_audio: int) -> int:
        return (n_audio // RATE + 2) * RATE

    def run_bucket(self, requests):
        self.calls.append(list(requests))
        passes = []
        for request in requests:
            if request.language == "en" and any(t.prefix == self.fail_on
                                                 for t in request.tasks if self.fail_on):
                raise RuntimeError("scripted failure")
            decodes = tuple(DecodeResult(t.task, self._text(request, t), -0.2, 0.0)
                            for t in request.tasks)
            result = WhisperResult(request.language or "fr", 1.0, decodes, 0.0, 0.0,
                                   timings={"asr.encode": 0.0})
            passes.append(WhisperPass(result, np.full((2, 3), len(self.calls), np.float32)))
        return passes

    def _text(self, request: WhisperRequest, task: DecodeTask) -> str:
        if task.task == "transcribe":
            return CAPTIONS
        if task.prefix == "La" or (self.french and request.language == "fr"):
            return FRENCH
        if self.short and len(request.audio) > 13.5 * RATE:
            return "Hello."
        return ENGLISH

    def source_time(self, audio, encoder_output, language, text, offset):
        self.aligned.append((len(audio), encoder_output is not None, text[offset:][:10]))
        return 1.0


def _request(seconds: float = 2.0, **kw) -> WhisperRequest:
    tasks = kw.pop("tasks", (DecodeTask("transcribe"), DecodeTask("translate")))
    return WhisperRequest(audio=np.zeros(int(seconds * RATE), np.float32), language="fr",
                          tasks=tasks, **kw)


def test_a_translation_in_the_source_language_is_decoded_again_as_a_pass_of_its_own():
    engine = Primitives(french=True)
    result = DecodeProgram(engine).run(_request(check_target_language=True))
    first, again = engine.calls
    assert len(first) == 1 and first[0].check_target_language
    # the second decode: the translate task alone, in English, asking nothing more itself
    assert [(r.language, [t.task for t in r.tasks], r.check_target_language,
             r.recover_coverage) for r in again] == [("en", ["translate"], False, False)]
    assert result.decodes[1].redecoded and result.decodes[1].continuation == ENGLISH
    assert result.decodes[0].continuation == CAPTIONS  # the captions as the pass gave them


def test_without_the_flags_a_batch_is_one_pass_per_bucket():
    engine = Primitives(french=True)
    requests = [_request(2.0), _request(2.5), _request(4.0)]
    results = DecodeProgram(engine).run_batch(requests)
    assert [len(call) for call in engine.calls] == [2, 1]  # two buckets, nothing more
    assert all(isinstance(r, WhisperResult) and not r.decodes[1].redecoded for r in results)


def test_recovery_aligns_on_the_passs_encoder_output_and_times_itself():
    engine = Primitives(short=True)
    request = _request(14.0, recover_coverage=True, max_recoveries=1)
    result = DecodeProgram(engine).run(request)
    translate = result.decodes[1]
    assert translate.recovered == 1 and translate.continuation == f"Hello. {ENGLISH}"
    # the captions aligned from the audio's start on the first pass's encoder output
    assert engine.aligned[0][:2] == (14 * RATE, True)
    tail = engine.calls[1][0]  # the audio from the uncovered sentence on, translated alone
    assert len(tail.audio) == 14 * RATE - int(0.9 * RATE)
    assert [t.task for t in tail.tasks] == ["translate"] and not tail.recover_coverage
    assert list(result.timings) == ["asr.encode", "asr.recover"]


def test_all_language_checks_run_before_any_recovery():
    engine = Primitives(french=True)
    requests = [_request(14.0, check_target_language=True, recover_coverage=True,
                         coverage_min_ratio=0.9, max_recoveries=1),
                _request(14.2, check_target_language=True)]
    DecodeProgram(engine).run_batch(requests)
    assert len(engine.calls[0]) == 2  # one bucket
    second = [call[0].language for call in engine.calls[1:]]
    assert second == ["en", "en", "fr"]  # both checks, in request order, then the recovery


def test_a_failing_second_decode_fails_only_its_request():
    """As a failing bucket: each request again alone, so the error reaches only its own."""
    engine = Primitives(fail_on="La")
    bad = _request(2.0, check_target_language=True,
                   tasks=(DecodeTask("transcribe"), DecodeTask("translate", "La")))
    good = _request(2.0, check_target_language=True)
    results = DecodeProgram(engine).run_batch([good, bad])
    assert isinstance(results[0], WhisperResult) and isinstance(results[1], RuntimeError)
    # the bucket and its failing second decode; then good alone, bad alone and its second
    assert [len(call) for call in engine.calls] == [2, 1, 1, 1, 1]


@pytest.mark.parametrize("stand_in", [object(), Primitives()])
def test_the_program_goes_over_engines_only(stand_in):
    program = program_over(stand_in)
    if isinstance(stand_in, WhisperPrimitives):
        assert isinstance(program, DecodeProgram) and program.engine is stand_in
    else:
        assert program is stand_in  # a stand-in that decodes whole requests itself
