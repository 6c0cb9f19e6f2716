"""Decoders restricted to the tokens of the languages at hand (``models/whisper/vocab.py``,
``models/whisper/prefill.py``), real decodes: restricted against full, batched against alone,
memory bounded by the budget however many languages."""

from __future__ import annotations

import dataclasses
import difflib
import threading
from pathlib import Path

import numpy as np
import pytest

from speechpipe.stages.model_api import DecodeTask, WhisperRequest, WhisperResult
from tests.helpers import load_16k, real_requests, same


# ---- real decodes ---------------------------------------------------------------------------
def _restricted(request: WhisperRequest, words: int = 20000) -> WhisperRequest:
    return dataclasses.replace(request, vocabulary_words=words)


def test_restricted_batched_results_equal_unbatched_on_real_clips(pipeline):
    engine = pipeline.engine
    requests = [_restricted(r) for r in real_requests()]
    alone = [engine.run(r) for r in requests]
    together = engine.run_batch(requests)
    for single, batched in zip(alone, together, strict=True):
        assert isinstance(batched, WhisperResult)
        assert same(single, batched)
    assert [r.batch_requests for r in together].count(4) == 4  # really batched
    assert all(d.continuation for r in alone for d in r.decodes)


def test_restricted_decodes_say_what_the_full_vocabulary_says_on_real_speech(pipeline):
    """Not identical by construction (the softmax runs over fewer tokens), but the words of
    real German and Spanish speech are in the kept set: the texts agree almost word for word."""
    import soundfile as sf

    from tests.helpers import shared_clip

    german, _ = sf.read(shared_clip("de_silero_60s"), dtype="float32")
    audios = [("de", german[16000 * start: 16000 * (start + 6)]) for start in (0, 8, 16)]
    audios += [("es", load_16k(clip)) for clip in ("es_enh_11375_cv", "es_enh_12411_cv")]
    same_words = total_words = 0
    for language, audio in audios:
        tasks = (DecodeTask("transcribe"), DecodeTask("translate"))
        base = WhisperRequest(audio=audio, language=language, tasks=tasks, beam_size=5)
        full = pipeline.engine.run(base)
        restricted = pipeline.engine.run(_restricted(base))
        for a, b in zip(full.decodes, restricted.decodes, strict=True):
            words_a, words_b = a.continuation.split(), b.continuation.split()
            assert words_b, "restricted decodes give words"
            matcher = difflib.SequenceMatcher(a=words_a, b=words_b, autojunk=False)
            same_words += sum(block.size for block in matcher.get_matching_blocks())
            total_words += max(len(words_a), len(words_b))
    assert same_words >= 0.8 * total_words, (same_words, total_words)


def test_a_restriction_keeps_the_model_weights_shared_and_holds_only_its_rows(pipeline):
    """Three languages' restricted decoders, each on the one shared model: every one holds
    its gathered output rows only (bytes = rows x (512 + 4)); with a budget of one decoder
    the older ones are evicted, and a decode gathered again gives the same result."""
    import ctranslate2  # noqa: F401  (loads the library the extension links to)

    from speechpipe.models.whisper.prefill import NativePrefill, native_prefill

    engine = pipeline.engine
    module = native_prefill()
    if module is None:
        pytest.skip("the native decoder is not built here")
    native = NativePrefill(module, 1, restricted_budget_bytes=1)  # room for one at a time
    audio = load_16k("es_enh_11375_cv")[: 16000 * 3]
    encoded = engine._encode_rows([engine.mel(audio)])
    prompt = engine._sot("es", "transcribe")
    results = []
    for language in ("es", "fr", "es"):
        _, vocabulary = engine.decoder(language, 2000)
        assert vocabulary is not None
        decoder = native.decoder(engine.model_dir, (f"{language}-2000", vocabulary.kept))
        assert decoder.output_size == len(vocabulary.kept) < 51865
        assert decoder.output_bytes == len(vocabulary.kept) * (512 + 4)
        assert native.restricted_usage() == (1, decoder.output_bytes)  # the others evicted
        got = decoder.generate(encoded, [prompt], prompt_tokens=3, sot_index=0, beam_size=5,
                               max_steps=30)[0]
        assert all(int(vocabulary.full_to_kept[i]) >= 0 for i in got.ids)  # full ids, kept
        results.append((list(got.ids), got.score))
    assert native.restricted_built == 3 and results[0] == results[2] and results[0][0]


