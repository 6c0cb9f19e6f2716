"""Whisper on CTranslate2: one encode of the audio you have, several prefix-forced decodes.

Measured here (DESIGN.md): encoding only the audio of the utterance (a short mel input) is
~17x cheaper than padding to 30 s, and one encoder output serves both the source-caption
decode (``transcribe``) and the English decode (``translate``). This module is synchronous;
``WhisperWorker`` runs it on a dedicated thread so nothing blocks the event loop.

Guards against words from nothing (unguarded decodes loop on real clips here):
- 1 s of trailing silence is appended before encoding, which gives Whisper its end-of-audio
  cue (without it short inputs loop, e.g. "así, así, así");
- ``max_length`` is tied to the audio length;
- a loop guard cuts a continuation at the first repeated n-gram run;
- a no-speech guard drops a decode whose no-speech probability is high and whose
  log-probability is low (faster-whisper's rule).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from speechpipe.errors import LanguageError, ModelError

__all__ = [
    "WhisperEngine",
    "WhisperRequest",
    "DecodeTask",
    "DecodeResult",
    "WhisperResult",
    "cut_repetition",
    "WHISPER_LANGUAGES",
]

SAMPLE_RATE = 16_000
TRAILING_SILENCE_S = 1.0

# Whisper's language codes (tokenizer order). Used to validate --source-lang.
WHISPER_LANGUAGES = (
    "en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no "
    "th ur hr bg lt la mi ml cy sk te fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw "
    "gl mr pa si km sn yo so af oc ka be tg sd gu am yi lo uz fo ht ps tk nn mt sa lb my bo tl "
    "mg as tt haw ln ha ba jw su yue"
).split()


@dataclass(frozen=True, slots=True)
class DecodeTask:
    """One decode on the shared encoder output: ``transcribe`` or ``translate`` (to English),
    continuing ``prefix`` (the committed text, forced)."""

    task: str
    prefix: str = ""


@dataclass(frozen=True, slots=True)
class WhisperRequest:
    audio: NDArray[np.float32]  # 16 kHz mono, the utterance so far
    language: str | None  # None: detect
    tasks: tuple[DecodeTask, ...]
    beam_size: int = 1
    tokens_per_second: float = 7.0
    max_new_tokens: int | None = None  # cap for partial decodes (they only need the next words)
    no_speech_threshold: float = 0.6
    logprob_threshold: float = -1.0


@dataclass(frozen=True, slots=True)
class DecodeResult:
    task: str
    continuation: str  # text after the forced prefix
    avg_logprob: float
    no_speech_prob: float
    glued: str = ""  # leading text with no space before it (e.g. "," after the prefix)
    suppressed: bool = False  # dropped by the no-speech guard
    cut: bool = False  # shortened by the loop guard
    truncated: bool = False  # stopped by the length cap, not by the model


@dataclass(frozen=True, slots=True)
class WhisperResult:
    language: str
    language_prob: float
    decodes: tuple[DecodeResult, ...]
    encode_s: float
    decode_s: float
    timings: dict[str, float] = field(default_factory=dict)


def cut_repetition(
    words: Sequence[str], max_ngram: int = 40, context: Sequence[str] = ()
) -> tuple[list[str], bool]:
    """Cut ``words`` before the first immediate repeat of an n-gram (n=1 needs 3 copies).

    Whisper on partial audio loops ("the rest of the rest of the rest", or a whole sentence
    twice): the second copy and everything after it are dropped. ``context`` is the committed
    text before ``words``: a loop that starts there is caught too, but only ``words`` are cut.
    Returns (kept words, whether anything was cut).
    """
    all_words = [*context, *words]
    norm = [w.casefold().strip(".,;:!?¿¡\"'") for w in all_words]
    n_context = len(context)
    n_words = len(norm)
    for i in range(n_words):
        for n in range(1, max_ngram + 1):
            if i + 2 * n > n_words:
                break
            if norm[i : i + n] != norm[i + n : i + 2 * n]:
                continue
            if n == 1 and not (i + 3 <= n_words and norm[i + 2] == norm[i]):
                continue
            span_end = i + 2 * n if n > 1 else i + 3
            if span_end <= n_context:  # the loop lies inside the committed text: not ours
                continue
            keep = i + n if n > 1 else i + 1
            return list(words[: max(0, keep - n_context)]), True
    return list(words), False


class WhisperEngine:
    """A loaded Whisper model; all methods are blocking (call them from a worker thread)."""

    def __init__(self, model_dir: Path | str, *, cpu_threads: int = 2, num_workers: int = 1):
        try:
            from faster_whisper import WhisperModel
        except ImportError as exc:  # pragma: no cover - a hard dependency
            raise ModelError("faster-whisper is not installed: pip install faster-whisper") from exc
        try:
            self.model = WhisperModel(
                str(model_dir),
                device="cpu",
                compute_type="int8",
                cpu_threads=cpu_threads,
                num_workers=num_workers,
            )
        except Exception as exc:
            raise ModelError(f"cannot load Whisper model from {model_dir}: {exc}") from exc
        self.tokenizer = self.model.hf_tokenizer
        self.feature_extractor = self.model.feature_extractor
        self._tok = {name: self.tokenizer.token_to_id(name) for name in (
            "<|startoftranscript|>", "<|transcribe|>", "<|translate|>", "<|notimestamps|>",
            "<|endoftext|>",
        )}
        self.eot = self._tok["<|endoftext|>"]
        self.languages = tuple(
            lang for lang in WHISPER_LANGUAGES
            if self.tokenizer.token_to_id(f"<|{lang}|>") is not None
        )

    # -- pieces -------------------------------------------------------------------------
    def check_language(self, language: str) -> None:
        if language not in self.languages:
            raise LanguageError(
                f"unknown source language {language!r}; Whisper knows: "
                + " ".join(self.languages)
            )

    def encode(self, audio: NDArray[np.float32]):  # -> ctranslate2.StorageView
        import ctranslate2

        padded = np.concatenate(
            [audio.astype(np.float32, copy=False),
             np.zeros(int(TRAILING_SILENCE_S * SAMPLE_RATE), np.float32)]
        )
        features = self.feature_extractor(padded)
        frames = features.shape[-1] // 2 * 2
        mel = np.ascontiguousarray(features[None, :, :frames], dtype=np.float32)
        return self.model.model.encode(ctranslate2.StorageView.from_array(mel), to_cpu=True)

    def detect_language(self, encoder_output) -> tuple[str, float]:
        results = self.model.model.detect_language(encoder_output)[0]
        token, prob = results[0]
        return token[2:-2], float(prob)

    def _prompt(self, language: str, task: str, prefix: str) -> tuple[list[int], int]:
        prompt = [
            self._tok["<|startoftranscript|>"],
            self.tokenizer.token_to_id(f"<|{language}|>"),
            self._tok[f"<|{task}|>"],
            self._tok["<|notimestamps|>"],
        ]
        prefix_ids = (
            self.tokenizer.encode(" " + prefix.strip(), add_special_tokens=False).ids
            if prefix.strip() else []
        )
        return prompt + prefix_ids, len(prefix_ids)

    def decode(
        self,
        encoder_output,
        language: str,
        tasks: Sequence[DecodeTask],
        *,
        audio_seconds: float,
        beam_size: int = 1,
        tokens_per_second: float = 7.0,
        max_new_tokens: int | None = None,
    ) -> list[tuple[DecodeTask, list[int], float, float, bool]]:
        """Decode every task on one encoder output; returns generated token ids per task.

        CTranslate2 batches only prompts of equal length (the same number of tokens after
        ``<|startoftranscript|>``), so tasks are grouped by prompt length: transcribe and
        translate share one ``generate`` call whenever their forced prefixes are equally long.
        """
        import ctranslate2

        prompts: list[list[int]] = []
        prefix_lengths: list[int] = []
        for task in tasks:
            prompt, n_prefix = self._prompt(language, task.task, task.prefix)
            prompts.append(prompt)
            prefix_lengths.append(n_prefix)
        groups: dict[int, list[int]] = {}
        for index, prompt in enumerate(prompts):
            groups.setdefault(len(prompt), []).append(index)
        new_tokens = 4 + math.ceil(audio_seconds * tokens_per_second)
        if max_new_tokens is not None:
            new_tokens = min(new_tokens, max_new_tokens)
        array = None
        outputs: dict[int, tuple[DecodeTask, list[int], float, float, bool]] = {}
        for prompt_length, indices in groups.items():
            encoded = encoder_output
            if len(indices) > 1:
                if array is None:
                    array = np.asarray(encoder_output)
                encoded = ctranslate2.StorageView.from_array(
                    np.ascontiguousarray(np.repeat(array, len(indices), axis=0))
                )
            results = self.model.model.generate(
                encoded,
                [prompts[i] for i in indices],
                beam_size=beam_size,
                # Measured with CTranslate2 4.8: a sequence (forced prefix included) stops at
                # max_length // 2 tokens. Ask generously; the cap is enforced below, so the
                # result is right whatever the library's convention.
                max_length=min(448, 2 * (prompt_length + new_tokens) + 2),
                return_scores=True,
                return_no_speech_prob=True,
                suppress_blank=False,
            )
            for index, result in zip(indices, results, strict=True):
                full = list(result.sequences_ids[0])
                # CTranslate2 returns the forced prefix tokens as part of the sequence
                generated = full[prefix_lengths[index] :]
                hit_cap = len(generated) >= new_tokens
                ids = [i for i in generated[:new_tokens] if i < self.eot]
                avg_logprob = float(result.scores[0]) / max(1, len(full)) if result.scores else 0.0
                outputs[index] = (
                    tasks[index], ids, avg_logprob, float(result.no_speech_prob), hit_cap
                )
        return [outputs[i] for i in range(len(tasks))]

    # -- the whole request ----------------------------------------------------------------
    def run(self, request: WhisperRequest) -> WhisperResult:
        t0 = time.perf_counter()
        encoder_output = self.encode(request.audio)
        t1 = time.perf_counter()
        language, language_prob = request.language or "", 1.0
        if not request.language:
            language, language_prob = self.detect_language(encoder_output)
        t2 = time.perf_counter()
        decoded = self.decode(
            encoder_output,
            language,
            request.tasks,
            audio_seconds=len(request.audio) / SAMPLE_RATE,
            beam_size=request.beam_size,
            tokens_per_second=request.tokens_per_second,
            max_new_tokens=request.max_new_tokens,
        )
        t3 = time.perf_counter()
        results = []
        for task, ids, avg_logprob, no_speech_prob, hit_cap in decoded:
            text = self.tokenizer.decode(ids)
            glued = ""
            if task.prefix.strip() and text and not text[0].isspace():
                glued, _, text = text.partition(" ")
            words, was_cut = cut_repetition(text.split(), context=task.prefix.split())
            suppressed = (
                no_speech_prob > request.no_speech_threshold
                and avg_logprob < request.logprob_threshold
            )
            results.append(
                DecodeResult(
                    task=task.task,
                    continuation="" if suppressed else " ".join(words),
                    glued="" if suppressed else glued,
                    avg_logprob=avg_logprob,
                    no_speech_prob=no_speech_prob,
                    suppressed=suppressed,
                    cut=was_cut,
                    truncated=hit_cap,
                )
            )
        return WhisperResult(
            language=language,
            language_prob=language_prob,
            decodes=tuple(results),
            encode_s=t1 - t0,
            decode_s=t3 - t2,
            timings={"asr.encode": t1 - t0, "asr.langid": t2 - t1, "asr.decode": t3 - t2},
        )

    def warm_up(self) -> None:
        rng = np.random.default_rng(0)
        audio = (rng.standard_normal(SAMPLE_RATE) * 0.01).astype(np.float32)
        self.run(WhisperRequest(audio=audio, language="en",
                                tasks=(DecodeTask("transcribe"), DecodeTask("translate"))))
