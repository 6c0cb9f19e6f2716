"""Issue 12 end to end: real recordings, real Whisper and Piper, judged from the output audio."""

from __future__ import annotations

import numpy as np

from speechpipe.evaluation.compare import variant_pipelines
from speechpipe.evaluation.evaluate import listener_figures, transcribe_speech
from speechpipe.evaluation.scores import latency_scores, sentence_bleu
from speechpipe.file_translation import translate_audio
from speechpipe.stages.request import SessionRequest
from speechpipe.transport.file_replay import read_audio
from tests.helpers import shared_clip, shared_manifest_row

# the phrase policy before issue 12, as a user selects it now (``--set``)
OLD_POLICY = "phrases.cut=count"


async def test_asr_bleu_transcribes_the_produced_speech(pipeline):
    clip = "es_enh_12411_cv"
    reference = shared_manifest_row(clip)["translation_en"]
    audio = read_audio(shared_clip(clip))
    run = await translate_audio(pipeline, audio, SessionRequest(source_lang="es", pace="fast",
                                                                output_sample_rate=22050))
    figures = await listener_figures(pipeline, run, reference)
    heard = set(figures["asr_text"].lower().replace(".", " ").replace(",", " ").split())
    assert {"planet", "universe"} <= heard, figures["asr_text"]  # it was spoken and heard
    assert figures["asr_bleu"] >= 25, figures
    # the score comes from the audio: the same clip's output silenced scores nothing
    silent = transcribe_speech(pipeline.engine.model, np.zeros_like(run.output), run.output_rate)
    assert silent == "" and sentence_bleu(silent, reference) == 0.0


async def test_new_policy_ends_the_speech_sooner_than_the_old_on_the_same_clip(pipeline):
    clip = "es_enh_1507_epst"
    audio = read_audio(shared_clip(clip))
    offsets = {}
    assert pipeline.options.phrases.cut == "just_in_time"  # the default is the new policy
    for index, (label, view) in enumerate(variant_pipelines(pipeline, [OLD_POLICY])):
        request = SessionRequest(source_lang="es", pace="fast", output_sample_rate=16000 + index)
        run = await translate_audio(view, audio, request)
        offsets[label] = latency_scores(run.records, run.input_seconds)["end_offset"]
    assert offsets["base"] is not None and offsets[OLD_POLICY] is not None, offsets
    assert offsets["base"] < offsets[OLD_POLICY], offsets
