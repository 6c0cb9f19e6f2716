"""Decoders whose output layer scores only the tokens of the languages at hand.

Whisper's output layer scores all 51,865 tokens of its vocabulary at every decoder step. At
the batch sizes of live decoding (one or two items of five beams) a step reads every weight
once, and the output layer is over half of those bytes: on the measuring machine a step of
two items on 3 s of audio costs 6.5 ms with the full vocabulary and 4.5 ms with 14.6k tokens
(docs/benchmarks.md, "A vocabulary for the languages at hand"). A German speech translated to
English needs German and English tokens only.

``restricted_model`` builds (once, cached under the model's home) a copy of a CTranslate2
Whisper folder whose token embeddings (tied to the output layer) keep the tokens of the most
frequent words of the given languages (``wordfreq``'s lists, in the forms " word", " Word"
and "word"), every token of one character (the bytes: any text can still be spelled), every
token without a letter (digits, punctuation) and every special token. Its ids are new;
``RestrictedVocabulary`` maps between them and the full model's, so the rest of the engine
keeps the full ids. A prompt token the restricted vocabulary lacks (committed text is
re-tokenized, and its canonical tokens can differ from the ones generated) is spelled with
kept tokens, longest first. The encoder is the same, so one encoder output serves both.

What changes: the softmax runs over the kept tokens, so scores are a little higher and a
word outside the lists is spelled with smaller pieces (or its probability mass goes to
kept words). Measured on the 49 x-to-English clips before it was made the default.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from speechpipe.models.whisper_weights import _locked

__all__ = [
    "RestrictedVocabulary",
    "kept_token_ids",
    "restricted_model",
    "vocabulary_languages",
]

FORMAT = 1  # bump when the kept set or the folder layout changes (a new cache key)
EMBEDDINGS = "decoder/embeddings/"  # the output layer is tied to these (an alias)
# the order of CTranslate2's DataType enum (include/ctranslate2/types.h)
_DTYPES = ("float32", "int8", "int16", "int32", "float16", "bfloat16")


def vocabulary_languages() -> frozenset[str]:
    """Languages with a word list (``wordfreq``): the others decode with the full vocabulary."""
    import wordfreq

    return frozenset(wordfreq.available_languages("best"))


def kept_token_ids(tokenizer, languages: Iterable[str], words: int) -> list[int]:
    """Full-vocabulary ids a decoder for ``languages`` keeps (sorted): special tokens, tokens
    of one character or without a letter, and the tokens of each language's ``words`` most
    frequent words. ``tokenizer`` is a ``tokenizers.Tokenizer`` of the Whisper model."""
    import wordfreq

    vocab = tokenizer.get_vocab()
    eot = vocab["<|endoftext|>"]
    kept = {i for i in vocab.values() if i >= eot}
    for token, i in vocab.items():
        if i < eot:
            text = tokenizer.decode([i])
            if len(token) == 1 or len(text) <= 1 or not any(c.isalpha() for c in text):
                kept.add(i)
    for language in sorted(set(languages)):
        forms: list[str] = []
        for word in wordfreq.top_n_list(language, words):
            variants = [word]
            if language == "de" and "ss" in word:  # the lists are case-folded: ß became ss
                variants.append(word.replace("ss", "ß"))
            for variant in variants:
                forms += [" " + variant, " " + variant[:1].upper() + variant[1:], variant]
        for encoding in tokenizer.encode_batch(forms, add_special_tokens=False):
            kept.update(encoding.ids)
    return sorted(kept)


@dataclass(frozen=True, slots=True)
class RestrictedVocabulary:
    """Id maps between a restricted decoder and the full vocabulary."""

    kept: np.ndarray  # restricted id -> full id
    full_to_kept: np.ndarray  # full id -> restricted id, -1 where not kept
    spellings: dict[int, tuple[int, ...]]  # full id not kept -> restricted ids spelling it

    @classmethod
    def build(cls, full_tokens: Sequence[str], kept: Sequence[int]) -> RestrictedVocabulary:
        """From the full vocabulary's token strings (by id) and the kept full ids."""
        kept_ids = np.asarray(kept, dtype=np.int64)
        full_to_kept = np.full(len(full_tokens), -1, dtype=np.int64)
        full_to_kept[kept_ids] = np.arange(len(kept_ids))
        by_string = {full_tokens[int(i)]: n for n, i in enumerate(kept_ids)}
        longest = max(len(s) for s in by_string)
        spellings: dict[int, tuple[int, ...]] = {}
        for i, token in enumerate(full_tokens):
            if full_to_kept[i] >= 0:
                continue
            pieces: list[int] = []
            start = 0
            while start < len(token):
                for end in range(min(len(token), start + longest), start, -1):
                    piece = by_string.get(token[start:end])
                    if piece is not None:
                        pieces.append(piece)
                        start = end
                        break
                else:  # a character no kept token has: cannot be spelled
                    pieces = []
                    break
            if pieces:
                spellings[i] = tuple(pieces)
        return cls(kept_ids, full_to_kept, spellings)

    def to_restricted(self, ids: Iterable[int]) -> list[int]:
        """Full ids as restricted ids; a token not kept is spelled with kept ones."""
        out: list[int] = []
        for i in ids:
            new = int(self.full_to_kept[i])
            if new >= 0:
                out.append(new)
            else:
                try:
                    out.extend(self.spellings[i])
                except KeyError:
                    raise ValueError(f"token {i} cannot be spelled in the restricted vocabulary")\
                        from None
        return out

    def to_full(self, ids: Iterable[int]) -> list[int]:
        """Restricted ids as full ids."""
        return [int(self.kept[i]) for i in ids]


