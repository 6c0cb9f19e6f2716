"""Whisper's prompt layouts (``models.whisper.prompts``), with a stand-in tokenizer: no
model, no CTranslate2, no tokenizer file."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from speechpipe.models.whisper.batch_plan import CONTEXT_BUCKET_TOKENS, Prompt
from speechpipe.models.whisper.prompts import WHISPER_LANGUAGES, WhisperPrompts
from speechpipe.stages.model_api import DecodeTask, WhisperRequest

EOT, SOT, PREV, NO_TS, TRANSCRIBE, TRANSLATE = 50257, 50258, 50361, 50363, 50359, 50358
ES, EN = 50262, 50259


class WordTokenizer:
    """One id per word (ids below ``EOT``, given in order of first use), Whisper's special
    tokens at their multilingual ids; ``known`` languages only."""

    def __init__(self, known: tuple[str, ...] = ("en", "es")):
        self.special = {"<|endoftext|>": EOT, "<|startoftranscript|>": SOT,
                        "<|startofprev|>": PREV, "<|notimestamps|>": NO_TS,
                        "<|transcribe|>": TRANSCRIBE, "<|translate|>": TRANSLATE,
                        **{f"<|{lang}|>": {"en": EN, "es": ES}.get(lang, 50300 + i)
                           for i, lang in enumerate(known)}}
        self.words: dict[str, int] = {}
        self.encoded: list[str] = []

    def encode(self, sequence: str, add_special_tokens: bool = True) -> SimpleNamespace:
        assert not add_special_tokens
        self.encoded.append(sequence)
        return SimpleNamespace(ids=[self.id(word) for word in sequence.split()])

    def id(self, word: str) -> int:
        return self.words.setdefault(word, 100 + len(self.words))

    def token_to_id(self, token: str) -> int | None:
        return self.special.get(token)


def _request(*tasks: DecodeTask, max_context_tokens: int = 32) -> WhisperRequest:
    return WhisperRequest(audio=np.zeros(16_000, np.float32), language="es", tasks=tasks,
                          max_context_tokens=max_context_tokens)


def _words(n: int, start: int = 0) -> str:
    return " ".join(f"w{i}" for i in range(start, start + n))


def test_the_sot_sequence_is_start_language_task_no_timestamps():
    prompts = WhisperPrompts(WordTokenizer())
    assert prompts.eot == EOT
    assert prompts.sot("es", "transcribe") == [SOT, ES, TRANSCRIBE, NO_TS]
    assert prompts.sot("en", "translate") == [SOT, EN, TRANSLATE, NO_TS]


def test_a_language_the_tokenizer_lacks_is_refused():
    prompts = WhisperPrompts(WordTokenizer())
    with pytest.raises(ValueError, match=r"<\|fr\|>"):
        prompts.sot("fr", "transcribe")
    assert prompts.languages() == ("en", "es")  # in Whisper's order
    assert WhisperPrompts(WordTokenizer(tuple(WHISPER_LANGUAGES))).languages() \
        == tuple(WHISPER_LANGUAGES)


def test_text_is_encoded_with_one_leading_space_and_blank_text_not_at_all():
    tokenizer = WordTokenizer()
    prompts = WhisperPrompts(tokenizer)
    assert prompts.text_ids("  El gato  ") == [100, 101]
    assert tokenizer.encoded == [" El gato"]
    assert prompts.text_ids("   ") == [] and prompts.text_ids("") == []
    assert tokenizer.encoded == [" El gato"]


def test_the_forced_prefix_follows_the_task_tokens():
    tokenizer = WordTokenizer()
    prompts = WhisperPrompts(tokenizer)
    ids, n_prefix = prompts.prompt("es", "translate", "The cat")
    assert ids == [SOT, ES, TRANSLATE, NO_TS, tokenizer.id("The"), tokenizer.id("cat")]
    assert n_prefix == 2
    ids, n_prefix = prompts.prompt("es", "transcribe", "", [PREV, 7, 8])
    assert ids == [PREV, 7, 8, SOT, ES, TRANSCRIBE, NO_TS] and n_prefix == 0


def test_context_is_the_newest_tokens_capped_at_max_context_tokens():
    tokenizer = WordTokenizer()
    prompts = WhisperPrompts(tokenizer)
    context = _words(40)
    contexts = prompts.context_ids(_request(DecodeTask("transcribe", context=context)))
    assert contexts["transcribe"] == [PREV, *[tokenizer.id(f"w{i}") for i in range(8, 40)]]
    capped = prompts.context_ids(_request(DecodeTask("transcribe", context=context),
                                          max_context_tokens=19))
    # a multiple of CONTEXT_BUCKET_TOKENS, at most the cap
    assert capped["transcribe"] == [PREV, *[tokenizer.id(f"w{i}") for i in range(24, 40)]]
    assert prompts.context_ids(_request(DecodeTask("transcribe", context=context),
                                        max_context_tokens=0)) == {"transcribe": []}


def test_context_shorter_than_one_bucket_is_left_out():
    prompts = WhisperPrompts(WordTokenizer())
    short = _request(DecodeTask("transcribe", context=_words(CONTEXT_BUCKET_TOKENS - 1)),
                     DecodeTask("translate", context=_words(30)))
    assert prompts.context_ids(short) == {"transcribe": [], "translate": []}
    assert prompts.context_ids(_request(DecodeTask("transcribe"))) == {"transcribe": []}


def test_every_task_of_a_request_gets_the_same_context_count():
    tokenizer = WordTokenizer()
    prompts = WhisperPrompts(tokenizer)
    request = _request(DecodeTask("transcribe", context=_words(20)),
                       DecodeTask("translate", context=_words(13, start=100)))
    contexts = prompts.context_ids(request)
    assert contexts["transcribe"] == [PREV, *[tokenizer.id(f"w{i}") for i in range(12, 20)]]
    assert contexts["translate"] == [PREV, *[tokenizer.id(f"w{i}") for i in range(105, 113)]]


def test_one_prompt_per_task_with_context_task_tokens_and_prefix():
    tokenizer = WordTokenizer()
    prompts = WhisperPrompts(tokenizer)
    caption = DecodeTask("transcribe", "El gato", context=_words(8))
    translation = DecodeTask("translate", "The", context=_words(8, start=50))
    built = prompts.prompts(_request(caption, translation), "es", None)
    context = [PREV, *[tokenizer.id(f"w{i}") for i in range(8)]]
    english = [PREV, *[tokenizer.id(f"w{i}") for i in range(50, 58)]]
    assert built == [
        Prompt(caption, [*context, SOT, ES, TRANSCRIBE, NO_TS, tokenizer.id("El"),
                         tokenizer.id("gato")], 2, 9),
        Prompt(translation, [*english, SOT, ES, TRANSLATE, NO_TS, tokenizer.id("The")], 1, 9),
    ]


class SplitVocabulary:
    """A restriction that keeps no word id above ``limit``: each is spelled as two kept
    ones (``RestrictedVocabulary.spelled``: full ids still); specials are kept."""

    def __init__(self, limit: int):
        self.limit = limit

    def spelled(self, ids: list[int]) -> list[int]:
        out: list[int] = []
        for i in ids:
            out += [i] if i <= self.limit or i >= EOT else [1, i - self.limit]
        return out


def test_a_restricted_decoder_spells_context_and_prefix_with_its_kept_tokens():
    tokenizer = WordTokenizer()
    prompts = WhisperPrompts(tokenizer)
    for word in ("w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7", "big"):
        tokenizer.id(word)  # ids 100..108
    task = DecodeTask("transcribe", "w1 big", context=_words(8))
    (built,) = prompts.prompts(_request(task), "es", SplitVocabulary(limit=106))
    context = [PREV, *range(100, 107), 1, 1]  # w7 (107) spelled as 1, 1
    assert built.ids == [*context, SOT, ES, TRANSCRIBE, NO_TS, 101, 1, 2]  # big: 1, 2
    assert built.n_prefix == 3 and built.n_context == len(context) == 10
    unrestricted = prompts.prompts(_request(task), "es", None)[0]
    assert unrestricted.n_prefix == 2 and unrestricted.n_context == 9
