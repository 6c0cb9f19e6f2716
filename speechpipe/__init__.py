"""speechpipe: streaming speech-to-speech translation.

The names a library user needs, imported lazily (PEP 562) so that ``import speechpipe`` stays
cheap: the models (faster-whisper, CTranslate2, Piper) load only when a name that needs them
is first used. ``speechpipe.errors`` is a leaf every layer imports.

::

    pipeline = speechpipe.Pipeline.load(speechpipe.PipelineOptions())
    async with pipeline.session(speechpipe.SessionRequest(source_lang="es")) as session:
        await session.push(speechpipe.AudioFrame(samples, pts))
        ...
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# onnxruntime (Piper's voices, the Silero VAD) records telemetry events in
# ~/.cache/Microsoft/DeveloperTools/.onnxruntime/onnxruntime.db unless this is set when the
# library loads; ``disable_telemetry_events()`` does not stop that file. Set here, before
# any speechpipe module can import onnxruntime; an explicit ORT_DISABLE_TELEMETRY=0 wins.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

# name -> module that defines it
_EXPORTS: dict[str, str] = {
    "Pipeline": "speechpipe.session",
    "PipelineSession": "speechpipe.session",
    "PipelineOptions": "speechpipe.config",
    "SessionRequest": "speechpipe.stages.request",
    "translate_file": "speechpipe.file_translation",
    "TranslationRun": "speechpipe.file_translation",
    "AudioFrame": "speechpipe.stages.frames",
    "OutputEvent": "speechpipe.stages.frames",
    "VadEvent": "speechpipe.stages.frames",
    "TextHypothesis": "speechpipe.stages.frames",
    "SpeechChunk": "speechpipe.stages.frames",
    "UtteranceEnd": "speechpipe.stages.frames",
    "StatusEvent": "speechpipe.stages.frames",
    "ErrorEvent": "speechpipe.stages.frames",
    "STREAM_RATE": "speechpipe.stages.frames",
    "SpeechpipeError": "speechpipe.errors",
    "Cue": "speechpipe.stages.cues",
    "CueOptions": "speechpipe.stages.cues",
    "cues_from_events": "speechpipe.stages.cues",
    "cues_from_records": "speechpipe.stages.cues",
    "write_subtitles": "speechpipe.transport.subtitle_files",
}

__all__ = [
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
]

if TYPE_CHECKING:
    from speechpipe.config import PipelineOptions
    from speechpipe.errors import SpeechpipeError
    from speechpipe.file_translation import TranslationRun, translate_file
    from speechpipe.session import Pipeline, PipelineSession
    from speechpipe.stages.cues import Cue, CueOptions, cues_from_events, cues_from_records
    from speechpipe.stages.frames import (
        STREAM_RATE,
        AudioFrame,
        ErrorEvent,
        OutputEvent,
        SpeechChunk,
        StatusEvent,
        TextHypothesis,
        UtteranceEnd,
        VadEvent,
    )
    from speechpipe.stages.request import SessionRequest
    from speechpipe.transport.subtitle_files import write_subtitles


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'speechpipe' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