# -- the restricted model folder ----------------------------------------------------------
def restricted_model(full_dir: Path, languages: Iterable[str], words: int,
                     cache_root: Path) -> tuple[Path, RestrictedVocabulary]:
    """A CTranslate2 Whisper folder restricted to ``languages`` (built once, then cached under
    ``cache_root``) and its id maps. Crash- and race-safe like the bundled model's assembly:
    built under a lock in a temporary folder, renamed into place when complete."""
    from tokenizers import Tokenizer

    full_dir = Path(full_dir)
    langs = sorted(set(languages))
    stat = (full_dir / "model.bin").stat()
    key = hashlib.sha256(json.dumps(
        [FORMAT, str(full_dir.resolve()), stat.st_size, int(stat.st_mtime), langs, words]
    ).encode()).hexdigest()[:16]
    target = cache_root / f"{full_dir.name}-{'-'.join(langs)}-{key}"
    full_tokens = json.loads((full_dir / "vocabulary.json").read_text(encoding="utf-8"))
    if not (target / "kept.json").exists():
        cache_root.mkdir(parents=True, exist_ok=True)
        with _locked(cache_root / f".{target.name}.lock"):
            if not (target / "kept.json").exists():
                tokenizer = Tokenizer.from_file(str(full_dir / "tokenizer.json"))
                kept = kept_token_ids(tokenizer, langs, words)
                _write_folder(full_dir, target, kept, full_tokens)
    kept = json.loads((target / "kept.json").read_text(encoding="utf-8"))
    return target, RestrictedVocabulary.build(full_tokens, kept)


def _write_folder(full_dir: Path, target: Path, kept: list[int], tokens: list[str]) -> None:
    tmp = target.parent / f".tmp-{target.name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        rows = np.asarray(kept, dtype=np.int64)
        _rewrite_model_bin(full_dir / "model.bin", tmp / "model.bin", rows, len(tokens))
        (tmp / "vocabulary.json").write_text(json.dumps([tokens[i] for i in kept]),
                                             encoding="utf-8")
        config = json.loads((full_dir / "config.json").read_text(encoding="utf-8"))
        new_id = {full: n for n, full in enumerate(kept)}
        for field in ("lang_ids", "suppress_ids", "suppress_ids_begin"):
            if field in config:
                config[field] = [new_id[i] for i in config[field] if i in new_id]
        (tmp / "config.json").write_text(json.dumps(config), encoding="utf-8")
        (tmp / "kept.json").write_text(json.dumps(kept), encoding="utf-8")  # written last
        shutil.rmtree(target, ignore_errors=True)
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _rewrite_model_bin(source: Path, dest: Path, rows: np.ndarray, vocab_size: int) -> None:
    """Copy a CTranslate2 ``model.bin`` (binary format 6), keeping only ``rows`` of every
    variable under ``decoder/embeddings/`` whose first dimension is the vocabulary."""
    with open(source, "rb") as src, open(dest, "wb") as out:
        def copy(fmt: str) -> tuple[int, ...]:
            raw = src.read(struct.calcsize(fmt))
            out.write(raw)
            return struct.unpack(fmt, raw)

        def copy_string() -> str:
            (length,) = copy("H")
            raw = src.read(length)
            out.write(raw)
            return raw[:-1].decode("utf-8")

        (version,) = copy("I")
        if version != 6:
            raise ValueError(f"model.bin format {version} is not supported (6 is)")
        copy_string()  # the spec's name
        copy("I")  # its revision
        (count,) = copy("I")
        for _ in range(count):
            name = copy_string()
            (rank,) = struct.unpack("B", src.read(1))
            shape = struct.unpack(f"{rank}I", src.read(4 * rank))
            (dtype,) = struct.unpack("B", src.read(1))
            (nbytes,) = struct.unpack("I", src.read(4))
            raw = src.read(nbytes)
            if name.startswith(EMBEDDINGS) and rank >= 1 and shape[0] == vocab_size:
                array = np.frombuffer(raw, dtype=_DTYPES[dtype]).reshape(shape)[rows]
                shape, raw = array.shape, np.ascontiguousarray(array).tobytes()
            out.write(struct.pack("B", rank))
            out.write(struct.pack(f"{rank}I", *shape))
            out.write(struct.pack("B", dtype))
            out.write(struct.pack("I", len(raw)))
            out.write(raw)
        out.write(src.read())  # the aliases (the output layer is one of them)
