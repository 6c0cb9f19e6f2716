"""Text MT whose forced target prefix is read in one pass (the translator's counterpart of
``models.whisper.prefill`` for Whisper).

An open segment's update forces the segment's committed translation as ``target_prefix``;
CTranslate2's ``translate_batch`` reads it one decoder step per token (~7.5 ms a token for
an OPUS-MT-base-size model on one thread), so every update paid again for everything the
segment had committed. ``PrefixReader`` continues the same greedy search after reading the
prefix in one decoder pass (``_ct2_prefill.PrefixTranslator``, models/native/): the encoder
once, the start token at step 0, the rest of the prefix but its last token in one pass,
then CTranslate2's own ``decode`` from the last prefix token, as ``translate_batch``
continues (greedy only; beam search keeps ``translate_batch``). Greedy requests without a
prefix go through it as well, so the ``ctranslate2.Translator`` and its copy of the weights
can be let go (``Ct2TextTranslator`` loads it again for beam search).

A look-ahead request and the request it is compared with share a forced prefix, so they
run as one batch (``PrefixReader.continue_rows``): one encoder call, one prefix pass, one
greedy search with a row each, the look-ahead's row stopped a token past the other's.

It is used only where it decodes what ``translate_batch`` does: ``PrefixReader.load``
decodes a probe both ways and returns None (logged once per model) when they differ or the
extension is missing. The native decoder holds its own copy of the weights (one per model
folder, shared by its threads).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from speechpipe.models.whisper.prefill import native_prefill

log = logging.getLogger(__name__)

__all__ = ["PrefixReader", "probe_tokens"]

_PROBE_SOURCE = "This is the first sentence of the day, and the second one follows it."
_PROBE_PREFIX = "This is the"
_PROBE_NEW = 6


class PrefixReader:
    """Greedy continuations of a forced prefix for one CTranslate2 sequence-to-sequence
    folder, each thread with its own native decoder (the weights are shared)."""

    def __init__(self, native: Any, path: Path, threads: int, compute_type: str,
                 source_vocab: Sequence[str], target_vocab: Sequence[str],
                 start_token: str, end_token: str, unk_token: str) -> None:
        self._native = native
        self._path = str(path)
        self._threads = max(1, threads)
        self._compute_type = compute_type
        self._source_ids = {token: i for i, token in enumerate(source_vocab)}
        # a shared vocabulary (Marian, NLLB) is one map, not two
        self._target_ids = (self._source_ids if target_vocab == source_vocab
                            else {token: i for i, token in enumerate(target_vocab)})
        self._target_tokens = target_vocab
        self._source_unk = self._source_ids[unk_token]
        self._target_unk = self._target_ids[unk_token]
        self._start = self._target_ids[start_token]
        self._end = self._target_ids[end_token]
        self._local = threading.local()
        self.calls = 0
        self._decoder()  # loads the weights now, not in the first update

    @classmethod
    def load(cls, translator: Any, path: Path, threads: int, compute_type: str,
             source_vocab: Sequence[str], target_vocab: Sequence[str],
             config: dict[str, Any], probe: tuple[list[str], list[str]]) -> PrefixReader | None:
        """The reader for ``path`` when the extension is here and decodes ``probe`` (source
        tokens, forced target tokens) as ``translator`` (a ``ctranslate2.Translator``) does;
        else None, and the reason in the log."""
        native = native_prefill()
        if native is None or not hasattr(native, "PrefixTranslator"):
            return None
        eos = str(config.get("eos_token") or "</s>")
        start = str(config.get("decoder_start_token") or config.get("bos_token") or "<s>")
        unk = str(config.get("unk_token") or "<unk>")
        try:
            reader = cls(native, path, threads, compute_type, source_vocab, target_vocab,
                         start, eos, unk)
        except (KeyError, RuntimeError, ValueError) as exc:
            log.warning("text MT prefix reading unavailable for %s (%s): translating with "
                        "translate_batch", path.name, exc)
            return None
        disagreement = reader.disagreement(translator, *probe)
        if disagreement:
            log.warning("text MT prefix reading set aside for %s: %s; translating with "
                        "translate_batch", path.name, disagreement)
            return None
        reader.calls = 0  # the probe is not an update
        return reader

    def _decoder(self) -> Any:
        decoder = getattr(self._local, "decoder", None)
        if decoder is None:
            decoder = self._native.PrefixTranslator(self._path, self._threads,
                                                    self._compute_type)
            self._local.decoder = decoder
        return decoder

    def continue_prefix(self, source: Sequence[str], prefix: Sequence[str],
                        max_new: int) -> list[str]:
        """The prefix (may be empty) and at most ``max_new`` greedy tokens after it (no end
        token)."""
        self.calls += 1
        new = self._decoder().continue_prefix(
            [self._source_ids.get(t, self._source_unk) for t in source], self._start,
            [self._target_ids.get(t, self._target_unk) for t in prefix], [self._end],
            max(0, max_new), [self._target_unk])
        return [*prefix, *(self._target_tokens[i] for i in new)]

    def continue_rows(self, sources: Sequence[Sequence[str]], prefix: Sequence[str],
                      max_new: Sequence[int], follows: Sequence[int]) -> list[list[str]]:
        """Several sources continuing the same ``prefix`` in one batch (one encoder call,
        one prefix pass, one greedy search): each row as ``continue_prefix`` gives it, at
        most ``max_new[i]`` new tokens; a row whose ``follows[i]`` is an earlier row's index
        (-1: none) stops one token past that row's continuation, as a look-ahead run after
        it does (``Ct2TextTranslator``)."""
        self.calls += 1
        ids = [self._target_ids.get(t, self._target_unk) for t in prefix]
        rows = self._decoder().continue_rows(
            [[self._source_ids.get(t, self._source_unk) for t in source] for source in sources],
            self._start, ids, [self._end], [max(0, n) for n in max_new], list(follows),
            [self._target_unk])
        return [[*prefix, *(self._target_tokens[i] for i in new)] for new in rows]

    def disagreement(self, translator: Any, source: list[str], prefix: list[str]) -> str:
        """'' when the reader translates ``source`` and continues ``prefix`` as
        ``translator.translate_batch`` does (greedy, the same cap); else what differs."""
        if len(prefix) < 2:
            return f"the probe's prefix has {len(prefix)} tokens"
        for forced in ([], prefix):
            expected = list(translator.translate_batch(
                [source], target_prefix=[forced or None], beam_size=1,
                max_decoding_length=len(forced) + _PROBE_NEW,
                disable_unk=True)[0].hypotheses[0])
            got = self.continue_prefix(source, forced, _PROBE_NEW)
            if got != expected:
                return (f"after {len(forced)} forced tokens it decoded {got[len(forced):]} "
                        f"where translate_batch decoded {expected[len(forced):]}")
        return ""


def probe_tokens(src_sp: Any, tgt_sp: Any, source_vocab: set[str], target_vocab: set[str],
                 eos: str | None) -> tuple[list[str], list[str]]:
    """A fixed probe: its source pieces (with the end token when the model reads one) and a
    forced target prefix of the target tokenizer's pieces the model knows."""
    source = [p for p in src_sp.encode(_PROBE_SOURCE, out_type=str) if p in source_vocab]
    if eos:
        source.append(eos)
    prefix = [p for p in tgt_sp.encode(_PROBE_PREFIX, out_type=str) if p in target_vocab]
    return source, prefix
