"""Build a tiny CTranslate2 translation model in a temp folder, for tests and the MT bench.

No text-MT model ships in any registry these machines reach, so the tests make their own:
a sentencepiece model trained in well under a second on generated sentences, and a 2-layer
Transformer whose weights are seeded random numpy arrays written with ctranslate2's spec API.
The words it produces mean nothing; the mechanics (tokenizers, language tokens, forced target
prefixes, batching) are the real ones.

Folder layouts mimic what ``ct2-transformers-converter --copy_files ...`` writes:

- ``nllb``:   ``sentencepiece.bpe.model``, shared vocabulary with ``eng_Latn``-style tokens
- ``m2m100``: ``sentencepiece.bpe.model``, shared vocabulary with ``__en__``-style tokens
- ``marian``: ``source.spm`` + ``target.spm``, fixed pair declared in ``tokenizer_config.json``
- ``marian-multi``: like ``marian`` with ``>>fra<<``-style target tokens in the vocabulary
"""

from __future__ import annotations

import io
import itertools
import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "FAMILIES",
    "NLLB_LANGS",
    "M2M_LANGS",
    "MARIAN_TARGETS",
    "build_tiny_mt",
    "train_tiny_spm",
    "generated_sentences",
    "make_whisper_like_folder",
    "build_tiny_pair",
    "build_tiny_argos",
    "random_spec",
    "fill_layers",
    "spm_pieces",
    "OPUS_BASE",
]

FAMILIES = ("nllb", "m2m100", "marian", "marian-multi")
NLLB_LANGS = ("eng_Latn", "fra_Latn", "deu_Latn", "spa_Latn")
M2M_LANGS = ("__en__", "__fr__", "__de__", "__es__")
MARIAN_TARGETS = (">>fra<<", ">>deu<<", ">>spa<<")

_SUBJECTS = ["the cat", "a dog", "my friend", "the teacher", "our neighbour", "this child",
             "the old man", "a small bird", "the doctor", "her brother"]
_VERBS = ["sees", "likes", "finds", "watches", "follows", "calls", "helps", "visits",
          "remembers", "carries"]
_OBJECTS = ["the red ball", "a green house", "the long river", "an open window",
            "the quiet garden", "a heavy box", "the morning train", "a warm coat",
            "the city market", "a blue boat"]
_TAILS = ["today", "every morning", "near the station", "after dinner", "in the rain",
          "without a word", "once again", "before noon", "with great care", "at night"]


def generated_sentences(count: int = 400, seed: int = 0) -> list[str]:
    """Deterministic, varied English-like sentences (training data and test input)."""
    rng = random.Random(seed)
    combos = list(itertools.product(_SUBJECTS, _VERBS, _OBJECTS, _TAILS))
    rng.shuffle(combos)
    out = []
    for subject, verb, obj, tail in combos[:count]:
        sentence = f"{subject} {verb} {obj} {tail}"
        out.append(sentence[0].upper() + sentence[1:] + rng.choice([".", ".", "?", "!"]))
    return out


def train_tiny_spm(path: Path, *, vocab_size: int = 160, seed: int = 0) -> Path:
    """Train a small BPE sentencepiece model on generated sentences and write it to ``path``."""
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(generated_sentences(400, seed)),
        model_writer=model,
        vocab_size=vocab_size,
        model_type="bpe",
        character_coverage=1.0,
        minloglevel=2,
    )
    path.write_bytes(model.getvalue())
    return path


def spm_pieces(path: Path) -> list[str]:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(path))
    return [
        sp.id_to_piece(i)
        for i in range(sp.get_piece_size())
        if not (sp.is_control(i) or sp.is_unknown(i))
    ]


