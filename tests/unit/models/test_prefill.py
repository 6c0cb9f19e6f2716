"""Reading the forced prefix in the prompt pass (``models/whisper/prefill.py``,
``models/native``), without the real model (that: the slow tier).

- The plan (pure): how many prefix tokens a request's prompt pass reads.
- A native decoder that disagrees is set aside once; the restricted budget forgets the
  decoders of threads that ended.
- Without the extension (another CTranslate2 version), the engine decodes with ``generate``."""

from __future__ import annotations

import types
from pathlib import Path

import ctranslate2

from speechpipe.models.whisper import prefill as prefill_module
from speechpipe.models.whisper.prefill import prefill_text_tokens
from tests.helpers import native_or_skip


def test_the_prompt_pass_leaves_one_forced_token_and_reads_whole_buckets():
    assert prefill_text_tokens([]) == 0
    assert prefill_text_tokens([0, 9]) == 0  # an empty prefix: generate as before
    assert prefill_text_tokens([1, 9]) == 0  # one token: it is the one left forced
    assert prefill_text_tokens([9, 6], bucket=1) == 5  # the shorter prefix keeps one
    assert prefill_text_tokens([9, 6], bucket=4) == 4
    assert prefill_text_tokens([3, 3], bucket=4) == 0


def _native():
    return native_or_skip()


def test_a_native_decoder_that_disagrees_is_set_aside_once() -> None:
    from speechpipe.models.whisper.decoders import WhisperDecoders

    calls = []
    for verdict, kept in ((None, True), ("'five.' where generate says 'six.'", False)):
        decoders = WhisperDecoders(Path("."), cpu_threads=1, budget_bytes=0, eot=1, vocab_size=2)
        # as if built and loaded, with no in-place step to check
        decoders._native_checked = True
        decoders._native = types.SimpleNamespace(rows_step=0)  # type: ignore[assignment]
        for _ in range(2):
            decoders.verify_native(lambda native, v=verdict: calls.append(v) or v)
        assert decoders.native_verified is kept
        assert (decoders.native() is not None) is kept
        assert decoders.native_refused == ("" if kept else verdict)
    assert calls == [None, "'five.' where generate says 'six.'"], "checked once each"


def test_another_ctranslate2_version_falls_back_to_generate(monkeypatch):
    _native()
    monkeypatch.setattr(ctranslate2, "__version__", "0.0.0")
    assert prefill_module._load_native() is None


def test_the_restricted_budget_forgets_the_decoders_of_threads_that_ended() -> None:
    """A thread's restricted decoders are thread-local: once it ends (a worker closed or
    replaced) they are freed, and the budget's accounting must drop them, else every later
    build evicts for memory that is not held. The native module is stood in for by a class
    with its two attributes (the accounting is pure Python; the real one is tested above)."""
    import threading

    class FakeDecoder:
        def __init__(self, folder: str, threads: int, kept: list[int] | None = None,
                     rows_step: int = 0) -> None:
            self.output_bytes = 40 if kept is not None else 0

    native = prefill_module.NativePrefill(types.SimpleNamespace(PrefillDecoder=FakeDecoder),
                                          threads=1, restricted_budget_bytes=100)
    folder = Path("/nonexistent-model")

    def build(*names: str) -> None:
        for name in names:
            native.decoder(folder, (name, [1, 2]))

    worker = threading.Thread(target=build, args=("fr", "de"))
    worker.start()
    worker.join(5)
    build("es")
    assert native.restricted_usage() == (1, 40)  # the ended worker's 80 bytes are gone
    build("it")
    assert native.restricted_usage() == (2, 80)  # both fit: nothing evicted for a ghost
    build("pt")  # 120 > 100: this thread's least recently used goes
    assert native.restricted_usage() == (2, 80)
