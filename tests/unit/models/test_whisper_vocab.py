"""Decoders restricted to the tokens of the languages at hand (``models/whisper/vocab.py``):
the id maps on a scripted vocabulary and the kept set on the real tokenizer (its cache, made
in a subprocess: the cli tier; real decodes: the slow tier)."""

from __future__ import annotations

import pytest

from speechpipe.models.whisper.vocab import (
    RestrictedVocabulary,
    kept_token_ids,
)
from speechpipe.models.whisper.weights import resolve_whisper_model

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