def fill_layers(layers: Any, d_model: int, ffn: int, *, norm: Callable[[Any], None],
                linear: Callable[[Any, int, int, float], None],
                cross_out_scale: float = 1.0) -> None:
    """Set every sublayer of a pre-norm Transformer stack, layer by layer in one fixed order
    (self-attention, then cross-attention where the layer has one, then the feed-forward
    block): ``norm`` for each layer norm, ``linear(spec, rows, cols, scale)`` for each
    projection, ``scale`` 1.0 except ``cross_out_scale`` for the cross-attention's output."""
    for layer in layers:
        norm(layer.self_attention.layer_norm)
        linear(layer.self_attention.linear[0], 3 * d_model, d_model, 1.0)
        linear(layer.self_attention.linear[1], d_model, d_model, 1.0)
        cross = getattr(layer, "attention", None)
        if cross is not None:
            norm(cross.layer_norm)
            linear(cross.linear[0], d_model, d_model, 1.0)
            linear(cross.linear[1], 2 * d_model, d_model, 1.0)
            linear(cross.linear[2], d_model, d_model, cross_out_scale)
        norm(layer.ffn.layer_norm)
        linear(layer.ffn.linear_0, ffn, d_model, 1.0)
        linear(layer.ffn.linear_1, d_model, ffn, 1.0)


def random_spec(src_vocab: int, target_tokens: list[str], seed: int, *, d_model: int = 64,
                 heads: int = 4, ffn: int = 128, layers: int = 2):
    """A pre-norm Transformer with seeded random weights (Gaussian, scaled like an init).

    The output bias favours word-initial pieces (``▁...``) so the output reads as words.
    """
    tgt_vocab = len(target_tokens)
    from ctranslate2.specs import transformer_spec

    rng = np.random.default_rng(seed)

    def mat(rows: int, cols: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale / np.sqrt(cols)).astype(np.float32)

    def vec(n: int, scale: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(n) * scale).astype(np.float32)

    def norm(spec) -> None:
        spec.gamma = np.ones(d_model, np.float32)
        spec.beta = np.zeros(d_model, np.float32)

    def linear(spec, rows: int, cols: int, scale: float = 1.0) -> None:
        spec.weight = mat(rows, cols, scale)
        spec.bias = vec(rows)

    spec = transformer_spec.TransformerSpec.from_config(layers, heads, pre_norm=True)
    spec.encoder.embeddings[0].weight = mat(src_vocab, d_model, np.sqrt(d_model) / 4)
    norm(spec.encoder.layer_norm)
    fill_layers(spec.encoder.layer, d_model, ffn, norm=norm, linear=linear)
    spec.decoder.embeddings.weight = mat(tgt_vocab, d_model, np.sqrt(d_model) / 4)
    norm(spec.decoder.layer_norm)
    # Strong cross-attention: the output depends on the source, as in a real model.
    fill_layers(spec.decoder.layer, d_model, ffn, norm=norm, linear=linear, cross_out_scale=3.0)
    spec.decoder.projection.weight = mat(tgt_vocab, d_model, 4.0)
    spec.decoder.projection.bias = np.array(
        [4.0 if t.startswith("\u2581") and len(t) > 1 else 0.0 for t in target_tokens],
        dtype=np.float32,
    )
    return spec


_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]


