"""Decoders restricted to the tokens of the languages at hand (``models/whisper_vocab.py``):
the id maps on a scripted vocabulary, the ``model.bin`` rewrite on a scripted file, the kept
set on the real tokenizer, and real decodes (restricted against full, batched against alone)."""

from __future__ import annotations

import dataclasses
import difflib
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from speechpipe.models.whisper_vocab import (
    RestrictedVocabulary,
    _rewrite_model_bin,
    kept_token_ids,
)
from speechpipe.models.whisper_weights import resolve_whisper_model
from speechpipe.stages.model_api import DecodeTask, WhisperRequest, WhisperResult
from tests.models.test_batching import load_16k, real_requests, same

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


# ---- the model.bin rewrite ------------------------------------------------------------------
def _string(text: str) -> bytes:
    raw = text.encode() + b"\0"
    return struct.pack("H", len(raw)) + raw


def _variable(name: str, array: np.ndarray, dtype_id: int) -> bytes:
    return (_string(name) + struct.pack("B", array.ndim)
            + struct.pack(f"{array.ndim}I", *array.shape) + struct.pack("B", dtype_id)
            + struct.pack("I", array.nbytes) + array.tobytes())


def _read(path: Path) -> tuple[dict[str, tuple[tuple[int, ...], bytes]], bytes]:
    data = path.read_bytes()
    pos = 4

    def string() -> str:
        nonlocal pos
        (length,) = struct.unpack_from("H", data, pos)
        text = data[pos + 2: pos + 2 + length - 1].decode()
        pos += 2 + length
        return text

    string()
    pos += 4
    (count,) = struct.unpack_from("I", data, pos)
    pos += 4
    variables = {}
    for _ in range(count):
        name = string()
        rank = data[pos]
        shape = struct.unpack_from(f"{rank}I", data, pos + 1)
        pos += 1 + 4 * rank + 1
        (nbytes,) = struct.unpack_from("I", data, pos)
        variables[name] = (shape, data[pos + 4: pos + 4 + nbytes])
        pos += 4 + nbytes
    return variables, data[pos:]


def test_the_rewrite_keeps_the_chosen_embedding_rows_and_everything_else(tmp_path):
    embeddings = np.arange(12, dtype=np.float16).reshape(6, 2)
    other = np.arange(6, dtype=np.float32).reshape(6, 1)  # 6 rows too, but not an embedding
    aliases = struct.pack("I", 1) + _string("decoder/projection/weight") \
        + _string("decoder/embeddings/weight")
    source = tmp_path / "model.bin"
    source.write_bytes(struct.pack("I", 6) + _string("WhisperSpec") + struct.pack("I", 3)
                       + struct.pack("I", 2)
                       + _variable("decoder/embeddings/weight", embeddings, 4)
                       + _variable("encoder/something", other, 0) + aliases)
    dest = tmp_path / "restricted.bin"
    _rewrite_model_bin(source, dest, np.array([0, 2, 5]), vocab_size=6)
    variables, tail = _read(dest)
    shape, raw = variables["decoder/embeddings/weight"]
    assert shape == (3, 2)
    assert np.array_equal(np.frombuffer(raw, np.float16).reshape(3, 2), embeddings[[0, 2, 5]])
    assert variables["encoder/something"] == ((6, 1), other.tobytes())
    assert tail == aliases  # the tied output layer stays an alias of the embeddings


def test_a_model_bin_of_another_format_is_refused(tmp_path):
    source = tmp_path / "model.bin"
    source.write_bytes(struct.pack("I", 5) + _string("WhisperSpec"))
    with pytest.raises(ValueError, match="format 5"):
        _rewrite_model_bin(source, tmp_path / "out.bin", np.array([0]), vocab_size=1)


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


def test_the_restricted_folder_is_built_once_and_loads(tmp_path, monkeypatch):
    from speechpipe.models.whisper_vocab import restricted_model

    full = resolve_whisper_model()
    folder, vocabulary = restricted_model(full, ["es", "en"], 500, tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json", "kept.json", "model.bin", "vocabulary.json"]
    config = json.loads((folder / "config.json").read_text())
    tokens = json.loads((folder / "vocabulary.json").read_text())
    assert len(tokens) == len(vocabulary.kept) < 40000
    assert [tokens[i] for i in config["lang_ids"]][:2] == ["<|en|>", "<|zh|>"]
    built = (folder / "model.bin").stat().st_mtime_ns
    again, _ = restricted_model(full, ["en", "es"], 500, tmp_path)  # same set: the cache
    assert again == folder and (folder / "model.bin").stat().st_mtime_ns == built
    assert not list(tmp_path.glob(".tmp-*"))


@pytest.mark.slow
def test_a_restricted_decoder_that_cannot_be_built_falls_back_to_the_full_one(
        pipeline, monkeypatch, caplog):
    import logging

    import speechpipe.models.whisper_engine as engine_module

    def read_only(*args: object, **kwargs: object) -> None:
        raise OSError("read-only file system")

    monkeypatch.setattr(engine_module, "restricted_model", read_only)
    engine = pipeline.engine
    with caplog.at_level(logging.WARNING, logger=engine_module.__name__):
        model, vocabulary = engine.decoder("es", 777)  # a count no other test loads
    assert vocabulary is None and model is engine.model.model
    assert "read-only file system" in caplog.text and "full vocabulary" in caplog.text
    request = _restricted(real_requests()[0], 777)
    assert same(engine.run(request), engine.run(_restricted(request, 0)))
