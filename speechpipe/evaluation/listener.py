"""What the listener got, judged from the produced speech: ASR-BLEU and the language heard.

After a clip's streamed run the pipeline's already-loaded Whisper (no second copy) listens to
the translated speech twice: a transcription in the target language (``language=target``,
``task="transcribe"``, beam 5, no conditioning on previous text) scored against the clip's
reference like the text BLEU (ASR-BLEU), and a language detection on the speech alone (its
digital silence left out, every 30 s window of it offered to ``detect_language``) that says
which language a listener would hear (``heard_language``). Both run after the run's clock
stopped, so they cost its latency and CPU figures nothing.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from speechpipe.evaluation.manifest import reference_for
from speechpipe.evaluation.scores import corpus_bleu, end_offset_split, sentence_bleu
from speechpipe.stages.frames import FRAME_SAMPLES, STREAM_RATE

__all__ = ["transcribe_speech", "detect_speech_language", "hear_speech", "listener_figures",
           "listener_aggregate", "heard_aggregate"]

SILENT_LEVEL = 1e-4  # a 20 ms block whose peak stays under this is the renderer's silence


def _whisper_audio(samples: np.ndarray, sample_rate: int) -> np.ndarray:
    """``samples`` (int16) as Whisper's input: float32 at 16 kHz."""
    import soxr

    audio = samples.astype(np.float32) / 32768.0
    if sample_rate != STREAM_RATE:
        audio = soxr.resample(audio, sample_rate, STREAM_RATE).astype(np.float32)
    return audio


def _speech_only(audio: np.ndarray) -> np.ndarray:
    """The 20 ms blocks of ``audio`` that are not silence, back to back (the output is
    rendered on the input's timeline: a detection on its gaps would judge silence)."""
    blocks = -(-len(audio) // FRAME_SAMPLES)
    padded = np.zeros(blocks * FRAME_SAMPLES, dtype=np.float32)
    padded[:len(audio)] = audio
    rows = padded.reshape(blocks, FRAME_SAMPLES)
    return rows[np.abs(rows).max(axis=1) >= SILENT_LEVEL].ravel()


def _transcribe(model: Any, audio: np.ndarray, language: str) -> str:
    if not len(audio) or not np.any(audio):
        return ""
    segments, _ = model.transcribe(audio, language=language, task="transcribe", beam_size=5,
                                   condition_on_previous_text=False)
    return " ".join(segment.text.strip() for segment in segments).strip()


def _detect(model: Any, audio: np.ndarray) -> tuple[str | None, float | None]:
    speech = _speech_only(audio)
    if not len(speech):
        return None, None
    windows = -(-len(speech) // model.feature_extractor.n_samples)
    language, probability, _ = model.detect_language(speech,
                                                     language_detection_segments=windows)
    return str(language), round(float(probability), 4)


def transcribe_speech(model: Any, samples: np.ndarray, sample_rate: int,
                      language: str = "en") -> str:
    """Text of produced speech in ``language`` (ASR-BLEU's transcription): Whisper, beam 5,
    no conditioning on previous text; "" for silence. ``model`` is a loaded
    ``faster_whisper.WhisperModel``."""
    return _transcribe(model, _whisper_audio(samples, sample_rate), language)


def detect_speech_language(model: Any, samples: np.ndarray,
                           sample_rate: int) -> tuple[str | None, float | None]:
    """The language Whisper detects in produced speech and its probability; (None, None)
    when there is no speech."""
    return _detect(model, _whisper_audio(samples, sample_rate))


def hear_speech(model: Any, samples: np.ndarray, sample_rate: int,
                language: str) -> dict[str, Any]:
    """``asr_text`` (``transcribe_speech`` in ``language``), ``heard_language`` and
    ``heard_language_probability`` (``detect_speech_language``), resampled once."""
    audio = _whisper_audio(samples, sample_rate)
    heard, probability = _detect(model, audio)
    return {"asr_text": _transcribe(model, audio, language), "heard_language": heard,
            "heard_language_probability": probability}


async def listener_figures(pipeline: Any, run: Any, reference: str,
                           target: str = "en") -> dict[str, Any]:
    """What the listener got: ASR-BLEU of the produced speech (transcribed in ``target``),
    the language heard in it and the EndOffset split. ``pipeline`` is a loaded
    ``speechpipe.session.Pipeline``, ``run`` a ``TranslationRun`` with its output."""
    heard = await asyncio.to_thread(hear_speech, pipeline.engine.model, run.output,
                                    run.output_rate, target)
    split = end_offset_split(run.records)
    return {
        **heard,
        "asr_bleu": (round(sentence_bleu(heard["asr_text"], reference), 2)
                     if reference else None),
        **{k: (None if v is None else round(v, 4)) for k, v in split.items()},
    }


def heard_aggregate(rows: list[dict[str, Any]], target: str) -> dict[str, Any]:
    """``clips_with_speech``: clips whose produced speech had a language detected;
    ``heard_in_target``: those of them heard as ``target`` (None without any)."""
    heard = [r["heard_language"] for r in rows if r.get("heard_language")]
    return {"clips_with_speech": len(heard),
            "heard_in_target": sum(lang == target for lang in heard) if heard else None}


def listener_aggregate(rows: list[dict[str, Any]], by_id: dict[str, Any],
                       target: str) -> dict[str, Any]:
    """Corpus ASR-BLEU against the ``target`` references (same normalization as text BLEU)
    and the language heard (``heard_aggregate``)."""
    with_ref = [r for r in rows if "asr_text" in r and reference_for(by_id[r["id"]], target)]
    asr_bleu = None
    if with_ref:
        asr_bleu = round(corpus_bleu([r["asr_text"] for r in with_ref],
                                     [reference_for(by_id[r["id"]], target) for r in with_ref])
                         or 0.0, 2)
    return {"asr_bleu": asr_bleu, **heard_aggregate(rows, target)}
