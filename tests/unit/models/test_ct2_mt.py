"""The CTranslate2 text-MT backend on tiny models the tests build (speechpipe/bench/tiny_mt.py)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from speechpipe.bench.tiny_mt import (
    build_tiny_mt,
    generated_sentences,
    make_whisper_like_folder,
    train_tiny_spm,
)
from speechpipe.errors import LanguageError, ModelError, WorkerError
from speechpipe.models.mt.ct2_folder import ModelFamily, inspect_mt_model
from speechpipe.models.mt.ct2_translator import Ct2TextTranslator, TextMtRequest
from speechpipe.models.mt.ct2_worker import Ct2TranslationWorker

ctranslate2 = pytest.importorskip("ctranslate2")
spm = pytest.importorskip("sentencepiece")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-mt")
    cache = root / "spm"
    return {
        family: build_tiny_mt(root / family, family, spm_cache=cache)
        for family in ("nllb", "m2m100", "marian", "marian-multi")
    }


@pytest.fixture(scope="module")
def nllb(models: dict[str, Path]) -> Ct2TextTranslator:
    return Ct2TextTranslator(models["nllb"], intra_threads=1)


# --- loading and detection ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("family", "expected", "sources", "targets", "multi"),
    [
        ("nllb", ModelFamily.NLLB, {"en", "fr", "de", "es"}, {"en", "fr", "de", "es"}, False),
        ("m2m100", ModelFamily.M2M100, {"en", "fr", "de", "es"}, {"en", "fr", "de", "es"}, False),
        ("marian", ModelFamily.MARIAN, {"en"}, {"fr"}, False),
        ("marian-multi", ModelFamily.MARIAN, None, {"fr", "de", "es"}, True),
    ],
)
def test_loads_and_detects_family(
    models: dict[str, Path], family: str, expected: ModelFamily,
    sources: set[str] | None, targets: set[str], multi: bool,
) -> None:
    translator = Ct2TextTranslator(models[family], intra_threads=1)
    assert translator.family is expected
    info = inspect_mt_model(models[family])
    assert info == translator.info
    assert info.source_langs == (frozenset(sources) if sources is not None else None)
    assert info.target_langs == frozenset(targets)
    assert info.multi_target is multi
    assert info.size_bytes > 0
    result = translator.translate(TextMtRequest("The cat sees a dog today.", "en", "fr"))
    assert result.text and result.continuation == result.text
    assert result.generated_tokens > 0 and result.source_tokens > 0


def test_metadata_file_declares_the_marian_pair(models: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "opus"
    shutil.copytree(models["marian"], folder)
    (folder / "tokenizer_config.json").unlink()
    with pytest.raises(ModelError, match="target language"):
        inspect_mt_model(folder)
    (folder / "speechpipe.json").write_text(json.dumps({"source_lang": "de", "target_lang": "es"}))
    info = inspect_mt_model(folder)
    assert (info.source_langs, info.target_langs) == ({"de"}, {"es"})
    renamed = tmp_path / "opus-mt-it-pt"
    shutil.copytree(models["marian"], renamed)
    (renamed / "tokenizer_config.json").unlink()
    assert inspect_mt_model(renamed).target_langs == {"pt"}


# --- language mapping --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("family", "pair", "tokens"),
    [
        ("nllb", ("fr", "de"), ("fra_Latn", "deu_Latn")),
        ("nllb", ("en", "es-ES"), ("eng_Latn", "spa_Latn")),
        ("nllb", ("eng_Latn", "fra"), ("eng_Latn", "fra_Latn")),
        ("m2m100", ("en", "fr"), ("__en__", "__fr__")),
        ("marian", ("en", "fr"), (None, None)),
        ("marian", ("auto", "fr"), (None, None)),
        ("marian-multi", ("en", "fr"), (None, ">>fra<<")),
        ("marian-multi", ("it", "de"), (None, ">>deu<<")),
    ],
)
def test_language_mapping(
    models: dict[str, Path], family: str, pair: tuple[str, str], tokens: tuple[str, str]
) -> None:
    translator = Ct2TextTranslator(models[family], intra_threads=1)
    assert translator.language_tokens(*pair) == tokens


@pytest.mark.parametrize(
    ("family", "pair", "match"),
    [
        ("nllb", ("en", "ja"), "into 'ja'"),
        ("nllb", ("zh", "fr"), "from 'zh'"),
        ("nllb", ("auto", "fr"), "needs the source language"),
        ("m2m100", ("en", "ko"), "into 'ko'"),
        ("marian", ("es", "fr"), "from en, not 'es'"),
        ("marian", ("en", "de"), "into fr, not 'de'"),
        ("marian-multi", ("en", "ja"), "targets: de, es, fr"),
        ("marian-multi", ("klingon", "fr"), "unknown source language"),
    ],
)
def test_unsupported_pair_is_a_language_error(
    models: dict[str, Path], family: str, pair: tuple[str, str], match: str
) -> None:
    translator = Ct2TextTranslator(models[family], intra_threads=1)
    with pytest.raises(LanguageError, match=match):
        translator.language_tokens(*pair)
    with pytest.raises(LanguageError, match=match):
        translator.translate(TextMtRequest("hello", *pair))
    if pair[0] != "auto":
        with pytest.raises(LanguageError, match=match):
            translator.check_languages(*pair)


@pytest.mark.parametrize(
    ("family", "target", "ok"),
    [("nllb", "de", True), ("nllb", "ja", False), ("m2m100", "es", True),
     ("marian", "fr", True), ("marian", "de", False), ("marian-multi", "es", True)],
)
def test_auto_source_checks_the_target_only(
    models: dict[str, Path], family: str, target: str, ok: bool
) -> None:
    translator = Ct2TextTranslator(models[family], intra_threads=1)
    if ok:
        translator.check_languages("auto", target)
    else:
        with pytest.raises(LanguageError):
            translator.check_languages("auto", target)


def test_source_and_target_tokens_reach_the_model(models: dict[str, Path]) -> None:
    """NLLB: source = [src_lang, pieces..., </s>], target forced to start with tgt_lang."""
    translator = Ct2TextTranslator(models["nllb"], intra_threads=1)
    prepared = translator._prepare(TextMtRequest("The cat", "en", "de", "A dog"))
    sp = spm.SentencePieceProcessor(model_file=str(models["nllb"] / "sentencepiece.bpe.model"))
    assert prepared.source == ["eng_Latn", *sp.encode("The cat", out_type=str), "</s>"]
    assert prepared.prefix == ["deu_Latn", *sp.encode("A dog", out_type=str)]
    marian = Ct2TextTranslator(models["marian-multi"], intra_threads=1)
    assert marian._prepare(TextMtRequest("The cat", "en", "es")).source[0] == ">>spa<<"


# --- prefix-constrained decoding ---------------------------------------------------------


def _raw_forced(model: Path, source: str, prefix: str) -> tuple[list[str], str]:
    """Reference straight from ctranslate2 + sentencepiece, bypassing the translator:
    (the target tokens after the language token, their decoded text)."""
    sp = spm.SentencePieceProcessor(model_file=str(model / "sentencepiece.bpe.model"))
    raw = ctranslate2.Translator(str(model), intra_threads=1)
    src = ["eng_Latn", *sp.encode(source, out_type=str), "</s>"]
    forced = ["fra_Latn", *sp.encode(prefix, out_type=str)] if prefix else ["fra_Latn"]
    cap = max(1 + int(1.5 * len(src)) + 10, len(forced) + 8)
    tokens = raw.translate_batch(
        [src], target_prefix=[forced], beam_size=1, disable_unk=True, max_decoding_length=cap
    )[0].hypotheses[0]
    assert tokens[: len(forced)] == forced  # ctranslate2 returns the forced prefix too
    pieces = {sp.id_to_piece(i) for i in range(sp.get_piece_size())}
    return tokens[1:], sp.decode_pieces([t for t in tokens[1:] if t in pieces])


@pytest.mark.parametrize("prefix_words", [0, 1, 3])
def test_forced_prefix_is_kept_and_stripped(
    models: dict[str, Path], nllb: Ct2TextTranslator, prefix_words: int
) -> None:
    sp = spm.SentencePieceProcessor(model_file=str(models["nllb"] / "sentencepiece.bpe.model"))
    for source in generated_sentences(6, seed=4):
        free = nllb.translate(TextMtRequest(source, "en", "fr"))
        prefix = " ".join(free.text.split()[:prefix_words])
        forced = nllb.translate(TextMtRequest(source, "en", "fr", target_prefix=prefix))
        tokens, reference_text = _raw_forced(models["nllb"], source, prefix)
        prefix_pieces = sp.encode(prefix, out_type=str) if prefix else []
        assert forced.text == reference_text
        assert forced.text.startswith(prefix)
        assert forced.prefix_tokens == 1 + len(prefix_pieces)
        assert forced.generated_tokens == len(tokens) - len(prefix_pieces)
        if forced.joins_prefix:
            assert forced.text == prefix + forced.continuation
        else:
            assert forced.text == " ".join(p for p in (prefix, forced.continuation) if p)


def test_forcing_greedys_own_words_changes_nothing(
    models: dict[str, Path], nllb: Ct2TextTranslator
) -> None:
    """Greedy decoding is deterministic: forcing a prefix that re-encodes to exactly the
    tokens greedy produced gives the unforced output back (when the length cap leaves the
    forced run ``min_new_tokens`` of room, as it always does for a model that ends its
    output with ``</s>`` well before the cap)."""
    sp = spm.SentencePieceProcessor(model_file=str(models["nllb"] / "sentencepiece.bpe.model"))
    checked = 0
    for source in generated_sentences(6, seed=4):
        free = nllb.translate(TextMtRequest(source, "en", "fr"))
        free_tokens, _ = _raw_forced(models["nllb"], source, "")
        words = free.text.split()
        for k in range(1, len(words)):
            prefix = " ".join(words[:k])
            pieces = sp.encode(prefix, out_type=str)
            if free_tokens[: len(pieces)] != pieces:
                continue  # the tokenizer would segment these words differently
            if len(pieces) + nllb.options.min_new_tokens > len(free_tokens):
                continue  # the length cap would grant the forced run extra tokens
            forced = nllb.translate(TextMtRequest(source, "en", "fr", target_prefix=prefix))
            assert forced.text == free.text
            checked += 1
    assert checked >= 3


def test_prefix_not_in_the_model_vocabulary_still_decodes(nllb: Ct2TextTranslator) -> None:
    result = nllb.translate(TextMtRequest("The cat.", "en", "fr", target_prefix="Zzqx ÆØÅ"))
    assert result.text and result.prefix_tokens > 1


# --- batching worker ---------------------------------------------------------------------


def _requests(n: int) -> list[TextMtRequest]:
    sentences = generated_sentences(n, seed=7)
    return [
        TextMtRequest(
            s, "en", ("fr", "de", "es")[i % 3],
            target_prefix="" if i % 2 else "The",
            beam_size=1 if i % 4 else 2,
        )
        for i, s in enumerate(sentences)
    ]


class _CountingTranslator(Ct2TextTranslator):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.batch_sizes: list[int] = []

    def translate_batch(self, requests, **kwargs):  # type: ignore[no-untyped-def,override]
        self.batch_sizes.append(len(requests))
        return super().translate_batch(requests, **kwargs)


async def test_worker_batches_concurrent_requests(models: dict[str, Path]) -> None:
    translator = _CountingTranslator(models["nllb"], intra_threads=1)
    requests = _requests(12)
    one_by_one = [translator.translate(r) for r in requests]
    translator.batch_sizes.clear()
    async with Ct2TranslationWorker(translator, max_batch=16, window_s=0.02) as worker:
        results = await asyncio.gather(*(worker.translate(r) for r in requests))
    assert results == one_by_one
    assert len(translator.batch_sizes) < len(requests)
    assert sum(translator.batch_sizes) == len(requests)
    assert worker.batches == len(translator.batch_sizes)


async def test_worker_max_batch_splits(models: dict[str, Path]) -> None:
    translator = _CountingTranslator(models["nllb"], intra_threads=1)
    async with Ct2TranslationWorker(translator, max_batch=4, window_s=0.02) as worker:
        await asyncio.gather(*(worker.translate(r) for r in _requests(10)))
    assert max(translator.batch_sizes) <= 4
    assert sum(translator.batch_sizes) == 10


async def test_worker_errors_reach_only_the_bad_request(nllb: Ct2TextTranslator) -> None:
    good = _requests(3)
    bad = TextMtRequest("hello", "en", "ja")
    async with Ct2TranslationWorker(nllb, window_s=0.02) as worker:
        outcomes = await asyncio.gather(
            *(worker.translate(r) for r in [good[0], bad, good[1], good[2]]),
            return_exceptions=True,
        )
    assert isinstance(outcomes[1], LanguageError)
    assert [o for i, o in enumerate(outcomes) if i != 1] == [nllb.translate(r) for r in good]


async def test_worker_engine_failure_is_isolated(
    nllb: Ct2TextTranslator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine fails on one request of a batch: the batch is retried one by one."""
    real_run = nllb._run

    def flaky(batch):  # type: ignore[no-untyped-def]
        if any(p.beam_size == 3 for p in batch):
            raise RuntimeError("engine failure")
        return real_run(batch)

    monkeypatch.setattr(nllb, "_run", flaky)
    poison = TextMtRequest("The cat.", "en", "fr", beam_size=3)
    good = [r for r in _requests(3) if r.beam_size != 3]
    async with Ct2TranslationWorker(nllb, window_s=0.02) as worker:
        outcomes = await asyncio.gather(
            *(worker.translate(r) for r in [good[0], poison, good[1]]), return_exceptions=True
        )
    assert isinstance(outcomes[1], WorkerError)
    assert outcomes[0] == nllb.translate(good[0])
    assert outcomes[2] == nllb.translate(good[1])
    with pytest.raises(WorkerError, match="engine failure"):
        nllb.translate(poison)


