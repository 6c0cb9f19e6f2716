"""Decoders whose output layer scores only the tokens of the languages at hand.

Whisper's output layer scores all 51,865 tokens of its vocabulary at every decoder step. At
the batch sizes of live decoding (one or two items of five beams) a step reads every weight
once, and the output layer is over half of those bytes: on the measuring machine a step of
two items on 3 s of audio costs 6.5 ms with the full vocabulary and 4.5 ms with 14.6k tokens
(docs/benchmarks-history.md, "A vocabulary for the languages at hand"). A German speech
translated to English needs German and English tokens only.

``restricted_vocabulary`` chooses (once, cached under the model's home as a list of ids)
the tokens such a decoder keeps: the tokens of the most frequent words of the given
languages (``wordfreq``'s lists, in the forms " word", " Word" and "word"), every token of
one character (the bytes: any text can still be spelled), every token without a letter
(digits, punctuation) and every special token. The native decoder (``models.whisper.prefill``)
scores only those rows of the one shared output layer; no weights are copied, so a new
language costs ~19 MB per worker thread, not a ~200 MB model (docs/design.md, "Memory that
does not grow with languages"). ``RestrictedVocabulary`` maps between the kept tokens' own
ids and the full model's. A prompt token the restricted vocabulary lacks (committed text is
re-tokenized, and its canonical tokens can differ from the ones generated) is spelled with
kept tokens, longest first. The encoder is the same, so one encoder output serves both.

What changes: the softmax runs over the kept tokens, so scores are a little higher and a
word outside the lists is spelled with smaller pieces (or its probability mass goes to
kept words). Measured on the 49 x-to-English clips before it was made the default.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from speechpipe.models.workers import faults
from speechpipe.models.workers.heap import malloc_trim

log = logging.getLogger(__name__)

__all__ = [
    "RestrictedVocabulary",
    "kept_token_ids",
    "restricted_vocabulary",
    "vocabulary_languages",
]

FORMAT = 1  # bump when the kept set changes (a new cache key)


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
    _forget_word_lists()
    return sorted(kept)


def _forget_word_lists() -> None:
    """Drop wordfreq's in-memory caches: a language's full frequency list is ~50-200 MB of
    Python objects, kept for the process's life otherwise (measured: +51 to +207 MB RSS per
    new language), for a kept set that is computed once and cached on disk."""
    import gc

    import wordfreq

    for cached in (wordfreq.top_n_list, wordfreq.get_frequency_list,
                   wordfreq.get_frequency_dict):
        cached.cache_clear()
    gc.collect()
    malloc_trim()  # give the freed arenas back to the system (glibc)


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

    def spelled(self, ids: Iterable[int]) -> list[int]:
        """Full ids with every token not kept spelled with kept ones (full ids still)."""
        return self.to_full(self.to_restricted(ids))


# -- the kept set, cached ------------------------------------------------------------------
def restricted_vocabulary(full_dir: Path, languages: Iterable[str], words: int,
                          cache_root: Path) -> RestrictedVocabulary:
    """The id maps of a decoder of ``full_dir`` restricted to ``languages``. The kept ids are
    computed once (~1 s of tokenizing) and cached as a small JSON file under ``cache_root``
    (~0.3 MB; written to a temporary name, then renamed: crash- and race-safe). The weights
    are never copied: the native decoder gathers the kept rows of the shared output layer
    (``models.whisper.prefill``)."""
    from tokenizers import Tokenizer

    full_dir = Path(full_dir)
    langs = sorted(set(languages))
    stat = (full_dir / "model.bin").stat()
    key = hashlib.sha256(json.dumps(
        [FORMAT, str(full_dir.resolve()), stat.st_size, int(stat.st_mtime), langs, words]
    ).encode()).hexdigest()[:16]
    target = cache_root / f"{full_dir.name}-{'-'.join(langs)}-{words}-{key}.json"
    full_tokens = json.loads((full_dir / "vocabulary.json").read_text(encoding="utf-8"))
    try:
        kept = json.loads(target.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        kept = _kept_in_subprocess(full_dir, langs, words)
        if kept is None:  # no interpreter to start: here, at the cost of the memory
            tokenizer = Tokenizer.from_file(str(full_dir / "tokenizer.json"))
            kept = kept_token_ids(tokenizer, langs, words)
        tmp = cache_root / f".tmp-{target.name}-{uuid.uuid4().hex[:8]}"
        try:
            cache_root.mkdir(parents=True, exist_ok=True)
            faults.hit("cache:write")  # a test seam: a no-op unless a test arms it
            tmp.write_text(json.dumps(kept), encoding="utf-8")
            os.replace(tmp, target)
        except OSError as exc:  # a read-only or full home: decoded all the same, not kept
            with contextlib.suppress(OSError):  # never a half-written file left behind
                tmp.unlink(missing_ok=True)
            log.warning("cache: cannot write the restricted decoder's kept tokens for %s "
                        "under %s (%s); decoding goes on, they are computed again next time",
                        "+".join(langs), cache_root, exc.strerror or exc)
    return RestrictedVocabulary.build(full_tokens, kept)


def _kept_in_subprocess(full_dir: Path, languages: list[str], words: int) -> list[int] | None:
    """``kept_token_ids`` in a short-lived interpreter (~2 s, once per language and
    machine): wordfreq's lists and the tokenizer's buffers cost a server 10-60 MB of
    resident memory per language that it would keep (measured), for ids computed once.
    None when no interpreter could run it."""
    import subprocess
    import sys

    code = ("import json, sys; from tokenizers import Tokenizer; "
            "from speechpipe.models.whisper.vocab import kept_token_ids; "
            "print(json.dumps(kept_token_ids(Tokenizer.from_file(sys.argv[1]), "
            "sys.argv[2].split(','), int(sys.argv[3]))))")
    try:
        done = subprocess.run(
            [sys.executable, "-P", "-c", code, str(full_dir / "tokenizer.json"),
             ",".join(languages), str(words)],
            capture_output=True, text=True, timeout=120, check=True)
        kept = json.loads(done.stdout)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        log.info("kept tokens computed in this process (%s)", exc)
        return None
    return [int(i) for i in kept]
