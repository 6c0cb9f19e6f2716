"""Decoder steps that multiply int8 weights in place (``RowsDense`` in models/native), on the
real Whisper weights.

- A layer gives CTranslate2's output bit for bit where CTranslate2's own product is exact.
  oneDNN's AVX2 product saturates on large u8 inputs, so the comparison there uses inputs
  <= 0 (module docs of models/whisper/prefill.py).
- A whole decode equals CTranslate2's bit for bit (ids, scores, no-speech probability) when
  CTranslate2 multiplies exactly: in a subprocess with Intel MKL's generic code
  (``CT2_USE_MKL=1``), which is exact on any x86 CPU. With a row limit (the product sets
  none), steps wider than it take CTranslate2's own path, within the same search.
- The fidelity script compares both steps with the float model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from speechpipe.models.whisper import prefill as prefill_module
from tests.helpers import ROOT, native_or_skip

REPO = ROOT


def _native():
    return native_or_skip()


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
