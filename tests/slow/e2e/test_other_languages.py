"""Other languages on real engines, end to end: English speech -> Spanish speech with only
``--target-lang es`` (Apertium en->es, the espeak-ng Spanish voice), French -> Spanish through
the direct fr->es pair (never through English), and the spoken output heard back by Whisper as
Spanish. Skipped with the install line where Apertium's pairs or espeak-ng are absent (.ci/run
installs both)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from speechpipe.models.mt.apertium import installed_pairs
from tests.helpers import ROOT, speechpipe

SAMPLES = ROOT / "samples" / "wav"


def _espeak_voices() -> bool:
    try:
        from speechpipe.voices.espeak_engine import espeak_voices
    except ImportError:
        return False
    return any(v.lang == "es" for v in espeak_voices())


pytestmark = [
    pytest.mark.skipif(("en", "es") not in installed_pairs() or ("fr", "es") not in
                       installed_pairs(), reason="apt install apertium apertium-eng-spa "
                       "apertium-fr-es"),
    pytest.mark.skipif(not _espeak_voices(), reason="pip install 'speechpipe[languages]'"),
]


def _heard(path: Path) -> tuple[str, str]:
    """(language, text) Whisper hears in produced speech."""
    import soxr
    from faster_whisper import WhisperModel

    from speechpipe.models.whisper.weights import resolve_whisper_model

    audio, rate = sf.read(path, dtype="float32")
    audio = soxr.resample(audio, rate, 16_000)
    model = WhisperModel(str(resolve_whisper_model("whisper-base")), compute_type="int8")
    # The same hearing every run: temperature 0 alone (transcribe's default falls back to
    # sampling when a decode looks poor, which the robotic voice triggers: the same speech was
    # heard differently run to run), and no repeated trigram (the greedy decode of this voice
    # otherwise loops on its first word, "mis mis mis ...")
    segments, info = model.transcribe(audio, beam_size=5, condition_on_previous_text=False,
                                      temperature=0.0, no_repeat_ngram_size=3)
    return info.language, " ".join(s.text for s in segments)


def test_english_speech_is_heard_in_spanish_with_only_the_target(tmp_path: Path) -> None:
    out = tmp_path / "river.es.wav"
    result = speechpipe("translate", str(SAMPLES / "en_river.wav"), "--out", str(out),
                        "--target-lang", "es", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any("rule-based MT (Apertium eng-spa)" in line for line in lines), result.stdout
    assert any("robotic voice" in line and "espeak-ng-es" in line for line in lines)
    said = next(line for line in lines if "->" in line).split("->", 1)[1].lower()
    assert "río" in said and "perros" in said and "casa" in said
    samples, _ = sf.read(out, dtype="int16")
    assert np.abs(samples).max() > 1000  # speech, not silence
    language, heard = _heard(out)
    assert language == "es", heard
    assert "perros" in heard.lower() or "río" in heard.lower(), heard


def test_french_speech_reaches_spanish_through_the_direct_pair(tmp_path: Path) -> None:
    out = tmp_path / "plage.es.wav"
    result = speechpipe("translate", str(SAMPLES / "fr_plage.wav"), "--out", str(out),
                        "--target-lang", "es", "--source-lang", "fr", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "rule-based MT (Apertium fr-es)" in result.stdout
    assert "eng-spa" not in result.stdout and "Whisper translate" not in result.stdout
    said = next(line for line in result.stdout.splitlines() if "->" in line).split("->")[1]
    assert "playa" in said.lower()
    language, _ = _heard(out)
    assert language == "es"


async def test_a_killed_apertium_chain_mid_talk_costs_one_update(pipeline) -> None:
    """The shared en->es chain is killed while an English speaker talks at real pace: the
    session goes on, the chain is started again, and the rest of the talk is translated."""
    import asyncio
    import os
    import signal

    from speechpipe.file_translation import translate_audio
    from speechpipe.stages.request import SessionRequest
    from speechpipe.transport.file_replay import read_audio

    worker = await asyncio.to_thread(pipeline.text_mt_worker, "apertium:eng-spa")
    audio = np.concatenate([read_audio(SAMPLES / f"en_{name}.wav") for name in ("river",
                                                                                  "meeting")])
    request = SessionRequest(source_lang="en", target_lang="es", pace="realtime")
    restarts = worker.restarts

    async def kill_mid_talk() -> None:
        await asyncio.sleep(3.0)
        os.killpg(worker.process.pids[0], signal.SIGKILL)

    killer = asyncio.ensure_future(kill_mid_talk())
    run = await translate_audio(pipeline, audio, request)
    await killer
    assert worker.restarts == restarts + 1
    target = run.target_text.lower()
    assert "perros" in target and "reunión" in target, target  # both sentences translated
    assert run.output is not None and np.abs(run.output).max() > 1000
