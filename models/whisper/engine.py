"""Whisper on CTranslate2: one encode of the audio you have, several prefix-forced decodes.

Only the audio of the utterance is encoded (a short mel input, not 30 s of padding), and one
encoder output serves both the source-caption decode (``transcribe``) and the English decode
(``translate``); reasons and figures in ``docs/design.md``. This module is synchronous;
the shared worker (``models.workers.batching.AsrBatcher``) runs it on a dedicated thread so nothing
blocks the event loop.

Batching (``run_batch``; ``run`` is a batch of one, so both give identical results):
- Whisper's encoder has no padding mask: extra trailing silence changes the text. So the
  encode length is *canonical*: audio + ``trailing_silence_s`` (1 s) of silence, rounded up
  to a multiple of ``encode_bucket_s`` with more silence. Requests in the same bucket share
  one encoder call and ``generate`` calls; requests in different buckets are never padded
  together.
- which decodes of a bucket share a ``generate`` call (decoder, beam size, context length,
  ``max_length``, prefill) is planned by ``models.whisper.batch_plan``, from each request alone.

Guards against words from nothing (unguarded decodes loop on real clips here):
- 1 s of trailing silence is appended before encoding, which gives Whisper its end-of-audio
  cue (without it short inputs loop, e.g. "así, así, así"); ``max_length`` follows the audio;
- the text loop guards and the no-speech guard of ``stages.loop_guard`` (``guarded_decodes``)
  cut a continuation that loops, and drop one where Whisper heard no speech.
The ASR stage adds the commit guard (``stages.faithfulness``): no words where a neural VAD
heard no speech, no translation without source words.

The engine computes; what to decode a second time (a translation not in English, the audio
a short translation left out) is decided by the decode program over its passes
(``stages.decode_program``), which the engine never calls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from speechpipe.errors import LanguageError, ModelError
from speechpipe.models.whisper.align import align_words, source_time
from speechpipe.models.whisper.batch_plan import (
    SAMPLE_RATE,
    BatchPlan,
    Kept,
    Prompt,
    keep,
    plan_batch,
)
from speechpipe.models.whisper.decoders import WhisperDecoders
from speechpipe.models.whisper.generate import decoder_steps, step_budget, storage_view
from speechpipe.models.whisper.prefill import (
    RESTRICTED_BUDGET_BYTES,
    NativePrefill,
    prefill_disagreement,
)
from speechpipe.models.whisper.prompts import WHISPER_LANGUAGES, WhisperPrompts
from speechpipe.models.whisper.stats import EngineStats
from speechpipe.models.whisper.vocab import RestrictedVocabulary
from speechpipe.models.workers.asr_lanes import load_whisper_model
from speechpipe.stages.language_vote import top_languages
from speechpipe.stages.loop_guard import DecodedText, guarded_decodes
from speechpipe.stages.model_api import (
    DecodeResult,
    DecodeTask,
    WhisperPass,
    WhisperRequest,
    WhisperResult,
    run_by_bucket,
)

__all__ = ["WhisperEngine", "WhisperRequest", "DecodeTask", "DecodeResult", "WhisperResult",
           "WHISPER_LANGUAGES", "EngineStats", "ct2_whisper"]

TRAILING_SILENCE_S = 1.0  # silence after the audio ("Batching" above)
ENCODE_BUCKET_S = 1.0  # encode lengths are multiples of this


def ct2_whisper(model: Any) -> Any:  # -> ctranslate2.models.Whisper
    """The CTranslate2 Whisper model inside faster-whisper's ``WhisperModel``. The one place
    that reaches faster-whisper's private ``model`` attribute: faster-whisper has no public
    API to encode mel features, or to detect the language of, generate from or align
    against an encoder output we already hold. If faster-whisper moves it, change it here."""
    return model.model


class WhisperEngine:
    """A loaded Whisper model; all methods are blocking (call them from a worker thread)."""

    def __init__(
        self, model_dir: Path | str, *, cpu_threads: int = 2, num_workers: int = 1,
        encode_bucket_s: float = ENCODE_BUCKET_S, trailing_silence_s: float = TRAILING_SILENCE_S,
        restricted_budget_bytes: int = RESTRICTED_BUDGET_BYTES, rows_step: int = 0,
    ):
        self.encode_bucket_s = encode_bucket_s
        self.trailing_silence_s = trailing_silence_s
        self.model_dir = Path(model_dir)
        self.cpu_threads = cpu_threads
        self.stats = EngineStats()
        # the model, and the CTranslate2 threads it started (``models.workers.asr_lanes``)
        self.model, self.native_threads = load_whisper_model(self.model_dir, cpu_threads,
                                                             num_workers)
        self.tokenizer = self.model.hf_tokenizer
        self.feature_extractor = self.model.feature_extractor
        self.prompts = WhisperPrompts(self.tokenizer)  # prompt ids (models.whisper.prompts)
        self.eot = self.prompts.eot
        self.languages = self.prompts.languages()
        # the native decoders and each language's vocabulary restriction
        self.decoders = WhisperDecoders(
            self.model_dir, cpu_threads=cpu_threads, budget_bytes=restricted_budget_bytes,
            eot=self.eot, vocab_size=self.tokenizer.get_vocab_size(), rows_step=rows_step)

    # -- pieces -------------------------------------------------------------------------
    def check_language(self, language: str) -> None:
        """Raise ``LanguageError`` unless Whisper knows ``language``."""
        if language not in self.languages:
            raise LanguageError(f"unknown source language {language!r}; Whisper knows: "
                                + " ".join(self.languages))

    def encode_samples(self, n_audio: int) -> int:
        """Canonical encoder input length (samples): the audio plus at least
        ``trailing_silence_s`` of silence, rounded up to a multiple of ``encode_bucket_s``.
        Requests with the same value can share encoder and decoder calls exactly."""
        bucket = max(1, int(round(self.encode_bucket_s * SAMPLE_RATE)))
        total = n_audio + int(round(self.trailing_silence_s * SAMPLE_RATE))
        return -(-total // bucket) * bucket

    def mel(self, audio: NDArray[np.float32]) -> NDArray[np.float32]:
        """Log-mel features ``[1, 80, frames]`` of the audio at its canonical length."""
        padded = np.zeros(self.encode_samples(len(audio)), np.float32)
        padded[: len(audio)] = audio
        features = self.feature_extractor(padded)
        frames = features.shape[-1] // 2 * 2
        return np.ascontiguousarray(features[None, :, :frames], dtype=np.float32)

    def encode(self, audio: NDArray[np.float32]):  # -> ctranslate2.StorageView
        """Encode 16 kHz audio (canonical length) with Whisper's encoder."""
        return ct2_whisper(self.model).encode(storage_view(self.mel(audio)), to_cpu=True)

    def _encode_rows(self, mels: Sequence[NDArray[np.float32]]) -> NDArray[np.float32]:
        """Encoder outputs ``[batch, positions, dims]`` for mels of equal length."""
        output = ct2_whisper(self.model).encode(storage_view(np.concatenate(mels, axis=0)),
                                                to_cpu=True)
        return np.array(output, dtype=np.float32)  # a copy: the StorageView is freed after

    def detect_language(self, encoder_output, among: frozenset[str] = frozenset()
                        ) -> tuple[tuple[str, float], ...]:
        """The most likely languages of an encoded utterance, most likely first, with
        Whisper's probabilities (``stages.language_vote.top_languages``: at most five; with
        ``among``, those languages only, renormalized over them)."""
        results = ct2_whisper(self.model).detect_language(encoder_output)[0]
        return top_languages(((token[2:-2], float(prob)) for token, prob in results), among)

    def decoder(self, language: str, words: int) -> tuple[Any, RestrictedVocabulary | None]:
        """The CTranslate2 model that decodes ``language`` with ``words`` words per language,
        and its vocabulary restriction (``WhisperDecoders.vocabulary``; None: the full
        vocabulary). The model is always the one shared full model: a restriction only
        selects rows of its output layer (``models.whisper.prefill``), no weights are copied."""
        return ct2_whisper(self.model), self.decoders.vocabulary(language, words)

    def restricted_memory(self) -> dict[str, int]:
        return self.decoders.memory()  # ``WhisperDecoders.memory``

    def prefill(self) -> NativePrefill | None:
        return self.decoders.native()  # ``WhisperDecoders.native``

    @property
    def _decoders(self) -> dict[tuple[str, int], RestrictedVocabulary | None]:
        return self.decoders.chosen  # for tests that drop a language's choice to rebuild it

    @property
    def _decoders_lock(self) -> threading.Lock:
        return self.decoders.lock

    def _sot(self, language: str, task: str) -> list[int]:
        return self.prompts.sot(language, task)  # for tests and scripts/decoder_step_cost.py

    def context_ids(self, request: WhisperRequest) -> dict[str, list[int]]:
        return self.prompts.context_ids(request)  # ``WhisperPrompts.context_ids``

    # -- one pass ---------------------------------------------------------------------------
    def run(self, request: WhisperRequest) -> WhisperResult:
        """One request's pass: a bucket of one (the same code and result as in any batch)."""
        return self.run_bucket([request])[0].result

    def run_batch(self, requests: Sequence[WhisperRequest]) -> list[WhisperResult | Exception]:
        """Each request's pass, bucket by bucket (``model_api.run_by_bucket``: an error
        reaches only the request that caused it). Equal to ``run`` per request."""
        return run_by_bucket(requests, lambda r: self.encode_samples(len(r.audio)),
                             lambda group: [p.result for p in self.run_bucket(group)])

    def run_bucket(self, requests: Sequence[WhisperRequest]) -> list[WhisperPass]:
        """Requests of one encode bucket, one pass: one encoder call, the detections, shared
        generate calls, the guards, the word times. (Second decodes: ``stages.decode_program``.)"""
        t0 = time.perf_counter()
        encoded = self._encode_rows([self.mel(r.audio) for r in requests])
        t1 = time.perf_counter()
        detected = [() if r.language and not r.detect_too else self.detect_language(
            storage_view(encoded[row : row + 1]), r.detect_among)
            for row, r in enumerate(requests)]
        languages = [(r.language, 1.0) if r.language else found[0]
                     for r, found in zip(requests, detected, strict=True)]
        t2 = time.perf_counter()
        plan, native = self._plan(requests, [language for language, _ in languages])
        generated, counts = self.generate(plan, encoded, native)
        t3 = time.perf_counter()
        decodes = self._guarded(requests, plan, generated)
        aligned = align_words(ct2_whisper(self.model), self.tokenizer, requests, encoded,
                              languages, plan.items, generated, decodes)
        t4 = time.perf_counter()
        self.stats.add(
            encode_calls=1, encode_s=t1 - t0,
            encoded_s=len(requests) * self.encode_samples(len(requests[0].audio)) / SAMPLE_RATE,
            generate_calls=len(plan.groups), decode_items=len(plan.items), decode_s=t3 - t2,
            **counts, context_tokens=sum(item.n_context for item in plan.items),
            align_s=t4 - t3 if aligned else 0.0)
        timings = {"asr.encode": t1 - t0, "asr.langid": t2 - t1, "asr.decode": t3 - t2,
                   **({"asr.align": t4 - t3} if aligned else {})}
        return [WhisperPass(WhisperResult(
                    language=languages[row][0],
                    language_prob=languages[row][1],
                    language_probs=detected[row],
                    decodes=tuple(decodes[row]),
                    encode_s=t1 - t0,
                    decode_s=t3 - t2,
                    timings=dict(timings),
                    batch_requests=len(requests)),
                encoded[row]) for row in range(len(requests))]

    def _guarded(self, requests: Sequence[WhisperRequest], plan: BatchPlan,
                 generated: list[Kept]) -> list[list[DecodeResult]]:
        """Each request's decodes, in its task order, through the loop and no-speech guards
        (``stages.loop_guard.guarded_decodes``) of the text each item kept."""
        texts = [DecodedText(item.row, item.task, self.tokenizer.decode(kept.ids),
                             kept.avg_logprob, kept.no_speech_prob, kept.hit_cap)
                 for item, kept in zip(plan.items, generated, strict=True)]
        return guarded_decodes(requests, texts)

    def _plan(self, requests: Sequence[WhisperRequest], languages: list[str],
              ) -> tuple[BatchPlan, NativePrefill | None]:
        """The bucket's prompts (a restricted decoder's spelled with its kept tokens) and
        their plan (``batch_plan.plan_batch``); the native decoders when a request wants
        them (prefill or a restriction), else None."""
        native = (self.prefill() if any(r.prefill or r.vocabulary_words for r in requests)
                  else None)
        prompts: list[list[Prompt]] = []
        restricted: list[bool] = []
        for request, language in zip(requests, languages, strict=True):
            _, vocabulary = self.decoder(language, request.vocabulary_words)
            prompts.append(self.prompts.prompts(request, language, vocabulary))
            restricted.append(vocabulary is not None)
        return plan_batch(requests, languages, prompts, restricted, native is not None), native

    def generate(
        self, plan: BatchPlan, encoded: NDArray[np.float32], native: NativePrefill | None,
    ) -> tuple[list[Kept], dict[str, float]]:
        """Run a plan's groups, one decoder call each (``WhisperDecoders.for_group``: native or
        CTranslate2's ``generate``, one interface): what each item keeps (``batch_plan.keep``),
        in item order; and the token and step counters."""
        items = plan.items
        kept: dict[int, Kept] = {}
        steps = 0
        for key, members in plan.groups.items():
            decoder = self.decoders.for_group(ct2_whisper(self.model), key, native)
            cpu0 = time.thread_time()  # the native decoder runs on this thread
            sequences = decoder.generate(
                encoded[[items[m].row for m in members]], [items[m].prompt for m in members],
                beam_size=key.beam_size, n_context=key.n_context, max_length=key.max_length,
                prefilled=key.prefilled)
            if decoder.native:
                self.stats.add(native_cpu_s=time.thread_time() - cpu0)
            steps += decoder_steps(sequences, key.prefilled,
                                   step_budget(key.max_length, key.n_context, key.prefilled))
            for member, sequence in zip(members, sequences, strict=True):
                kept[member] = keep(items[member], sequence, self.eot)
        return [kept[m] for m in range(len(items))], {
            "generated_tokens": sum(k.made for k in kept.values()),
            "kept_tokens": sum(len(k.ids) for k in kept.values()),
            "forced_tokens": sum(item.n_prefix for item in items),
            "prefilled_tokens": sum(item.prefilled for item in items),
            "decoder_steps": steps}

    def source_time(
        self, audio: NDArray[np.float32], encoder_output: NDArray[np.float32] | None,
        language: str, text: str, offset: int,
    ) -> float | None:
        """``models.whisper.align.source_time`` of ``text`` on ``audio`` (encoded again
        unless ``encoder_output`` is given): for ``stages.decode_program``'s recovery."""
        if encoder_output is None:
            encoder_output = self._encode_rows([self.mel(audio)])[0]
        return source_time(self.model, len(audio), encoder_output, language,
                           self.prompts.text_ids(text), offset)

    def release(self) -> None:
        """Drop the model (CTranslate2 joins its own threads in its destructor). Call on the
        main thread once no worker thread uses the engine; the engine is unusable after."""
        self.model = None
        self.decoders.chosen.clear()

    def warm_up(self) -> None:
        """A single request, then a batch of two in one bucket (both code paths); and the
        language identifier of the translation check (``stages.target_language``)."""
        from speechpipe.stages.target_language import identifier

        identifier()
        rng = np.random.default_rng(0)
        audio = (rng.standard_normal(SAMPLE_RATE) * 0.01).astype(np.float32)
        tasks = (DecodeTask("transcribe"), DecodeTask("translate"))
        self.run(WhisperRequest(audio=audio, language="en", tasks=tasks))
        batch = [WhisperRequest(audio=audio, language="en", tasks=tasks),
                 WhisperRequest(audio=audio[: SAMPLE_RATE // 2], language=None,
                                tasks=(DecodeTask("translate", "Hello"),), partial=True),
                 # a prefix long enough for the prompt pass to read (models.whisper.prefill)
                 WhisperRequest(audio=audio, language="en", partial=True, prefill=True,
                                tasks=(DecodeTask("translate", "Hello there, my friend"),))]
        for outcome in self.run_batch(batch):
            if isinstance(outcome, Exception):
                raise ModelError(f"batched warm-up failed: {outcome}") from outcome
        self.decoders.verify_native(lambda native: prefill_disagreement(self, native))