async def test_worker_runs_off_the_event_loop(nllb: Ct2TextTranslator) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    async with Ct2TranslationWorker(nllb, window_s=0.0) as worker:
        task = asyncio.create_task(ticker())
        long = TextMtRequest(" ".join(generated_sentences(20, seed=1)), "en", "fr", beam_size=4)
        await worker.translate(long)
        task.cancel()
    assert ticks > 0


async def test_closed_worker_refuses(nllb: Ct2TextTranslator) -> None:
    worker = Ct2TranslationWorker(nllb)
    await worker.aclose()
    with pytest.raises(WorkerError):
        await worker.translate(TextMtRequest("a", "en", "fr"))


# --- bad model folders -------------------------------------------------------------------


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="does not exist"):
        Ct2TextTranslator(tmp_path / "nope")


def test_file_instead_of_folder(tmp_path: Path) -> None:
    (tmp_path / "model.bin").write_bytes(b"x")
    with pytest.raises(ModelError, match="not a folder"):
        Ct2TextTranslator(tmp_path / "model.bin")


def test_whisper_folder_is_the_wrong_model_type(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="Whisper speech-recognition model"):
        Ct2TextTranslator(make_whisper_like_folder(tmp_path / "whisper"))


def test_real_whisper_folder_if_assembled() -> None:
    from speechpipe.models.home import speechpipe_home

    folder = speechpipe_home() / "models" / "whisper-base"
    if not (folder / "model.bin").is_file():
        pytest.skip("the bundled Whisper model has not been assembled on this machine")
    with pytest.raises(ModelError, match="Whisper"):
        Ct2TextTranslator(folder)