def build_tiny_mt(out_dir: Path, family: str = "nllb", *, seed: int = 0,
                  spm_cache: Path | None = None) -> Path:
    """Write a loadable tiny model of ``family`` (see ``FAMILIES``) into ``out_dir``.

    ``spm_cache`` is a folder where trained tokenizers are kept between calls (training
    takes ~0.3 s; a test session builds several folders).
    """
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cache = spm_cache or out_dir
    cache.mkdir(parents=True, exist_ok=True)
    src_spm = cache / "tiny-src.spm"
    tgt_spm = cache / "tiny-tgt.spm"
    if not src_spm.exists():
        train_tiny_spm(src_spm, seed=1)
    if not tgt_spm.exists():
        train_tiny_spm(tgt_spm, seed=2, vocab_size=150)

    if family in ("nllb", "m2m100"):
        langs = NLLB_LANGS if family == "nllb" else M2M_LANGS
        vocab = _SPECIALS + spm_pieces(src_spm) + list(langs)
        shutil.copy(src_spm, out_dir / "sentencepiece.bpe.model")
        spec = random_spec(len(vocab), vocab, seed)
        spec.config.decoder_start_token = "</s>"
        spec.register_source_vocabulary(vocab)
        spec.register_target_vocabulary(vocab)
    else:
        shared = _SPECIALS[2:] + _dedupe(spm_pieces(src_spm) + spm_pieces(tgt_spm))
        if family == "marian-multi":
            shared += list(MARIAN_TARGETS)
        shutil.copy(src_spm, out_dir / "source.spm")
        shutil.copy(tgt_spm, out_dir / "target.spm")
        spec = random_spec(len(shared), shared, seed)
        spec.config.decoder_start_token = "</s>"
        spec.decoder.start_from_zero_embedding = True
        spec.register_source_vocabulary(shared)
        spec.register_target_vocabulary(shared)
        if family == "marian":
            (out_dir / "tokenizer_config.json").write_text(
                json.dumps({"source_lang": "en", "target_lang": "fr"}), encoding="utf-8"
            )
    spec.validate()
    spec.optimize(quantization="float32")
    spec.save(str(out_dir))
    return out_dir


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def make_whisper_like_folder(out_dir: Path) -> Path:
    """A folder whose ``model.bin`` header names ``WhisperSpec`` (only the header is real)."""
    import struct

    out_dir.mkdir(parents=True, exist_ok=True)
    name = b"WhisperSpec"
    header = struct.pack("I", 6) + struct.pack("H", len(name) + 1) + name + b"\0"
    (out_dir / "model.bin").write_bytes(header + struct.pack("I", 3) + struct.pack("I", 0))
    (out_dir / "config.json").write_text(json.dumps({"lang_ids": [1, 2]}), encoding="utf-8")
    (out_dir / "vocabulary.json").write_text(json.dumps(["<|en|>", "a"]), encoding="utf-8")
    (out_dir / "tokenizer.json").write_text("{}", encoding="utf-8")
    return out_dir


def build_tiny_pair(out_dir: Path, source: str, target: str, *, seed: int = 0,
                    spm_cache: Path | None = None) -> Path:
    """A tiny Marian (OPUS-MT layout) folder for the pair ``source`` -> ``target``."""
    folder = build_tiny_mt(out_dir, "marian", seed=seed, spm_cache=spm_cache)
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"source_lang": source, "target_lang": target}), encoding="utf-8")
    return folder


def build_tiny_argos(out_zip: Path, source: str, target: str, *, seed: int = 0,
                     spm_cache: Path | None = None) -> Path:
    """A tiny Argos Translate package (``.argosmodel``): ``metadata.json``, ``model/`` (the
    CTranslate2 folder) and one ``sentencepiece.model`` for both sides, in one top folder."""
    import tempfile
    import zipfile

    with tempfile.TemporaryDirectory() as tmp:
        folder = build_tiny_mt(Path(tmp) / "m", "marian", seed=seed, spm_cache=spm_cache)
        top = f"translate-{source}_{target}-1_0"
        out_zip = Path(out_zip)
        out_zip.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(out_zip, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(f"{top}/metadata.json", json.dumps({
                "package_version": "1.0", "argos_version": "1.0", "from_code": source,
                "to_code": target, "from_name": source, "to_name": target}))
            for item in sorted(folder.iterdir()):
                if item.name in ("model.bin", "config.json") or "vocabulary" in item.name:
                    archive.write(item, f"{top}/model/{item.name}")
            archive.write(folder / "source.spm", f"{top}/sentencepiece.model")
    return out_zip


OPUS_BASE = {"d_model": 512, "heads": 8, "ffn": 2048, "layers": 6, "vocab": 58_101}
"""OPUS-MT base (Marian transformer-base): 6+6 layers, d=512, 8 heads, FFN 2048, ~58k vocab."""
