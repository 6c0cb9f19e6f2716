"""The public API: ``speechpipe`` exports a fixed set of names, lazily (what a fresh
interpreter's ``import speechpipe`` loads: tests/cli/house)."""

from __future__ import annotations

import speechpipe

EXPORTED = {
    "__version__",
    "Pipeline",
    "PipelineSession",
    "PipelineOptions",
    "SessionRequest",
    "translate_file",
    "TranslationRun",
    "AudioFrame",
    "OutputEvent",
    "VadEvent",
    "TextHypothesis",
    "SpeechChunk",
    "UtteranceEnd",
    "StatusEvent",
    "ErrorEvent",
    "STREAM_RATE",
    "SpeechpipeError",
    "Cue",
    "CueOptions",
    "cues_from_events",
    "cues_from_records",
    "write_subtitles",
}


def test_exported_names_are_the_documented_ones() -> None:
    assert set(speechpipe.__all__) == EXPORTED
    assert len(speechpipe.__all__) == len(EXPORTED)  # no duplicates
    assert set(speechpipe._EXPORTS) == EXPORTED - {"__version__"}


def test_every_exported_name_resolves_to_its_defining_object() -> None:
    from speechpipe.config import PipelineOptions
    from speechpipe.file_translation import translate_file
    from speechpipe.session import Pipeline
    from speechpipe.stages.frames import OutputEvent, TextHypothesis
    from speechpipe.stages.request import SessionRequest

    for name in speechpipe.__all__:
        assert getattr(speechpipe, name) is not None, name
    assert speechpipe.Pipeline is Pipeline
    assert speechpipe.PipelineOptions is PipelineOptions
    assert speechpipe.SessionRequest is SessionRequest
    assert speechpipe.translate_file is translate_file
    assert speechpipe.TextHypothesis is TextHypothesis
    assert speechpipe.OutputEvent is OutputEvent
    assert set(dir(speechpipe)) >= EXPORTED


def test_unknown_name_is_an_attribute_error() -> None:
    try:
        speechpipe.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("speechpipe.NoSuchThing resolved")
