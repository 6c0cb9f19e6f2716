"""Which decoder decodes a language: the full vocabulary or a restricted one.

A restricted decoder (``models.whisper.vocab``) keeps the tokens of a language's and
English's most frequent words; it selects rows of the shared model's output layer in the
native decoder (``models.whisper.prefill``), so no weights are copied. It is chosen per (language,
words per language) once, and falls back to the full vocabulary (``None``) when
- the language has no word list;
- the native decoder is not built;
- CTranslate2 cannot restrict the output layer here (Intel MKL's packed weights: there the
  full vocabulary costs less, docs/benchmarks.md), logged once;
- the kept set cannot be read (a foreign tokenizer, a missing word list, a read-only home),
  logged; sessions go on.

``for_group`` hands out the decoder of one group of a batch plan behind one interface
(``models.whisper.generate``): the native decoder when the group reads prefix tokens in the
prompt pass or has a restriction, CTranslate2's ``generate`` otherwise.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from speechpipe.models.home import speechpipe_home
from speechpipe.models.whisper.batch_plan import GroupKey
from speechpipe.models.whisper.generate import Ct2Decoder, Decoder, NativeDecoder
from speechpipe.models.whisper.prefill import NativePrefill, native_prefill, rows_step_disagreement
from speechpipe.models.whisper.vocab import (
    RestrictedVocabulary,
    restricted_vocabulary,
    vocabulary_languages,
)

log = logging.getLogger(__name__)

__all__ = ["WhisperDecoders"]


class WhisperDecoders:
    """The native prefix-prefill decoders of one Whisper model folder (loaded on first use)
    and the vocabulary restriction chosen per language; thread-safe."""

    def __init__(self, model_dir: Path, *, cpu_threads: int, budget_bytes: int,
                 eot: int, vocab_size: int, rows_step: int = 0):
        self.model_dir = model_dir
        # the most rows a decoder step multiplies in place, 0: none (the application decides
        # from ``pipeline.asr_inplace_step`` and the CPU: ``prefill.rows_step_choice``)
        self.rows_step = rows_step
        self.budget_bytes = budget_bytes
        self._cpu_threads = cpu_threads
        self._special_ids = range(eot, vocab_size)  # never dropped by a restriction
        # the kept tokens of decoders restricted to a language and English, by (language,
        # words per language); None: that language decodes with the full vocabulary
        self.chosen: dict[tuple[str, int], RestrictedVocabulary | None] = {}
        self._native: NativePrefill | None = None
        self._native_checked = False
        self._refusal_logged = False
        self._native_lock = threading.Lock()
        self.lock = threading.Lock()  # guards ``chosen``
        # what the warm-up's check found (``verify_native``): None before it ran or when
        # the native decoder is not built; True: it decodes what generate does
        self.native_verified: bool | None = None
        self.native_refused = ""  # why it was set aside, when it disagreed
        # the in-place step's check (``rows_step_disagreement``): None before it ran or when
        # the step is off; why it was set aside otherwise ("" when kept)
        self.rows_step_refused: str | None = None

    def native(self) -> NativePrefill | None:
        """The native prefix-prefill decoders (``whisper.prefill``), None if unavailable."""
        with self._native_lock:
            if not self._native_checked:
                self._native_checked = True
                module = native_prefill()
                if module is not None:
                    self._native = self._load_native(module)
            return self._native

    def _load_native(self, module: Any) -> NativePrefill | None:
        """The native decoders with this folder's weights loaded, or None (logged, and
        ``native_refused`` says why) when they cannot load them: the engine then decodes
        with ``generate``, as without the extension."""
        try:
            native = NativePrefill(module, self._cpu_threads, self.budget_bytes,
                                   rows_step=self.rows_step)
            native.preload(self.model_dir)
        except Exception as exc:  # a folder the native decoder cannot read, a broken build
            self.native_refused = f"{type(exc).__name__}: {exc}"
            log.warning("the native decoder cannot load %s (%s): decoding with generate",
                        self.model_dir, self.native_refused)
            return None
        return native

    def verify_native(self, disagreement: Callable[[NativePrefill], str | None]) -> None:
        """Keep the native decoder only when it decodes what ``generate`` does here
        (``disagreement``: ``prefill.prefill_disagreement`` for the engine, run once);
        else decode with ``generate`` (and the full vocabulary) from now on, logged."""
        native = self.native()
        if self.native_verified is not None or native is None:
            return
        try:
            why = disagreement(native)
        except Exception as exc:  # a native decoder that cannot even run the check
            why = f"{type(exc).__name__}: {exc}"
        with self._native_lock:
            self.native_verified = why is None
            if why is not None:
                self._native, self.native_refused = None, why
        if why is not None:
            log.warning("prefix prefill set aside, it disagrees with generate here (%s): "
                        "decoding with generate", why)
            return
        self._verify_rows_step(native)

    def _verify_rows_step(self, native: NativePrefill) -> None:
        """Keep the in-place decoder step only where it gives CTranslate2's layer output
        (``rows_step_disagreement``) and the model is one it steps (else the C++ decoder
        says why); otherwise every step is CTranslate2's from now on, logged."""
        if not native.rows_step:
            return
        try:
            why = rows_step_disagreement(native.module, self.model_dir)
            if why is None:
                probe = native.module.PrefillDecoder(str(self.model_dir), 1,
                                                     rows_step=native.rows_step)
                why = probe.rows_step_refused or None
        except Exception as exc:  # an extension without it, or a check that cannot run
            why = f"{type(exc).__name__}: {exc}"
        self.rows_step_refused = why or ""
        if why is not None:
            native.set_rows_step(0)
            log.warning("in-place decoder step set aside (%s): stepping with CTranslate2's "
                        "GEMM", why)
        else:
            log.info("decoder steps multiply the int8 weights in place "
                     "(pipeline.asr_inplace_step)")

    def vocabulary(self, language: str, words: int) -> RestrictedVocabulary | None:
        """The restriction that decodes ``language`` (captions, and translation into
        English) with ``words`` words per language: the tokens of that language's and
        English's ``words`` most frequent words when a word list exists for it
        (models/whisper/vocab.py); else, or with 0, None (the full vocabulary)."""
        if not words:
            return None
        with self.lock:
            if (language, words) not in self.chosen:
                self.chosen[language, words] = self._load(language, words)
            return self.chosen[language, words]

    def for_group(self, model: Any, key: GroupKey, native: NativePrefill | None) -> Decoder:
        """The decoder of one plan group (``model``: the shared CTranslate2 Whisper model;
        ``native``: the native decoders, None when no request of the batch wants them). A
        restriction needs the native decoder (``vocabulary`` gives none without it); with
        nothing to read at once and no restriction, ``generate`` decodes."""
        vocabulary = self.vocabulary(key.decoder_language, key.words)
        if native is not None and (key.prefilled or vocabulary is not None):
            restriction = (None if vocabulary is None
                           else (f"{key.decoder_language}-{key.words}", vocabulary.kept))
            return NativeDecoder(native.decoder(self.model_dir, restriction))
        return Ct2Decoder(model)

    def memory(self) -> dict[str, int]:
        """What the vocabulary restrictions hold now: ``decoders`` (per worker thread and
        language) and their ``bytes`` (gathered output-layer rows), ``budget_bytes``, and
        ``built`` (decoders made so far: more than ``decoders`` once the budget evicts)."""
        native = self._native
        held, size = native.restricted_usage() if native is not None else (0, 0)
        return {"decoders": held, "bytes": size, "budget_bytes": self.budget_bytes,
                "built": native.restricted_built if native is not None else 0,
                "languages": sum(v is not None for v in self.chosen.values())}

    def _load(self, language: str, words: int) -> RestrictedVocabulary | None:
        """None: the full vocabulary decodes this language (module docs)."""
        if language not in vocabulary_languages():
            return None
        native = self.native()
        if native is None:
            log.warning("no restricted decoder for %s (the native decoder is not built); "
                        "decoding with the full vocabulary", language)
            return None
        refused = native.restriction_refused(self.model_dir, self._special_ids)
        if refused is not None:  # Intel MKL's packed weights: the full vocabulary is faster
            if not self._refusal_logged:
                self._refusal_logged = True
                log.info("restricted decoders unavailable here (%s); decoding with the full "
                         "vocabulary", refused)
            return None
        try:
            return restricted_vocabulary(self.model_dir, {language, "en"}, words,
                                         speechpipe_home() / "models" / "vocabularies")
        except Exception as exc:  # a foreign tokenizer, a missing word list
            log.warning("no restricted decoder for %s (%s); decoding with the full vocabulary",
                        language, exc)
            return None
