"""The pipeline's own decode of each whole utterance, nothing forced: the yardstick of
**hindsight regret** (``speechpipe eval --offline-reference``).

Commit regret held against an offline decode (``regret.py``) counts two things at once:
words committed before the audio settled them, and the other wording a different decoder
set-up gives the same speech (faster-whisper's ``transcribe`` pads every input to 30 s and
uses the full vocabulary; the pipeline encodes only the audio it has, with a restricted
output layer and its own length caps). The floor variant, which commits nothing before an
utterance ends, still showed 17 % "regret" against the offline decode (docs/benchmarks.md,
2026-12-04): that share is wording, not timing.

Here each utterance's audio (its ``vad.start`` less the ASR stage's pre-roll, to its
``vad.end`` plus ``END_PAD_S``, the VAD's end detection) is decoded once more by the loaded
engine with the request the pipeline itself makes when an utterance ends
(``UtteranceDecoder.request(DecodeKind.FINAL)``: its beam, length cap, vocabulary, language check)
but with no forced prefix and no context: what the same model says for the whole utterance
once it has heard all of it. A committed word it does not contain is a word the streaming
policy would take back if it could. It runs after the clip's streamed run, on the loaded
engine, so it costs the run's latency and CPU figures nothing.

**The yardstick's own noise** (``hindsight_noise_regret``): the same request over the same
utterance with a little digital silence before or after it (``NOISE_PADDINGS_S``), held
against the yardstick like committed words are. Where the utterance begins and ends is the
VAD's decision, to within a few frames at the start and a 0.24-0.8 s wait at the end, and an
encoder that hears only the audio it is given translates the same speech differently when
those bounds move (Whisper base: a tenth of the words, docs/benchmarks.md). A policy that
committed exactly one of those equally heard final decodes would show this much regret, so
no commit rule can be certified below it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from speechpipe.stages.asr_options import AsrOptions
from speechpipe.stages.decode_program import program_over
from speechpipe.stages.frames import STREAM_RATE
from speechpipe.stages.model_api import DecodeTask, WhisperRequest

__all__ = ["END_PAD_S", "NOISE_PADDINGS_S", "hindsight_request", "hindsight_texts",
           "utterance_audio_spans"]

END_PAD_S = 0.3  # the VAD reports an end this much after the last voiced frame, or more
# silence (seconds before, after) around an utterance for the yardstick's noise: a start
# 5-10 VAD frames earlier, an end detected one END_PAD_S later
NOISE_PADDINGS_S = ((0.1, 0.0), (0.2, 0.0), (0.0, 0.3))


def utterance_audio_spans(spans: dict[int, tuple[float, float]], pre_roll_s: float,
                          audio_seconds: float) -> dict[int, tuple[float, float]]:
    """Each utterance's span (seconds, from ``regret.utterance_spans``) widened to the
    audio the ASR stage gives it: ``pre_roll_s`` before the VAD start, ``END_PAD_S`` after
    the VAD end, within the input."""
    return {u: (max(0.0, start - pre_roll_s), min(audio_seconds, end + END_PAD_S))
            for u, (start, end) in spans.items()}


def hindsight_request(audio: np.ndarray, language: str, options: AsrOptions,
                      translate: bool) -> WhisperRequest:
    """The pipeline's final request over ``audio`` (float32, 16 kHz), with nothing
    committed: captions (and, when ``translate``, the translation), no prefix, no context."""
    tasks = (DecodeTask("transcribe"),) + ((DecodeTask("translate"),) if translate else ())
    seconds = len(audio) / STREAM_RATE
    return WhisperRequest(
        audio=audio.astype(np.float32),
        language=language,
        tasks=tasks,
        beam_size=options.final_beam_size,
        tokens_per_second=options.tokens_per_second,
        max_new_tokens=8 + int(options.tokens_per_second * seconds),
        partial=False,
        max_context_tokens=options.context_tokens,
        vocabulary_words=options.vocabulary_words,
        prefill=False,
        check_target_language=translate and options.check_target_language,
    )


def hindsight_texts(engine: Any, audio: np.ndarray, spans: Sequence[tuple[float, float]],
                    language: str, options: AsrOptions, translate: bool,
                    padding_s: tuple[float, float] = (0.0, 0.0)) -> list[tuple[str, str]]:
    """(captions, translation) of each span (seconds) of ``audio`` (16 kHz int16), decoded
    by ``engine`` (``models.whisper.engine.WhisperEngine``, through the decode program as in
    the pipeline: ``stages.decode_program``) as the pipeline's final decode with nothing
    forced, with ``padding_s`` seconds of silence before and after the span; the translation
    is "" without ``translate``. Blocking."""
    before, after = (np.zeros(int(s * STREAM_RATE), np.float32) for s in padding_s)
    program = program_over(engine)  # the language check runs as in the pipeline
    out = []
    for start, end in spans:
        piece = np.asarray(audio[int(start * STREAM_RATE): int(end * STREAM_RATE)])
        if not len(piece):
            out.append(("", ""))
            continue
        heard = np.concatenate([before, piece.astype(np.float32) / 32768.0, after])
        result = program.run(hindsight_request(heard, language, options, translate))
        texts = {d.task: "" if d.wrong_language else (d.glued + d.continuation).strip()
                 for d in result.decodes}
        out.append((texts.get("transcribe", ""), texts.get("translate", "")))
    return out
