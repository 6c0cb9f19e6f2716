"""Reading the forced prefix in the prompt pass (``models/whisper/prefill.py``, ``models/native``),
on the real model (the plan and the fallbacks without it: the unit tier).

- The native decoder on the real model: with nothing extra read it returns exactly what
  CTranslate2's ``generate`` returns (ids and scores: the same search, the same ranking);
  reading the prefix in the prompt pass gives the same texts on real clips almost always
  (its numbers come from one pass over many positions instead of one step per token, and a
  near tie can go the other way: measured 82 of 88 here, the texts of the eval are in
  docs/benchmarks.md).
- Through the engine: a request's result does not depend on its batch, and the work is
  really saved (fewer decoder steps, the same forced tokens).

The extension is optional at install time (it needs a C++ compiler); ``.ci/run`` sets
``SPEECHPIPE_REQUIRE_NATIVE=1`` so that CI fails if it was not built.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import ctranslate2
import pytest

from speechpipe.models.whisper import prefill as prefill_module
from speechpipe.models.whisper.engine import DecodeTask, WhisperRequest, WhisperResult
from tests.helpers import CLIPS, ROOT, load_16k, native_or_skip, same


def _native():
    return native_or_skip()


def test_native_decode_equals_generate_and_the_prompt_pass_keeps_the_texts(pipeline):
    engine = pipeline.engine
    native = _native().PrefillDecoder(str(engine.model_dir), 1)
    model = engine.model.model
    exact = total = same_text = 0
    for clip in CLIPS[:4]:
        encoded = engine._encode_rows([engine.mel(load_16k(clip))])
        memory = ctranslate2.StorageView.from_array(encoded)
        for task in ("transcribe", "translate"):
            sot = engine._sot("es", task)
            words = model.generate(memory, [sot], beam_size=5)[0].sequences_ids[0]
            for cut in (4, 8):
                prompt = sot + list(words[:cut])
                length = 2 * (cut + 12)
                reference = model.generate(
                    memory, [prompt], beam_size=5, max_length=length, return_scores=True,
                    return_no_speech_prob=True, suppress_blank=False)[0]
                budget = min(length // 2, length - 3)
                # nothing extra in the prompt pass: generate's search and ranking, exactly
                alone = native.generate(encoded, [prompt], prompt_tokens=3, sot_index=0,
                                        beam_size=5, max_steps=budget)[0]
                assert list(alone.ids) == list(reference.sequences_ids[0])
                assert alone.score == pytest.approx(reference.scores[0], abs=1e-5)
                assert alone.no_speech_prob == pytest.approx(reference.no_speech_prob,
                                                             abs=1e-5)
                exact += 1
                # all but one prefix token read in the prompt pass
                read = native.generate(encoded, [prompt], prompt_tokens=3 + cut - 1,
                                       sot_index=0, beam_size=5, max_steps=budget - cut + 1)[0]
                assert list(read.ids[:cut]) == prompt[4:]  # the prefix is returned too
                assert read.no_speech_prob == pytest.approx(reference.no_speech_prob, abs=1e-3)
                same_text += list(read.ids) == list(reference.sequences_ids[0])
                total += 1
    assert exact == total == 16
    assert same_text >= 14, f"{same_text} of {total} texts as generate's"


def _prefixed_requests(engine) -> list[WhisperRequest]:
    """Four real clips of one encode bucket with long prefixes on both tasks (so the prompt
    pass reads some), of different lengths, partial and final, one with context."""
    requests = []
    for i, clip in enumerate(CLIPS[:4]):
        audio = load_16k(clip)[: int(3.2 * 16000)]
        tasks = (DecodeTask("transcribe"), DecodeTask("translate"))
        first = engine.run(WhisperRequest(audio=audio, language="es", tasks=tasks,
                                          beam_size=5))
        prefixed = []
        for decode in first.decodes:
            words = decode.continuation.split()
            prefixed.append(DecodeTask(decode.task, " ".join(words[: max(2, len(words) - 1 - i)]),
                                       "El texto anterior de la sesión." if i == 3 else ""))
        requests.append(WhisperRequest(audio=audio, language="es", tasks=tuple(prefixed),
                                       beam_size=5, partial=bool(i % 2), cap_by_window=bool(i % 2),
                                       max_new_tokens=16 if i % 2 else None, prefill=True))
    return requests


def test_prefilled_results_do_not_depend_on_the_batch_and_save_steps(pipeline):
    _native()
    engine = pipeline.engine
    requests = _prefixed_requests(engine)
    before = engine.stats.snapshot()
    alone = [engine.run(r) for r in requests]
    after = engine.stats.snapshot()
    together = engine.run_batch(requests)
    for single, batched in zip(alone, together, strict=True):
        assert isinstance(batched, WhisperResult)
        assert same(single, batched)
    assert [r.batch_requests for r in together].count(4) == 4  # really one bucket
    assert sum(bool(d.continuation) for r in alone for d in r.decodes) >= 4
    read = after["prefilled_tokens"] - before["prefilled_tokens"]
    assert read > 0  # the prompt pass read prefix tokens
    # the same requests forced step by step run more decoder steps
    forced_before = engine.stats.snapshot()
    for request in requests:
        engine.run(dataclasses.replace(request, prefill=False))
    forced_after = engine.stats.snapshot()
    steps_read = after["decoder_steps"] - before["decoder_steps"]
    steps_forced = forced_after["decoder_steps"] - forced_before["decoder_steps"]
    assert steps_read < steps_forced, (steps_read, steps_forced)


def test_the_warm_up_keeps_the_native_decoder_only_when_it_decodes_what_generate_does(
        pipeline, monkeypatch):
    """At warm-up the engine decodes a request both ways (``prefill_disagreement``): here
    they agree, and the native decoder stays. A native decoder whose scores are off (what a
    build against other headers could do with a matching version string) is caught by the
    same check."""
    engine = pipeline.engine
    _native()
    assert engine.decoders.native_verified is True and engine.prefill() is not None
    assert prefill_module.prefill_disagreement(engine, engine.prefill()) is None

    class Off:  # the real decoder, its scores shifted
        def __init__(self, inner):
            self.inner = inner

        def generate(self, *args, **kwargs):
            return [dataclasses.replace(o, score=o.score - 1.0) if dataclasses.is_dataclass(o)
                    else _Shifted(o) for o in self.inner.generate(*args, **kwargs)]

    real = prefill_module.NativePrefill.reference_decoder  # the check's decoder
    monkeypatch.setattr(prefill_module.NativePrefill, "reference_decoder",
                        lambda self, *a, **k: Off(real(self, *a, **k)))
    why = prefill_module.prefill_disagreement(engine, engine.prefill())
    assert why is not None and "where generate gives" in why


class _Shifted:
    def __init__(self, output):
        self.ids, self.no_speech_prob = output.ids, output.no_speech_prob
        self.score = output.score - 1.0


_RESTRICTION_PROBE = """
import json
from speechpipe.config import PipelineOptions
from speechpipe.session import Pipeline
engine = Pipeline.load(PipelineOptions()).engine
native = engine.prefill()
_, vocabulary = engine.decoder("es", 30000)
print(json.dumps({
    "refused": native.restriction_refused(
        engine.model_dir, range(engine.eot, engine.tokenizer.get_vocab_size())),
    "restricted": vocabulary is not None,
}))
"""


@pytest.mark.parametrize("packed", ["0", "1"])
def test_an_output_layer_that_cannot_be_restricted_decodes_with_the_full_vocabulary(
        tmp_path: Path, packed: str) -> None:
    """With Intel MKL's GEMM, CTranslate2 packs every linear weight at load (its switch
    ``CT2_PACKED_GEMM``, on by default with MKL; oneDNN never packs), and the rows of a packed
    output layer cannot be gathered ("Can't select pre-packed weight"). The engine must find
    that out once and decode with the full vocabulary (there it is also the cheaper path,
    docs/benchmarks.md), not fail every request: this build did, on an Intel Xeon, with
    "ASR request failed" and no words. CTranslate2 reads the switch once per process (the
    test run turns it off, tests/conftest.py), so each setting gets fresh processes: the
    probe, then a real translation."""
    import json
    import subprocess
    import sys

    from speechpipe.machine import cpu_info

    _native()
    repo = ROOT
    env = {**os.environ, "CT2_PACKED_GEMM": packed}
    probe = subprocess.run([sys.executable, "-P", "-c", _RESTRICTION_PROBE], env=env,
                           capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr[-2000:]
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    packs = packed == "1" and cpu_info().gemm == "MKL"
    assert (found["refused"] is not None) == packs, found
    assert found["restricted"] == (not packs)
    out = tmp_path / "out.wav"
    run = subprocess.run(
        [sys.executable, "-P", "-m", "speechpipe", "translate",
         str(repo / "samples" / "wav" / "es_gato.wav"), "--out", str(out), "--source-lang", "es"],
        env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "request failed" not in run.stderr
    spoken = [line for line in run.stdout.splitlines() if "->" in line]
    assert spoken and spoken[0].split("->", 1)[1].strip(), run.stdout  # words, translated
    assert out.stat().st_size > 44
