"""Decoder steps that multiply int8 weights in place (``RowsDense`` in models/native,
``pipeline.asr_inplace_step``).

- The AVX2 kernel equals plain C++ integer arithmetic on random int8 data (exact: no
  saturation), for row counts that use every tile and weight counts off a multiple of four.
- On the real Whisper weights, a layer gives CTranslate2's output bit for bit where
  CTranslate2's own product is exact. oneDNN's AVX2 product saturates on large u8 inputs, so
  the comparison there uses inputs <= 0 (module docs of models/whisper/prefill.py).
- A whole decode equals CTranslate2's bit for bit (ids, scores, no-speech probability) when
  CTranslate2 multiplies exactly: in a subprocess with Intel MKL's generic code
  (``CT2_USE_MKL=1``), which is exact on any x86 CPU. With a row limit (the product sets
  none), steps wider than it take CTranslate2's own path, within the same search.
- Where it runs: ``rows_step_choice``; the warm-up keeps it only when its check passes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from speechpipe.models.whisper import prefill as prefill_module
from speechpipe.models.whisper.prefill import ROWS_STEP_MAX, rows_step_choice
from tests.helpers import native_or_skip

REPO = Path(__file__).resolve().parents[2]


def _native():
    return native_or_skip()


def _has_avx2() -> bool:
    from speechpipe.machine import cpu_info

    return cpu_info().isa in ("AVX2", "AVX-512", "AVX-512 VNNI", "AMX")


@pytest.mark.skipif(not _has_avx2(), reason="the kernel under test is AVX2's")
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 7, 10, 20])
def test_the_avx2_kernel_is_exact_integer_arithmetic(rows: int) -> None:
    module = _native()
    rng = np.random.default_rng(rows)
    for depth, cols in ((64, 7), (512, 61), (2048, 5)):
        x = rng.integers(-128, 128, (rows, depth), dtype=np.int8)  # u8 when shifted: 0-255
        w = rng.integers(-127, 128, (cols, depth), dtype=np.int8)
        w[0, :] = 127  # the extremes, where a 16-bit pair sum would saturate
        x[0, :] = -1  # shifted: u8 127; unshifted: -1
        for shifted in (True, False):
            assert module.compare_kernels(x, w, shifted) == 0


def test_where_the_step_runs() -> None:
    assert rows_step_choice("auto", repacks_weights=True) == ROWS_STEP_MAX
    assert rows_step_choice("auto", repacks_weights=False) == 0
    assert rows_step_choice("auto", repacks_weights=True, avx2=False) == 0  # plain C++: slow
    assert rows_step_choice("on", repacks_weights=False) == ROWS_STEP_MAX
    assert rows_step_choice("off", repacks_weights=True) == 0
    with pytest.raises(ValueError, match="auto, on or off"):
        rows_step_choice("fast", repacks_weights=True)


class _FakeDecoder:
    def __init__(self, folder: str, threads: int, kept: list[int] | None = None,
                 rows_step: int = 0) -> None:
        self.rows_step = rows_step
        self.rows_step_refused = ""
        self.output_bytes = 0


@pytest.mark.parametrize("verdict", [None, "decoder/layer_0/ffn/linear_0: differs by 0.5"])
def test_the_warm_up_keeps_the_step_only_when_its_check_passes(monkeypatch, verdict) -> None:
    """A failed check turns the step off for every decoder built afterwards, and the ones
    this thread built before are rebuilt without it."""
    from speechpipe.models.whisper.decoders import WhisperDecoders

    module = types.SimpleNamespace(PrefillDecoder=_FakeDecoder)
    native = prefill_module.NativePrefill(module, 1, rows_step=ROWS_STEP_MAX)
    before = native.decoder(Path("/m"))
    assert before.rows_step == ROWS_STEP_MAX
    decoders = WhisperDecoders(Path("/m"), cpu_threads=1, budget_bytes=0, eot=1, vocab_size=2)
    decoders._native_checked, decoders._native = True, native
    monkeypatch.setattr("speechpipe.models.whisper.decoders.rows_step_disagreement",
                        lambda module, folder: verdict)
    decoders.verify_native(lambda native: None)
    assert decoders.native_verified is True
    assert decoders.rows_step_refused == (verdict or "")
    after = native.decoder(Path("/m"))
    assert after.rows_step == (ROWS_STEP_MAX if verdict is None else 0)
    assert (after is before) is (verdict is None)


@pytest.mark.slow  # the real weights
def test_a_layer_gives_ctranslate2s_output_where_ctranslate2_is_exact() -> None:
    from speechpipe.models.whisper.weights import resolve_whisper_model

    module = _native()
    folder = str(resolve_whisper_model())
    rng = np.random.default_rng(0)
    for scope, depth, gelu in (("decoder/layer_0/self_attention/linear_0", 512, False),
                               ("decoder/layer_3/attention/linear_2", 512, False),
                               ("decoder/layer_5/ffn/linear_0", 512, True),
                               ("decoder/layer_5/ffn/linear_1", 2048, False)):
        for rows in (1, 3, 10):
            x = -np.abs(rng.standard_normal((rows, depth))).astype(np.float32)
            worst, reference, ours = module.compare_dense(folder, scope, x, gelu)
            assert worst == 0.0, scope
            assert np.array_equal(reference, ours)
    assert prefill_module.rows_step_disagreement(module, Path(folder)) is None


_EXACT_DECODE = """
import json, sys
import numpy as np
import ctranslate2
from speechpipe.models import _ct2_prefill as native
from speechpipe.models.whisper.engine import WhisperEngine
from speechpipe.models.whisper.weights import resolve_whisper_model
from tests.helpers import CLIPS, load_16k

