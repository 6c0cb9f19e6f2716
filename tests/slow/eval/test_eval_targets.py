"""``speechpipe eval``'s language check on real speech: the real Whisper hears Spanish speech
as Spanish."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from speechpipe.evaluation.evaluate import _aggregate
from speechpipe.evaluation.listener import listener_figures

# --- the aggregate: BLEU against the target's references, the language heard ----------------

def _row(clip_id: str, text: str, heard: str | None, asr_text: str | None = None,
         **extra: Any) -> dict[str, Any]:
    return {"id": clip_id, "lang": "en", "duration_s": 2.0, "cpu_per_audio_s": 0.1,
            "rtf": 0.5, "source_text": "", "target_text": text, "wer": None,
            "asr_text": text if asr_text is None else asr_text, "heard_language": heard,
            "heard_language_probability": None if heard is None else 0.9,
            "words_in_non_speech": 0, "utterances_invented": 0, "utterances_dropped": 0,
            "utterances_repeated": 0, "start_offset": 1.0, "end_offset": 1.5,
            "text_end_offset": 1.2, "laal": 1.0, "ne": 0.1, "bleu": None, **extra}


# --- the real Whisper (slow tier) -------------------------------------------------------------
async def test_the_real_whisper_hears_spanish_speech_as_spanish(pipeline):
    """Spanish speech (the project's own espeak-ng clip) standing in for a Spanish voice's
    output: transcribed in Spanish for ASR-BLEU, and detected as Spanish, not English."""
    from speechpipe.transport.file_replay import read_audio
    from tests.helpers import OWN_SAMPLES

    samples = read_audio(OWN_SAMPLES / "wav" / "es_gato.wav")
    silence = np.zeros(16_000, dtype=np.int16)  # the output's gaps on the input's timeline
    run = SimpleNamespace(output=np.concatenate([silence, samples, silence]),
                          output_rate=16_000, records=[])
    reference = "El gato duerme en la casa porque hace mucho frío."
    figures = await listener_figures(pipeline, run, reference, "es")
    assert figures["heard_language"] == "es", figures
    assert figures["heard_language_probability"] > 0.5, figures
    assert "gato" in figures["asr_text"].lower(), figures
    assert figures["asr_bleu"] >= 25, figures
    clips = [{"id": "c", "translations": {"es": reference}}]
    aggregate = _aggregate([{**_row("c", reference, None), **figures}], clips, {}, 0.1, 4.0,
                           4.0, "es")
    assert aggregate["heard_in_target"] == 1 and aggregate["clips_with_speech"] == 1
