"""The OPUS-MT-base-size models the cascade's cost figures use (``bench/opus_size.py``): the
English word tokenizer gives real captions about as many pieces per word as OPUS-MT's
SentencePiece, and the copy model behaves as a trained monotone translator would (it ends
where the source ends, and a longer source extends its output), with every matrix a real
model's size."""

from __future__ import annotations

from pathlib import Path

import pytest

ctranslate2 = pytest.importorskip("ctranslate2")
spm = pytest.importorskip("sentencepiece")

from speechpipe.bench.opus_size import build_opus_size_pair, word_spm  # noqa: E402
from speechpipe.bench.tiny_mt import OPUS_BASE, train_tiny_spm  # noqa: E402

CAPTIONS = [  # as the captions of English speech read (case, digits, punctuation)
    "And so, my fellow Americans: ask not what your country can do for you.",
    "Apollo 11, Houston. We got a recommendation for you on the E-memory dump.",
    "I agree that we should act, and respond to the crisis before it's too late!",
    "This should also be an important point of the directive on all taxes in 2013.",
]


def pieces_per_word(model: Path) -> float:
    sp = spm.SentencePieceProcessor(model_file=str(model))
    return sum(len(sp.encode(t)) for t in CAPTIONS) / sum(len(t.split()) for t in CAPTIONS)


def test_the_word_tokenizer_splits_captions_like_a_real_one_and_the_tiny_one_does_not(
        tmp_path: Path) -> None:
    words = pieces_per_word(word_spm(tmp_path / "words.spm"))
    tiny = pieces_per_word(train_tiny_spm(tmp_path / "tiny.spm", seed=1))
    assert 1.0 <= words <= 1.6, words  # OPUS-MT's English: about 1.3
    assert tiny >= 2 * words, (tiny, words)  # why the cost figures no longer use it
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "words.spm"))
    assert all(sp.unk_id() not in sp.encode(t) for t in CAPTIONS)  # digits, punctuation


@pytest.fixture(scope="module")
def copy_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_opus_size_pair(tmp_path_factory.mktemp("copy") / "en-es", weights="copy")


@pytest.mark.long  # builds and runs a model of OPUS-MT base's size: ~10 s
def test_the_copy_model_is_opus_base_sized_and_copies_its_source_then_stops(
        copy_model: Path) -> None:
    from speechpipe.models.mt.ct2_translator import Ct2TextTranslator
    from speechpipe.stages.model_api import TextMtRequest

    translator = Ct2TextTranslator(copy_model, intra_threads=1)
    sp = spm.SentencePieceProcessor(model_file=str(copy_model / "source.spm"))
    for text in CAPTIONS:
        result = translator.translate(TextMtRequest(text, "en", "es"))
        assert result.text == text
        # it stops by itself where the source ends, far under the length cap
        assert result.source_tokens == len(sp.encode(text)) + 1  # and </s>
        assert result.generated_tokens == len(sp.encode(text))  # stopped at the source's end
    # a forced prefix is continued, and a longer source extends the shorter one's output
    head = "And so, my fellow Americans:"
    longer = translator.translate(TextMtRequest(CAPTIONS[0], "en", "es", target_prefix=head))
    assert longer.text == CAPTIONS[0] and longer.prefix_tokens > 0
    shorter = translator.translate(TextMtRequest(head + " ask not", "en", "es"))
    assert CAPTIONS[0].startswith(shorter.text)
    import json

    vocabulary = json.loads((copy_model / "shared_vocabulary.json").read_text())
    assert len(vocabulary) == OPUS_BASE["vocab"]  # the output layer a real one computes
    config = json.loads((copy_model / "config.json").read_text())
    assert config["decoder_start_token"] == "</s>"


@pytest.mark.long  # builds and runs a model of OPUS-MT base's size: ~10 s
def test_the_random_model_writes_pieces_and_runs_to_its_length_cap(tmp_path: Path) -> None:
    from speechpipe.models.mt.ct2_translator import Ct2TextTranslator
    from speechpipe.stages.model_api import TextMtRequest

    folder = build_opus_size_pair(tmp_path / "en-es", weights="random")
    translator = Ct2TextTranslator(folder, intra_threads=1)
    result = translator.translate(TextMtRequest(CAPTIONS[1], "en", "es"))
    assert result.text.strip() and result.text != CAPTIONS[1]
    assert result.generated_tokens > 1.3 * result.source_tokens  # the cap, not the source
