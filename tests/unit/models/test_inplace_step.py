"""Decoder steps that multiply int8 weights in place (``RowsDense`` in models/native,
``pipeline.asr_inplace_step``), without the real weights (those: the slow tier).

- The AVX2 kernel equals plain C++ integer arithmetic on random int8 data (exact: no
  saturation), for row counts that use every tile and weight counts off a multiple of four.
- Where it runs: ``rows_step_choice``; the warm-up keeps it only when its check passes; a
  native decoder that cannot load the weights falls back to ``generate``."""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest

from speechpipe.models.whisper import prefill as prefill_module
from speechpipe.models.whisper.prefill import ROWS_STEP_MAX, rows_step_choice
from tests.helpers import native_or_skip


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
