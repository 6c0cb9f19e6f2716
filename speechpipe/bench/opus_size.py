"""An OPUS-MT-base-size translation model for the cascade's cost figures (``bench cascade``,
``bench load --target-lang``), built here because no text-MT weights reach these machines.

Two things decide what the cascade costs per second of speech: the work per decoder step
(the model's size: OPUS-MT base, 6+6 layers, d=512, a 58k-row output layer, int8) and how
many steps a second of speech takes (tokens per word, and how long each output runs).

- **Tokens per word: a tokenizer trained on English words** (``word_spm``). The tests' tiny
  tokenizer (``tiny_mt.train_tiny_spm``, 160 pieces) splits real captions into 3.7 pieces a
  word, where OPUS-MT's SentencePiece (32k pieces a side) gives about 1.3. This one is a
  SentencePiece BPE of 16k pieces trained on the word-initial entries of the bundled Whisper
  tokenizer (a byte-level BPE trained on web text, so its merge order ranks words by
  frequency), each weighted by that rank (Zipf): 1.24-1.37 pieces a word on the shared clips'
  English.
- **How long each output runs: the weights.** ``weights="random"`` (seeded random, as the
  tests' models): it never ends a sentence by itself, so every output runs to the length cap
  (1.5 x the source + 10 tokens), and two updates of a segment rarely agree: an upper bound.
  ``weights="copy"``: set by hand so the decoder reads the source position equal to its own
  step and writes that source token, ``</s>`` included (``_copy_spec``): it ends where the
  source ends and a longer source extends its output, as a trained monotone translator
  would, with every matrix of a real model's size computed at every step: a lower bound
  (a trained model reorders and rewords, so its updates agree less often).

Both write pieces of the one tokenizer on both sides, so the copy model's output reads as
its input (English, whatever the pair's label says); the random model's is gibberish.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Literal

import numpy as np

from speechpipe.bench.tiny_mt import OPUS_BASE, fill_layers, random_spec, spm_pieces

__all__ = ["word_spm", "build_opus_size_pair", "Weights"]

Weights = Literal["random", "copy"]
WORD_SPM_PIECES = 16_000
COPY_POSITIONS = 1024  # the copy model's longest source / output, in tokens
_SPECIALS = ["</s>", "<unk>"]


def whisper_words() -> list[str]:
    """The bundled Whisper tokenizer's word-initial entries, most frequent first (its BPE
    merge order)."""
    from speechpipe.models.whisper.weights import WHISPER_BASE_MODEL, _data_file

    package = dict((name, pkg) for pkg, name in WHISPER_BASE_MODEL.files)["tokenizer.json"]
    tokenizer = json.loads(_data_file(package, "tokenizer.json", WHISPER_BASE_MODEL)
                           .read_text(encoding="utf-8"))
    ranked = sorted(tokenizer["model"]["vocab"].items(), key=lambda item: item[1])
    return [token[1:] for token, _ in ranked if token.startswith("\u0120") and token[1:].isalpha()]


def word_spm(path: Path, *, vocab_size: int = WORD_SPM_PIECES) -> Path:
    """Train the English word tokenizer (see the module docs) into ``path``."""
    import sentencepiece as spm

    words = path.with_suffix(".words.tsv")
    ranked = [f"{word}\t{max(1, int(1e7 / (rank + 10)))}\n"
              for rank, word in enumerate(whisper_words())]
    # captions hold digits and punctuation too: each a piece of its own (as common as a
    # frequent word), so no caption has a piece the tokenizer cannot write
    marks = [f"{mark}\t100000\n" for mark in "0123456789.,?!;:'\"-%$&()/"]
    words.write_text("".join(ranked + marks), encoding="utf-8")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(input=str(words), input_format="tsv", model_writer=model,
                                   vocab_size=vocab_size, model_type="bpe",
                                   character_coverage=1.0, minloglevel=2)
    words.unlink()
    path.write_bytes(model.getvalue())
    return path


def _copy_spec(vocab: list[str], seed: int) -> Any:
    """Pre-norm OPUS-base-size weights that copy the source (see the module docs).

    The residual stream's first half carries a token's identity, its second half the
    position. The decoder's embeddings are (near) zero, so at step t it holds only position
    t; the first decoder layer's cross-attention, on the position half only, finds the source
    position t, and its values move that position's token half into the stream; the output
    layer reads the token half. Every other sublayer is near-zero noise (a residual passes
    through), so each step still computes all six layers and the 58k-row output layer."""
    from ctranslate2.specs import transformer_spec

    d, half = OPUS_BASE["d_model"], OPUS_BASE["d_model"] // 2
    ffn, layers, heads = OPUS_BASE["ffn"], OPUS_BASE["layers"], OPUS_BASE["heads"]
    rng = np.random.default_rng(seed)

    def noise(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 1e-4).astype(np.float32)

    def norm(spec: Any) -> None:
        spec.gamma = np.ones(d, np.float32)
        spec.beta = np.zeros(d, np.float32)

    def idle(spec: Any, rows: int, cols: int, _scale: float = 1.0) -> None:
        spec.weight = noise(rows, cols)
        spec.bias = np.zeros(rows, np.float32)

    tokens = np.zeros((len(vocab), d), np.float32)  # identity: the first half
    tokens[:, :half] = rng.standard_normal((len(vocab), half)) / np.sqrt(d)
    positions = np.zeros((COPY_POSITIONS, d), np.float32)  # position: the second half
    positions[:, half:] = rng.standard_normal((COPY_POSITIONS, half))

    spec = transformer_spec.TransformerSpec.from_config(layers, heads, pre_norm=True)
    spec.encoder.embeddings[0].weight = tokens
    spec.encoder.position_encodings.encodings = positions
    norm(spec.encoder.layer_norm)
    fill_layers(spec.encoder.layer, d, ffn, norm=norm, linear=idle)
    spec.decoder.embeddings.weight = noise(len(vocab), d)
    spec.decoder.position_encodings.encodings = positions
    norm(spec.decoder.layer_norm)
    fill_layers(spec.decoder.layer, d, ffn, norm=norm, linear=idle)
    sharp = np.float32(3.0)  # position scores: the right source position wins by ~20 logits
    reader = spec.decoder.layer[0].attention
    query = reader.linear[0].weight
    keys_values = reader.linear[1].weight  # keys (d rows), then values (d rows)
    out = reader.linear[2].weight
    for i in range(half):
        query[half + i, half + i] = sharp  # heads of the position half compare positions
        keys_values[half + i, half + i] = 1.0
        keys_values[d + half + i, i] = 1.0  # their values: the source token's identity
        out[i, half + i] = 4.0  # back into the token half, above the position's weight
    spec.decoder.projection.weight = tokens * np.sqrt(d)
    spec.decoder.projection.bias = np.where(
        np.array([t.startswith("<unused") for t in vocab]), np.float32(-1e4),
        np.float32(0.0)).astype(np.float32)
    return spec


def build_opus_size_pair(out_dir: Path, source: str = "en", target: str = "es", *,
                         weights: Weights = "random", seed: int = 0,
                         quantization: str = "int8") -> Path:
    """A Marian folder of OPUS-MT base size for ``source -> target`` with the English word
    tokenizer on both sides and ``weights`` as the module docs say."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    spm_path = word_spm(out_dir / "source.spm")
    (out_dir / "target.spm").write_bytes(spm_path.read_bytes())
    vocab = _SPECIALS + [p for p in spm_pieces(spm_path) if p not in _SPECIALS]
    vocab += [f"<unused{i}>" for i in range(OPUS_BASE["vocab"] - len(vocab))]
    if weights == "copy":
        spec = _copy_spec(vocab, seed)
    else:
        spec = random_spec(len(vocab), vocab, seed, d_model=OPUS_BASE["d_model"],
                           heads=OPUS_BASE["heads"], ffn=OPUS_BASE["ffn"],
                           layers=OPUS_BASE["layers"])
        # the padding rows are computed at every step but never chosen: the model writes
        # the tokenizer's pieces, so its output reads as words and can be agreed on
        spec.decoder.projection.bias = np.where(
            np.array([t.startswith("<unused") for t in vocab]), np.float32(-1e4),
            spec.decoder.projection.bias).astype(np.float32)
    spec.config.decoder_start_token = "</s>"
    spec.decoder.start_from_zero_embedding = True
    spec.register_source_vocabulary(vocab)
    spec.register_target_vocabulary(vocab)
    spec.validate()
    spec.optimize(quantization=quantization)
    spec.save(str(out_dir))
    (out_dir / "tokenizer_config.json").write_text(
        json.dumps({"source_lang": source, "target_lang": target}), encoding="utf-8")
    return out_dir