def test_a_restricted_decoder_refuses_a_forced_token_it_does_not_keep(pipeline):
    import ctranslate2  # noqa: F401

    from speechpipe.models.whisper.prefill import native_prefill

    engine = pipeline.engine
    module = native_prefill()
    if module is None:
        pytest.skip("the native decoder is not built here")
    _, vocabulary = engine.decoder("es", 2000)
    assert vocabulary is not None
    decoder = module.PrefillDecoder(str(engine.model_dir), 1, [int(i) for i in vocabulary.kept])
    outside = int(np.flatnonzero(vocabulary.full_to_kept < 0)[0])
    encoded = engine._encode_rows([engine.mel(load_16k("es_enh_11375_cv")[:16000])])
    with pytest.raises(ValueError, match="not in restrict_ids"):
        decoder.generate(encoded, [engine._sot("es", "transcribe") + [outside]],
                         prompt_tokens=3, sot_index=0, beam_size=1, max_steps=4)
    with pytest.raises(ValueError, match="special tokens"):
        module.PrefillDecoder(str(engine.model_dir), 1, [1, 2, 3])


def test_a_restricted_decoder_that_cannot_be_made_falls_back_to_the_full_one(
        pipeline, monkeypatch, caplog):
    import logging

    import speechpipe.models.whisper.decoders as decoders_module

    def read_only(*args: object, **kwargs: object) -> None:
        raise OSError("read-only file system")

    monkeypatch.setattr(decoders_module, "restricted_vocabulary", read_only)
    engine = pipeline.engine
    with caplog.at_level(logging.WARNING, logger=decoders_module.__name__):
        model, vocabulary = engine.decoder("es", 777)  # a count no other test loads
    assert vocabulary is None and model is engine.model.model
    assert "read-only file system" in caplog.text and "full vocabulary" in caplog.text
    request = _restricted(real_requests()[0], 777)
    assert same(engine.run(request), engine.run(_restricted(request, 0)))


def _rss() -> int:
    """This process's resident bytes (Linux)."""
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS")).split()[1])\
        * 1024


def test_new_languages_add_megabytes_not_a_model_each(pipeline):
    """Decodes in four source languages not decoded before in this process: the process's
    resident memory grows by their gathered rows (~19 MB per worker thread and language at
    most), not by a copy of the model each (~216 MB each before)."""
    engine = pipeline.engine
    audio = load_16k("es_enh_11375_cv")[: 16000 * 3]
    tasks = (DecodeTask("transcribe"), DecodeTask("translate"))
    words = 29999  # a count no other test uses: every language is new here
    engine.run(WhisperRequest(audio=audio, language="es", tasks=tasks, vocabulary_words=words))
    before = _rss()
    for language in ("fr", "de", "it", "pt"):
        result = engine.run(WhisperRequest(audio=audio, language=language, tasks=tasks,
                                           vocabulary_words=words))
        assert all(d.continuation for d in result.decodes)
    grown = _rss() - before
    memory = engine.restricted_memory()
    # this thread's decoders stay within the budget (other threads of the shared test
    # pipeline hold their own, which only they may evict)
    held, size = engine.prefill().restricted_usage(threading.get_ident())
    assert size <= memory["budget_bytes"] or held == 1, (held, size, memory)
    assert grown < 4 * 40 << 20, f"{grown >> 20} MB for four languages"
