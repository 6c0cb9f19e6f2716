"""Real models, real recordings: the whole path from audio to translated speech."""

from __future__ import annotations

import numpy as np
import soundfile as sf

from speechpipe.evaluation.scores import normalize_text, speech_span
from speechpipe.file_translation import translate_audio
from speechpipe.stages.request import SessionRequest
from speechpipe.transport.file_replay import read_audio
from tests.helpers import OWN_SAMPLES, shared_clip, shared_manifest_row


def _words(text: str) -> set[str]:
    return set(normalize_text(text).split())


async def test_spanish_clip_becomes_english_speech_with_the_key_words(pipeline):
    clip = "es_enh_12411_cv"
    row = shared_manifest_row(clip)
    audio = read_audio(shared_clip(clip))
    run = await translate_audio(pipeline, audio, SessionRequest(source_lang="es", pace="fast",
                                                                output_sample_rate=16000))
    key_words = {"decided", "planet", "explore", "rest", "universe"}
    assert key_words <= _words(row["translation_en"])  # the reference says so too
    assert len(key_words & _words(run.target_text)) >= 4, run.target_text
    source_words = {"decidió", "abandonar", "planeta", "explorar", "universo"}
    assert len(source_words & _words(run.source_text)) >= 4, run.source_text
    speech = run.output.astype(np.float32)
    assert np.sqrt(np.mean(speech**2)) > 300  # translated speech, not silence
    assert any(r["event"] == "tts.audio" for r in run.records)


async def test_first_translated_audio_comes_before_the_source_speech_ends(pipeline):
    clip = "es_enh_9756_cv"  # 9.6 s
    audio = read_audio(shared_clip(clip))
    assert len(audio) / 16000 >= 7
    run = await translate_audio(pipeline, audio, SessionRequest(source_lang="es",
                                                                pace="realtime"))
    start, end = speech_span(run.records)
    first_audio = min(r["stream_t"] for r in run.records if r["event"] == "tts.audio")
    assert first_audio < end, (first_audio, end)


async def test_long_silent_stretch_produces_no_words(pipeline):
    clip = "fr_bonjour_long_silence"
    audio = read_audio(shared_clip(clip))
    run = await translate_audio(pipeline, audio, SessionRequest(source_lang="fr", pace="fast"))
    # the recording: speech in the first ~3 s and the last ~3 s, room noise in between
    silent_from, silent_to = 4.0, len(audio) / 16000 - 4.0
    for r in run.records:
        if r["event"] in ("asr.commit", "mt.commit") and r["committed"]:
            inside = r["source_start"] >= silent_from and r["source_end"] <= silent_to
            assert not inside, r


async def test_all_silence_gives_empty_output_not_an_error(pipeline):
    audio = np.zeros(16000 * 3, np.int16)
    run = await translate_audio(pipeline, audio, SessionRequest(source_lang="es", pace="fast"))
    assert run.target_text == ""
    assert not any(r["event"] in ("tts.audio", "error") for r in run.records)
    assert not run.output.any()


async def test_project_samples_run_end_to_end_without_shared(pipeline):
    """Runs on any fresh clone: the project's own generated samples."""
    import json

    rows = [json.loads(line) for line in (OWN_SAMPLES / "manifest.jsonl").read_text().splitlines()
            if line.strip()]
    row = next(r for r in rows if r["lang"] == "es")
    audio = read_audio(OWN_SAMPLES / row["file"])
    run = await translate_audio(pipeline, audio, SessionRequest(source_lang="es", pace="fast"))
    assert len(_words(run.target_text) & _words(row["translation_en"])) >= 2, run.target_text
    assert any(r["event"] == "tts.audio" for r in run.records)


def test_translate_cli_writes_speech_and_trace(tmp_path):
    from speechpipe.cli import main
    from speechpipe.evaluation.trace import read_trace

    clip = shared_clip("es_enh_1507_epst")
    out, trace = tmp_path / "out.wav", tmp_path / "trace.jsonl"
    assert main(["translate", str(clip), "--out", str(out), "--trace", str(trace),
                 "--pace", "fast", "--source-lang", "es"]) == 0
    data, rate = sf.read(out, dtype="int16")
    assert rate == 22050 and np.abs(data).max() > 1000
    records = read_trace(trace)
    for record in records:
        assert {"event", "stream_t", "wall_t", "utterance"} <= record.keys()
    kinds = {r["event"] for r in records}
    assert {"vad.start", "vad.end", "asr.commit", "mt.commit", "tts.audio",
            "utterance.end"} <= kinds