engine = WhisperEngine(resolve_whisper_model(), cpu_threads=1)
folder = str(engine.model_dir)
_, vocabulary = engine.decoder("es", 30000)
kept = sorted(int(i) for i in vocabulary.kept)
out = {"same": 0, "total": 0, "taken": 0, "wide_taken": 0, "differ": []}
for restrict in ([], kept):
    reference = native.PrefillDecoder(folder, 1, restrict)
    ours = native.PrefillDecoder(folder, 1, restrict, rows_step=%(rows)d)
    encoded = engine._encode_rows([engine.mel(load_16k(CLIPS[1])[: 3 * 16000])])
    for beam, tasks in ((5, ("transcribe", "translate")), (1, ("translate",)),
                        (5, ("transcribe", "translate") * 4)):
        prompts = [engine._sot("es", t) for t in tasks]
        rows = np.ascontiguousarray(np.repeat(encoded, len(prompts), axis=0))
        taken = ours.rows_steps_taken
        got = [[(list(g.ids), g.score, g.no_speech_prob) for g in d.generate(
                    rows, prompts, prompt_tokens=3, sot_index=0, beam_size=beam, max_steps=16)]
               for d in (reference, ours)]
        if beam * len(prompts) > %(rows)d:
            out["wide_taken"] += ours.rows_steps_taken - taken
        out["total"] += 1
        if got[0] == got[1]:
            out["same"] += 1
        else:
            out["differ"].append([beam, len(prompts), got])
    out["taken"] += ours.rows_steps_taken
print(json.dumps(out))
"""


@pytest.mark.slow  # Intel MKL's generic code is ~15x slower than oneDNN here (~40 s)
def test_a_decode_equals_ctranslate2s_bit_for_bit_where_ctranslate2_is_exact() -> None:
    _native()
    env = dict(os.environ, CT2_USE_MKL="1", CT2_PACKED_GEMM="0", PYTHONPATH=str(REPO))
    # a 32-row limit (the product has none), so that one search crosses it
    done = subprocess.run([sys.executable, "-c", _EXACT_DECODE % {"rows": 32}],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["same"] == out["total"] == 6, out["differ"]
    assert out["taken"] > 0  # the steps really ran in place
    # 8 items at beam 5: the first step has 8 rows (in place), the beams' steps 40 (over
    # the limit: CTranslate2's), so one search mixed both paths and still gave the same bits
    assert 0 < out["wide_taken"]


@pytest.mark.slow  # the real Whisper (int8 and float32) in a subprocess
def test_the_fidelity_script_compares_both_steps_with_the_float_model() -> None:
    _native()
    script = REPO / "scripts" / "int8_fidelity.py"
    manifest = REPO / "samples" / "manifest.jsonl"
    done = subprocess.run([sys.executable, str(script), "--manifest", str(manifest),
                           "--category", "core_x_to_en", "--limit", "1"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if "the float32 decode exactly" in line]
    assert len(lines) == 2 and "in place" in lines[0] and "CTranslate2's" in lines[1]
    bad = subprocess.run([sys.executable, str(script), "--manifest", "/nonexistent.jsonl"],
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1


def test_a_native_decoder_that_cannot_load_the_weights_falls_back_to_generate(
        monkeypatch, caplog) -> None:
    """Building the native decoders fails (a folder they cannot read): the engine decodes
    with ``generate``, says why once, and does not try again on every request."""
    from speechpipe.models.whisper.decoders import WhisperDecoders

    tries = []

    class Refusing:
        def __init__(self, *args, **kwargs) -> None:
            tries.append(args)
            raise RuntimeError("Unable to open file 'model.bin'")

    monkeypatch.setattr("speechpipe.models.whisper.decoders.native_prefill",
                        lambda: types.SimpleNamespace(PrefillDecoder=Refusing))
    decoders = WhisperDecoders(Path("/no-model"), cpu_threads=1, budget_bytes=0, eot=1,
                               vocab_size=2)
    with caplog.at_level("WARNING"):
        assert decoders.native() is None
        assert decoders.native() is None
    assert len(tries) == 1
    assert decoders.native_refused == "RuntimeError: Unable to open file 'model.bin'"
    assert sum("cannot load" in r.getMessage() for r in caplog.records) == 1
