"""Never invent, never drop, through the real models: synthesized music (no speech) gives no
English at real-time and fast pace, and a translation that stops after a short first
sentence is completed from the audio (issue 16)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from speechpipe.evaluation.evaluate import count_unfaithful, utterance_texts
from speechpipe.file_translation import translate_audio
from speechpipe.models.whisper.engine import DecodeTask, WhisperRequest
from speechpipe.session import Pipeline
from speechpipe.stages.decode_program import DecodeProgram
from speechpipe.stages.faithfulness import FaithfulnessOptions
from speechpipe.stages.request import SessionRequest
from speechpipe.transport.file_replay import read_audio
from tests.helpers import shared_clip
from tests.synth_music import MUSIC_KINDS, synthesize


def spoken(run) -> tuple[str, int]:
    """The committed English and the number of speech chunks produced."""
    return run.target_text, sum(r["event"] == "tts.audio" for r in run.records)


@pytest.mark.parametrize("mode", ["balanced", "fast"])  # beam 5; greedy (the ladder's level 2)
@pytest.mark.parametrize("kind", sorted(MUSIC_KINDS))
async def test_music_gives_no_english_at_fast_pace(pipeline, kind, mode):
    run = await translate_audio(pipeline, synthesize(kind, 8.0),
                                SessionRequest(source_lang="fr", pace="fast", mode=mode))
    assert spoken(run) == ("", 0)
    assert count_unfaithful(utterance_texts(run.records))["invented"] == 0


@pytest.mark.parametrize("kind", ["band", "melody"])
async def test_music_gives_no_english_at_realtime_pace(pipeline, kind):
    run = await translate_audio(pipeline, synthesize(kind, 6.0, seed=1),
                                SessionRequest(source_lang="auto", pace="realtime"))
    assert spoken(run) == ("", 0)


async def test_without_the_guard_music_is_translated_into_invented_english(pipeline):
    """The check above can fail: with ``faithful.guard=false`` the same models speak
    English over music, and the eval's counter sees invented utterances. Greedy decoding
    (the degrade ladder's level 2, ``mode: fast``): beam search alone invented nothing over
    these two inputs, so the control runs where the guard is needed."""
    greedy = dataclasses.replace(pipeline.options.asr, beam_size=1, final_beam_size=1)
    options = dataclasses.replace(
        pipeline.options, faithful=FaithfulnessOptions(guard=False, recover=False), asr=greedy)
    unguarded = Pipeline(options, pipeline.engine)
    try:
        invented = 0
        for kind in ("band", "noise_bed"):
            run = await translate_audio(unguarded, synthesize(kind, 10.0),
                                        SessionRequest(source_lang="fr", pace="fast"))
            invented += count_unfaithful(utterance_texts(run.records))["invented"]
        assert invented >= 1
    finally:
        unguarded.stop_workers()  # not close(): the engine is the shared fixture's


def three_sentences() -> np.ndarray:
    """A short first sentence ("Bonjour !"), then two long ones, with 0.15 s pauses (too
    short for the VAD to end the utterance): one ~14 s utterance of real French speech."""
    gap = np.zeros(2400, np.int16)
    bonjour = read_audio(shared_clip("fr_bonjour_long_silence"))[3200:59200]
    return np.concatenate([bonjour, gap, read_audio(shared_clip("fr_cvss_17767732")), gap,
                           read_audio(shared_clip("fr_picovoice_test"))])


def test_recovery_translates_what_a_short_first_pass_left_out(pipeline):
    """The decode program on the real engine, given a translate decode that stopped after
    "Hello!" (Whisper's known failure, scripted here because it does not happen on every
    input), aligns the captions, translates the rest of the audio on its own and appends it."""
    engine = pipeline.engine
    program = DecodeProgram(engine)
    audio = three_sentences().astype(np.float32) / 32768.0
    request = WhisperRequest(audio=audio, language="fr", recover_coverage=True,
                             tasks=(DecodeTask("transcribe"), DecodeTask("translate")))
    first = program.run(request)
    assert first.decodes[1].recovered == 0  # the full decode covered everything itself
    short = [first.decodes[0], dataclasses.replace(first.decodes[1], continuation="Hello!")]
    encoded = engine._encode_rows([engine.mel(audio)])[0]
    recovered = program.recover_coverage(request, encoded, "fr", short)[1]
    assert recovered.recovered >= 1 and not recovered.coverage_short
    english = recovered.continuation.lower()
    assert english.startswith("hello!")
    assert "assembly" in english and "consul" in english  # the later sentences


async def test_long_utterance_with_a_short_first_sentence_is_translated_in_full(pipeline):
    run = await translate_audio(pipeline, three_sentences(),
                                SessionRequest(source_lang="fr", pace="fast"))
    english = run.target_text.lower()
    assert "assembly" in english and "consul" in english
    assert not [r for r in run.records if r["event"] == "error"]
    assert count_unfaithful(utterance_texts(run.records)) == {"invented": 0, "dropped": 0}