def test_hugging_face_folder_says_convert(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "marian"}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(ModelError, match="models convert"):
        Ct2TextTranslator(tmp_path)


def test_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no model.bin"):
        Ct2TextTranslator(tmp_path)


def test_corrupt_model_bin(models: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "corrupt"
    shutil.copytree(models["nllb"], folder)
    data = (folder / "model.bin").read_bytes()
    (folder / "model.bin").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match="cannot load"):
        Ct2TextTranslator(folder)


def test_mismatched_tokenizer(models: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "mismatch"
    shutil.copytree(models["nllb"], folder)
    other = tmp_path / "other"
    other.mkdir()
    # A tokenizer trained on different text with a different vocabulary.
    import random

    import sentencepiece as sp_mod

    rng = random.Random(0)
    lines = [
        " ".join("".join(rng.choice("ðþæøåqxzjkvw") for _ in range(rng.randint(2, 7)))
                 for _ in range(8))
        for _ in range(400)
    ]
    sp_mod.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(other / "spm"), vocab_size=120,
        minloglevel=2,
    )
    shutil.copy(other / "spm.model", folder / "sentencepiece.bpe.model")
    with pytest.raises(ModelError, match="does not match the model's source vocabulary"):
        Ct2TextTranslator(folder)


def test_missing_tokenizer(models: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "notok"
    shutil.copytree(models["m2m100"], folder)
    (folder / "sentencepiece.bpe.model").unlink()
    with pytest.raises(ModelError, match="no sentencepiece tokenizer"):
        Ct2TextTranslator(folder)


def test_unreadable_tokenizer(models: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "badtok"
    shutil.copytree(models["marian"], folder)
    (folder / "target.spm").write_bytes(b"not a sentencepiece model")
    with pytest.raises(ModelError, match="not a sentencepiece model"):
        Ct2TextTranslator(folder)


def test_unknown_family(models: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "unknown"
    shutil.copytree(models["nllb"], folder)
    vocab = json.loads((folder / "shared_vocabulary.json").read_text())
    vocab = [f"lang{i}" if t.endswith("_Latn") else t for i, t in enumerate(vocab)]
    (folder / "shared_vocabulary.json").write_text(json.dumps(vocab))
    with pytest.raises(ModelError, match="cannot tell which model family"):
        Ct2TextTranslator(folder)
    (folder / "speechpipe.json").write_text(json.dumps({"family": "t5"}))
    with pytest.raises(ModelError, match="unknown family"):
        Ct2TextTranslator(folder)


def test_tiny_tokenizer_trains_quickly(tmp_path: Path) -> None:
    path = train_tiny_spm(tmp_path / "t.spm")
    sp = spm.SentencePieceProcessor(model_file=str(path))
    assert sp.get_piece_size() == 160
