"""``speechpipe eval`` scores any target language: references from the manifest's
``translations`` (``reference_for``), the default clip selection for a target, BLEU and
ASR-BLEU against the target's references, and the language heard in the produced speech
(``heard_language``, ``heard_in_target``). Pure parts, fake Whisper (the real one: the slow
tier)."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from speechpipe.errors import InputError
from speechpipe.evaluation.evaluate import _aggregate, print_report, select_clips
from speechpipe.evaluation.listener import hear_speech, listener_figures
from speechpipe.evaluation.manifest import load_manifest, reference_for
from speechpipe.evaluation.scores import corpus_bleu, sentence_bleu

# --- reference_for ---------------------------------------------------------------------------


def test_the_reference_is_the_targets_translation():
    clip = {"lang": "en", "translations": {"es": "el gato duerme"}}
    assert reference_for(clip, "es") == "el gato duerme"
    assert reference_for(clip, " ES ") == "el gato duerme"  # as --target-lang is normalized
    assert reference_for(clip, "en") == ""  # an English clip has no English reference
    assert reference_for(clip, "fr") == ""


def test_english_falls_back_to_translation_en():
    assert reference_for({"translation_en": "the cat"}, "en") == "the cat"
    both = {"translation_en": "the cat", "translations": {"en": "the cat sleeps"}}
    assert reference_for(both, "en") == "the cat sleeps"
    assert reference_for({"translation_en": "the cat", "translations": {"en": ""}},
                         "en") == "the cat"
    assert reference_for({"translation_en": "the cat"}, "es") == ""  # English only


@pytest.mark.parametrize("clip", [
    {}, {"translation_en": None, "translations": {}}, {"translations": None},
    {"translations": {"es": None}}, {"translations": {"es": "  "}},
])
def test_no_reference_is_the_empty_string(clip: dict[str, Any]):
    assert reference_for(clip, "es") == "" and reference_for(clip, "en") == ""


# --- the manifest keeps translations ---------------------------------------------------------

def _manifest(tmp_path: Path, *rows: dict[str, Any]) -> Path:
    path = tmp_path / "manifest.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_the_manifest_keeps_translations(tmp_path: Path):
    clips = load_manifest(_manifest(
        tmp_path, {"file": "a.wav", "lang": "en", "translations": {" ES ": "hola", "fr": None}},
        {"file": "b.wav", "lang": "es", "translations": None}))
    assert clips[0]["translations"] == {"es": "hola", "fr": None}
    assert clips[1]["translations"] == {}


@pytest.mark.parametrize(("value", "needle"), [
    (["es", "hola"], "'translations' must be an object of language -> text, not list"),
    ("hola", "not str"),
    ({"es": 5}, "'translations.es' must be a string, not int"),
    ({"es": {"text": "hola"}}, "'translations.es' must be a string, not dict"),
    ({"klingon": "nuqneH"}, "unknown language 'klingon'"),
])
def test_bad_translations_name_the_line(tmp_path: Path, value: object, needle: str):
    path = _manifest(tmp_path, {"file": "a.wav", "lang": "en"},
                     {"file": "b.wav", "lang": "en", "translations": value})
    with pytest.raises(InputError) as caught:
        load_manifest(path)
    assert f"{path}:2" in str(caught.value) and needle in str(caught.value)


# --- select_clips ----------------------------------------------------------------------------

ROWS = [
    {"file": "en1.wav", "id": "en1", "lang": "en", "category": "core_en_to_x",
     "translation_en": None, "translations": {"es": "el gato duerme en la casa"}},
    {"file": "en2.wav", "id": "en2", "lang": "en", "category": "core_en_to_x",
     "translations": {"es": "hace mucho frío hoy"}},
    {"file": "en3.wav", "id": "en3", "lang": "en", "category": "en_transcript_only",
     "transcript": "no translation here", "translations": {}},
    {"file": "es1.wav", "id": "es1", "lang": "es", "category": "core_x_to_en",
     "translation_en": "the dog runs", "translations": {"en": "the dog runs"}},
    {"file": "fr1.wav", "id": "fr1", "lang": "fr", "category": "core_x_to_en",
     "translation_en": "good morning"},  # an older manifest: no translations
    {"file": "de1.wav", "id": "de1", "lang": "de", "category": "other",
     "translations": {"es": "buenos días", "en": "good day"}},
]


def _args(**kwargs: Any) -> argparse.Namespace:
    return argparse.Namespace(**{"all": False, "category": None, "limit": None, **kwargs})


def _ids(clips: list[dict[str, Any]]) -> list[str]:
    return [c["id"] for c in clips]


def test_by_default_the_clips_with_a_reference_in_the_target(tmp_path: Path):
    clips = load_manifest(_manifest(tmp_path, *ROWS))
    assert _ids(select_clips(clips, _args(), "es")) == ["en1", "en2", "de1"]
    assert _ids(select_clips(clips, _args(), " ES")) == ["en1", "en2", "de1"]
    # English as before: translation_en or translations.en, never an English clip
    assert _ids(select_clips(clips, _args(), "en")) == ["es1", "fr1", "de1"]
    assert _ids(select_clips(clips, _args(), "fr")) == []
    assert _ids(select_clips(clips, _args(limit=2), "es")) == ["en1", "en2"]


def test_all_and_category_still_widen_it(tmp_path: Path):
    clips = load_manifest(_manifest(tmp_path, *ROWS))
    assert _ids(select_clips(clips, _args(all=True), "es")) == ["en1", "en2", "en3", "fr1",
                                                                  "de1"]
    assert _ids(select_clips(clips, _args(category=["core_en_to_x"]), "es")) == ["en1", "en2"]


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


def _spanish_set() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    clips = [{"id": c["id"], **c} for c in ROWS]
    rows = [_row("en1", "el gato duerme en la casa", "es"),
            _row("en2", "hace frío", "es", asr_text="hace frio hoy"),
            _row("de1", "good day", "en"),  # spoken in English: a wrong-language voice
            _row("en3", "", None)]  # nothing produced: no speech to hear
    return clips, rows


def test_bleu_and_asr_bleu_are_taken_against_the_spanish_references():
    clips, rows = _spanish_set()
    aggregate = _aggregate(rows, clips, {}, 0.8, 8.0, 4.0, "es")
    scored = ["en1", "en2", "de1"]  # en3 has no Spanish reference
    references = [reference_for(next(c for c in clips if c["id"] == i), "es") for i in scored]
    by_id = {r["id"]: r for r in rows}
    assert aggregate["target_lang"] == "es"
    assert aggregate["bleu"] == round(corpus_bleu([by_id[i]["target_text"] for i in scored],
                                                  references), 2)
    assert aggregate["asr_bleu"] == round(corpus_bleu([by_id[i]["asr_text"] for i in scored],
                                                      references), 2)
    assert 0 < aggregate["bleu"] < 100 and aggregate["asr_bleu"] != aggregate["bleu"]


def test_heard_in_target_counts_the_clips_heard_as_the_target():
    clips, rows = _spanish_set()
    aggregate = _aggregate(rows, clips, {}, 0.8, 8.0, 4.0, "es")
    assert aggregate["clips_with_speech"] == 3  # en3 produced no speech
    assert aggregate["heard_in_target"] == 2  # de1 was heard as English
    categories = aggregate["by_category"]
    assert categories["core_en_to_x"]["heard_in_target"] == 2
    assert categories["other"]["heard_in_target"] == 0
    assert categories["en_transcript_only"]["heard_in_target"] is None  # nothing to hear
    assert categories["core_en_to_x"]["bleu"] == round(corpus_bleu(
        ["el gato duerme en la casa", "hace frío"],
        ["el gato duerme en la casa", "hace mucho frío hoy"]), 2)


def test_english_is_scored_as_before():
    """Target en, the default: translation_en as the reference, rows without the new fields
    (an older report) still aggregate."""
    clips = [{"id": "es1", "category": "a", "translation_en": "the dog runs fast"},
             {"id": "fr1", "category": "a", "translation_en": "good morning to you",
              "translations": {"en": "good morning to you", "es": "buenos días"}}]
    rows = [_row("es1", "the dog runs fast", None), _row("fr1", "good morning", None)]
    for row in rows:
        del row["heard_language"], row["heard_language_probability"]
    aggregate = _aggregate(rows, clips, {}, 0.4, 4.0, 2.0)
    expected = round(corpus_bleu(["the dog runs fast", "good morning"],
                                 ["the dog runs fast", "good morning to you"]), 2)
    assert aggregate["bleu"] == aggregate["asr_bleu"] == expected
    assert aggregate["target_lang"] == "en"
    assert aggregate["clips_with_speech"] == 0 and aggregate["heard_in_target"] is None


def test_the_report_prints_the_language_heard():
    clips, rows = _spanish_set()
    out = io.StringIO()
    print_report({"clips": rows, "aggregate": _aggregate(rows, clips, {}, 0.8, 8.0, 4.0,
                                                         "es")}, out=out)
    header, *lines = out.getvalue().splitlines()
    assert "heard" in header
    assert any(line.startswith("de1") and " en " in line for line in lines)
    assert "heard in es 2 of 3 clips with speech" in out.getvalue()
    category_header = next(line for line in lines if line.startswith("category"))
    assert "inTarget" in category_header


# --- hearing the produced speech (a fake Whisper) ---------------------------------------------

class FakeWhisper:
    """What ``hear_speech`` asks of ``faster_whisper.WhisperModel``, recorded."""

    feature_extractor = SimpleNamespace(n_samples=16_000 * 30)

    def __init__(self, language: str = "es") -> None:
        self.language = language
        self.transcribed: list[tuple[int, dict[str, Any]]] = []
        self.detected: list[tuple[np.ndarray, int]] = []

    def transcribe(self, audio: np.ndarray, **options: Any):
        self.transcribed.append((len(audio), options))
        return iter([SimpleNamespace(text=" el gato "), SimpleNamespace(text="duerme.")]), None

    def detect_language(self, audio: np.ndarray, language_detection_segments: int = 1):
        self.detected.append((audio, language_detection_segments))
        return self.language, 0.87654, [(self.language, 0.87654)]


def _speech(rate: int, seconds: float = 0.5) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (8000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)


def test_speech_is_transcribed_in_the_target_and_its_language_detected_without_silence():
    rate = 22_050
    silence = np.zeros(rate, dtype=np.int16)
    output = np.concatenate([silence, _speech(rate), silence, _speech(rate), silence])
    model = FakeWhisper()
    heard = hear_speech(model, output, rate, "es")
    assert heard == {"asr_text": "el gato duerme.", "heard_language": "es",
                     "heard_language_probability": 0.8765}
    [(length, options)] = model.transcribed
    assert options["language"] == "es" and options["task"] == "transcribe"
    assert length == pytest.approx(len(output) * 16_000 / rate, abs=2)  # the whole output
    [(speech, windows)] = model.detected
    assert windows == 1
    assert 0.9 <= len(speech) / 16_000 <= 1.1  # the two half seconds of speech, no gaps


def test_long_speech_offers_every_30_s_window_to_the_detection():
    model = FakeWhisper()
    hear_speech(model, _speech(16_000, seconds=65.0), 16_000, "es")
    assert model.detected[0][1] == 3


def test_silence_is_neither_transcribed_nor_detected():
    model = FakeWhisper()
    heard = hear_speech(model, np.zeros(22_050, dtype=np.int16), 22_050, "es")
    assert heard == {"asr_text": "", "heard_language": None,
                     "heard_language_probability": None}
    assert not model.transcribed and not model.detected


async def test_listener_figures_hear_the_target_language():
    model = FakeWhisper(language="en")
    pipeline = SimpleNamespace(engine=SimpleNamespace(model=model))
    run = SimpleNamespace(output=_speech(16_000), output_rate=16_000, records=[])
    figures = await listener_figures(pipeline, run, "el gato duerme", "es")
    assert model.transcribed[0][1]["language"] == "es"
    assert figures["heard_language"] == "en"  # the voice spoke English: heard as such
    assert figures["asr_bleu"] == round(sentence_bleu("el gato duerme.", "el gato duerme"), 2)
    assert figures["queued_at_end"] is None  # the EndOffset split, as before
    english = await listener_figures(pipeline, run, "the cat")
    assert model.transcribed[1][1]["language"] == "en"  # the default target: English
    assert english["asr_bleu"] == 0.0
