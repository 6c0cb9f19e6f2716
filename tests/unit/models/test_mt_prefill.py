"""Text MT whose forced prefix is read in one pass (models/mt/prefill.py): it decodes what
``translate_batch`` decodes, on every model family the tests build, and is set aside when
it would not."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from speechpipe.bench.tiny_mt import build_tiny_mt, generated_sentences
from speechpipe.models.mt.ct2_translator import Ct2TextTranslator, TextMtRequest
from speechpipe.models.mt.prefill import PrefixReader
from tests.helpers import native_or_skip

pytest.importorskip("ctranslate2")
pytest.importorskip("sentencepiece")

FAMILIES = ("nllb", "m2m100", "marian", "marian-multi")
PAIRS = {"nllb": ("en", "fr"), "m2m100": ("en", "fr"), "marian": ("en", "fr"),
         "marian-multi": ("en", "es")}


def _native():
    return native_or_skip(needs="PrefixTranslator")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-mt-prefill")
    return {family: build_tiny_mt(root / family, family, spm_cache=root / "spm")
            for family in FAMILIES}


@pytest.mark.parametrize("family", FAMILIES)
def test_one_pass_prefix_decodes_what_translate_batch_decodes(
    models: dict[str, Path], family: str
) -> None:
    _native()
    source_lang, target_lang = PAIRS[family]
    fast = Ct2TextTranslator(models[family], intra_threads=1)
    stepwise = Ct2TextTranslator(models[family], intra_threads=1, prefill=False)
    assert fast.prefix_reads == 0 and stepwise.prefix_reads is None
    compared = 0
    for source in generated_sentences(8, seed=11):
        free = stepwise.translate(TextMtRequest(source, source_lang, target_lang))
        words = free.text.split()
        # prefixes the model would say itself and one it would not, open (capped) and closed
        for prefix in [" ".join(words[:k]) for k in (1, 2, 4, 7)] + ["the the cat"]:
            for cap in (8, 3, 0):
                request = TextMtRequest(source, source_lang, target_lang, target_prefix=prefix,
                                        max_new_tokens=cap)
                assert fast.translate(request) == stepwise.translate(request)
                compared += 1
    assert compared == 8 * 5 * 3
    assert fast.prefix_reads and fast.prefix_reads > 0  # the native path did the work


def test_a_batch_mixes_reader_and_translate_batch_requests(models: dict[str, Path]) -> None:
    _native()
    fast = Ct2TextTranslator(models["nllb"], intra_threads=1)
    stepwise = Ct2TextTranslator(models["nllb"], intra_threads=1, prefill=False)
    sources = generated_sentences(4, seed=5)
    requests = [TextMtRequest(sources[0], "en", "fr"),
                TextMtRequest(sources[1], "en", "fr", target_prefix="le chat voit",
                              max_new_tokens=8),
                TextMtRequest(sources[2], "en", "fr", target_prefix="nous", beam_size=2),
                TextMtRequest(sources[3], "en", "fr", target_prefix="un deux trois quatre")]
    before = fast.prefix_reads
    assert fast.translate_batch(requests) == stepwise.translate_batch(requests)
    # the three greedy requests, with a prefix or not; beam search stays with translate_batch
    assert fast.prefix_reads == before + 3


def test_the_weights_are_held_once_and_beam_search_loads_them_again(
    models: dict[str, Path]
) -> None:
    """With the reader serving every greedy request, the Translator (the second copy of the
    weights) is let go after the load-time check; a beam-search request loads it again."""
    _native()
    translator = Ct2TextTranslator(models["marian"], intra_threads=1)
    assert translator._translator is None
    greedy = TextMtRequest("The cat sees a dog today.", "en", "fr")
    assert translator.translate(greedy).text
    assert translator._translator is None  # greedy never needs it
    beam = TextMtRequest("The cat sees a dog today.", "en", "fr", beam_size=3)
    reference = Ct2TextTranslator(models["marian"], intra_threads=1, prefill=False)
    assert translator.translate(beam) == reference.translate(beam)
    assert translator._translator is not None
    assert reference._translator is not None and reference.prefix_reads is None


def test_a_reader_that_decodes_otherwise_is_set_aside(
    models: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """A native build that decodes differently (another library build, a model layout it
    does not know) cannot be produced here on purpose, so its decoder is replaced by one
    that appends a wrong token: the load-time probe must catch it."""
    native = _native()

    class WrongDecoder:
        def __init__(self, *args: object) -> None:
            self.real = native.PrefixTranslator(*args)

        def continue_prefix(self, source, start, prefix, end, max_new, disable):
            ids = self.real.continue_prefix(source, start, prefix, end, max_new, disable)
            return [*ids[:-1], (ids[-1] + 1) if ids else 5]

    class WrongNative:
        PrefixTranslator = WrongDecoder

    import speechpipe.models.mt.prefill as mt_prefill

    original = mt_prefill.native_prefill
    mt_prefill.native_prefill = lambda: WrongNative  # type: ignore[assignment]
    try:
        with caplog.at_level(logging.WARNING, logger="speechpipe.models.mt.prefill"):
            translator = Ct2TextTranslator(models["marian"], intra_threads=1)
    finally:
        mt_prefill.native_prefill = original  # type: ignore[assignment]
    assert translator.prefix_reads is None
    assert "set aside" in caplog.text and "translate_batch" in caplog.text
    result = translator.translate(TextMtRequest("The cat sees a dog.", "en", "fr",
                                                target_prefix="le chat"))
    assert result.text.startswith("le chat")


def test_the_reader_translates_without_a_prefix_as_translate_batch(
    models: dict[str, Path]
) -> None:
    import ctranslate2

    _native()
    translator = Ct2TextTranslator(models["marian"], intra_threads=1)
    reader = translator._prefix_reader
    assert isinstance(reader, PrefixReader)
    raw = ctranslate2.Translator(str(models["marian"]), intra_threads=1)
    source = ["▁The", "▁cat", "▁sees", "</s>"]
    expected = raw.translate_batch([source], beam_size=1, max_decoding_length=12,
                                   disable_unk=True)[0].hypotheses[0]
    assert reader.continue_prefix(source, [], 12) == expected
    assert reader.continue_prefix(source, ["▁le"], 0) == ["▁le"]


@pytest.mark.parametrize("family", ("nllb", "marian"))
def test_a_lookahead_request_stops_a_token_past_its_own(
    models: dict[str, Path], family: str
) -> None:
    """A look-ahead request (``text_mt.lookahead``) rides in one batch with the request it is
    compared with (one reader call, the same forced prefix), decodes at most one token past
    that one's continuation, and agrees with it on as many words as it would uncapped: the
    extra token shows whether the last word ended. The compared request comes out as it
    does alone. The tiny models run every output to its cap, so the compared request's
    shorter caps stand in for a model that ends its translation of the heard words early."""
    _native()
    from speechpipe.stages.agreement import common_prefix_length

    source_lang, target_lang = PAIRS[family]
    fast = Ct2TextTranslator(models[family], intra_threads=1)
    compared = capped = 0
    for n, sentence in enumerate(generated_sentences(10, seed=23)):
        words = sentence.split()
        # half the sentences force a committed translation, as an open segment's update does
        prefix = " ".join(fast.translate(TextMtRequest(
            " ".join(words[:2]), source_lang, target_lang)).text.split()[:2]) if n % 2 else ""
        for heard in range(2, len(words) - 1):
            own = TextMtRequest(" ".join(words[:heard]), source_lang, target_lang,
                                target_prefix=prefix, max_new_tokens=2 + heard % 4)
            ahead = TextMtRequest(sentence, source_lang, target_lang, target_prefix=prefix,
                                  max_new_tokens=8)
            linked = TextMtRequest(sentence, source_lang, target_lang, target_prefix=prefix,
                                   max_new_tokens=8, lookahead_of=own)
            reads = fast.prefix_reads
            mine, look = fast.translate_batch([own, linked])
            assert fast.prefix_reads == reads + 1
            assert mine == fast.translate(own)
            free = fast.translate(ahead)
            assert look.generated_tokens <= mine.generated_tokens + 1
            # what the look-ahead run alone after it, capped a token past it, decodes
            assert look == fast.translate(TextMtRequest(
                sentence, source_lang, target_lang, target_prefix=prefix,
                max_new_tokens=min(8, mine.generated_tokens + 1)))
            capped += look.generated_tokens < free.generated_tokens
            assert common_prefix_length([mine.continuation.split(), look.continuation.split()]) \
                == common_prefix_length([mine.continuation.split(), free.continuation.split()])
            compared += 1
    assert compared > 20 and capped > 0
    # on its own (the other request not in the batch) it decodes to its own cap
    alone = fast.translate(TextMtRequest(sentence, source_lang, target_lang,
                                         target_prefix=prefix, max_new_tokens=8,
                                         lookahead_of=own))
    assert alone == fast.translate(ahead)
