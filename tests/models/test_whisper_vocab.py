"""Decoders restricted to the tokens of the languages at hand (``models/whisper/vocab.py``,
``models/whisper/prefill.py``): the id maps on a scripted vocabulary, the kept set on the real
tokenizer and its small cache, and real decodes (restricted against full, batched against
alone, memory bounded by the budget however many languages)."""

from __future__ import annotations

import dataclasses
import difflib
import json
import threading
from pathlib import Path

import numpy as np
import pytest

from speechpipe.models.whisper.vocab import (
    RestrictedVocabulary,
    kept_token_ids,
    restricted_vocabulary,
)
from speechpipe.models.whisper.weights import resolve_whisper_model
from speechpipe.stages.model_api import DecodeTask, WhisperRequest, WhisperResult
from tests.helpers import load_16k, real_requests, same

# ---- id maps --------------------------------------------------------------------------------
TOKENS = ["a", "b", "ab", "\u0120", "\u0120ab", "c", "\u0120abc", "<|endoftext|>"]


def test_kept_tokens_map_both_ways_and_the_others_are_spelled_longest_first():
    vocabulary = RestrictedVocabulary.build(TOKENS, [0, 1, 2, 3, 7])
    assert vocabulary.to_restricted([0, 2, 7]) == [0, 2, 4]
    assert vocabulary.to_full([0, 2, 4]) == [0, 2, 7]
    # "Ġab" is not kept: "Ġ" + "ab" (the longest kept piece), not "Ġ" + "a" + "b"
    assert vocabulary.to_restricted([4]) == [3, 2]
    assert "".join(TOKENS[i] for i in vocabulary.to_full(vocabulary.to_restricted([4]))) \
        == TOKENS[4]
    with pytest.raises(ValueError, match="cannot be spelled"):  # no kept token has "c"
        vocabulary.to_restricted([6])


# ---- the kept set, on the real tokenizer ----------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(resolve_whisper_model() / "tokenizer.json"))


def test_the_kept_set_has_the_specials_the_bytes_and_the_words_of_both_languages(tokenizer):
    vocab = tokenizer.get_vocab()
    kept = set(kept_token_ids(tokenizer, ["de", "en"], 2000))
    eot = vocab["<|endoftext|>"]
    assert {i for i in vocab.values() if i >= eot} <= kept  # tasks, languages, timestamps
    assert all(vocab[t] in kept for t in ("<|de|>", "<|translate|>", "<|notimestamps|>"))
    for text in (" house", " House", " Haus", " groß", " Straße", "2024", ","):
        assert set(tokenizer.encode(text, add_special_tokens=False).ids) <= kept, text
    assert len(kept) < 0.6 * len(vocab)  # what makes the output layer cheaper
    # a word of neither language is not there whole, but every byte is, to spell it
    assert not set(tokenizer.encode(" Москва", add_special_tokens=False).ids) <= kept
    assert all(i in kept for token, i in vocab.items() if len(token) == 1)  # the bytes


# ---- real decodes ---------------------------------------------------------------------------
def _restricted(request: WhisperRequest, words: int = 20000) -> WhisperRequest:
    return dataclasses.replace(request, vocabulary_words=words)


@pytest.mark.slow
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


@pytest.mark.slow
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


def test_the_kept_set_is_cached_as_a_small_file_and_no_weights_are_copied(tmp_path):
    full = resolve_whisper_model()
    vocabulary = restricted_vocabulary(full, ["es", "en"], 500, tmp_path)
    (cached,) = tmp_path.iterdir()
    assert cached.suffix == ".json" and cached.stat().st_size < 1 << 20  # not a ~120 MB model
    assert json.loads(cached.read_text()) == [int(i) for i in vocabulary.kept]
    written = cached.stat().st_mtime_ns
    again = restricted_vocabulary(full, ["en", "es"], 500, tmp_path)  # same set: the cache
    assert cached.stat().st_mtime_ns == written and list(tmp_path.iterdir()) == [cached]
    assert np.array_equal(again.kept, vocabulary.kept)
    cached.write_text("{not json")  # a torn file is computed again
    assert np.array_equal(restricted_vocabulary(full, ["es", "en"], 500, tmp_path).kept,
                          vocabulary.kept)


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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
