"""The TTS engine seam: what a voice's engine must give, and the one table of engines.

A voice names its engine (``VoiceInfo.engine``); ``ENGINES`` maps each engine to its loader,
the suffix of its voice files and the loggers that may carry text. Adding an engine is one
module (a loader returning a ``Synthesizer``) and one ``register_engine`` call — pipecat's
``TTSService.run_tts`` with ``services/piper/tts.py`` is the model. The loader is named as
``"module:function"`` and imported on a voice's first load, so an engine's libraries load
only when one of its voices speaks (and this table imports no engine). An engine may also
name a catalogue: voices it speaks with no file (espeak-ng's languages), offered after every
file voice and built-in voice of the same language.

An engine's options are the pipeline group named after it (``--set piper.length_scale=0.9``):
the loader gets that group, or None when the tree has none for it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from speechpipe.errors import VoiceError

__all__ = ["Synthesizer", "TtsEngine", "ENGINES", "register_engine", "unregister_engine",
           "engine", "load_synthesizer", "text_loggers", "voice_suffixes"]


class Synthesizer(Protocol):
    """A loaded voice: text in, int16 mono samples at ``sample_rate`` out. Synchronous: the
    shared ``TtsWorker`` calls it on its own thread."""

    @property
    def sample_rate(self) -> int:
        """The voice's native sample rate."""
        ...

    def synthesize(self, text: str, speed: float = 1.0) -> NDArray[np.int16]:
        """Speak ``text``; ``speed`` > 1 speaks faster. Empty when there is nothing to say."""
        ...


Loader = Callable[[Any, Any], Synthesizer]  # (VoiceInfo, the engine's options or None)


@dataclass(frozen=True, slots=True)
class TtsEngine:
    """One TTS backend."""

    name: str
    loader: str  # "module:function", called as function(voice, options) -> Synthesizer
    model_suffix: str  # its voices are NAME{model_suffix} + NAME{model_suffix}.json pairs
    text_loggers: tuple[str, ...] = ()  # loggers that may log spoken text (at DEBUG)
    catalogue: str = ""
    """``"module:function"`` returning the ``VoiceInfo``s it speaks with no voice file (empty
    when it is not installed); they are the registry's last choice for a language."""
    description: str = ""  # what a listener hears, e.g. "Piper neural voice"
    licence: str = ""  # the engine's licence (SPDX), for ``describe_voice``
    options_group: str = ""  # its options' group in the pipeline's tree (default: ``name``)

    def load(self, voice: Any, options: Any) -> Synthesizer:
        """Import the loader and load ``voice`` with ``options``."""
        module, _, function = self.loader.partition(":")
        loader: Loader = getattr(importlib.import_module(module), function)
        return loader(voice, options)

    def catalogue_voices(self) -> list[Any]:
        """The voices it speaks without files (``VoiceInfo``s); [] without a catalogue."""
        if not self.catalogue:
            return []
        module, _, function = self.catalogue.partition(":")
        voices: list[Any] = getattr(importlib.import_module(module), function)()
        return voices


ENGINES: dict[str, TtsEngine] = {
    "piper": TtsEngine("piper", "speechpipe.voices.piper_engine:load_piper", ".onnx",
                       text_loggers=("piper",), description="Piper neural voice",
                       licence="the voice's own; piper-tts GPL-3.0-or-later"),
    "espeak-ng": TtsEngine("espeak-ng", "speechpipe.voices.espeak_engine:load_espeak", ".espeak",
                           catalogue="speechpipe.voices.espeak_engine:espeak_voices",
                           description="robotic voice (espeak-ng formant synthesis)",
                           licence="GPL-3.0-or-later", options_group="espeak"),
}


def register_engine(engine: TtsEngine) -> None:
    """Add (or replace) an engine; its voices are found from then on."""
    if any(other.model_suffix == engine.model_suffix and other.name != engine.name
           for other in ENGINES.values()):
        raise ValueError(f"another engine already owns {engine.model_suffix} voice files")
    ENGINES[engine.name] = engine


def unregister_engine(name: str) -> None:
    """Remove an engine (tests)."""
    ENGINES.pop(name, None)


def engine(name: str) -> TtsEngine:
    """The engine called ``name``; ``VoiceError`` when none is registered."""
    found = ENGINES.get(name)
    if found is None:
        raise VoiceError(f"no TTS engine {name!r} (engines: {', '.join(sorted(ENGINES))})")
    return found


def load_synthesizer(voice: Any, options: Any = None) -> Synthesizer:
    """Load ``voice`` (a ``VoiceInfo``) with its engine; ``options``: the engine's group."""
    return engine(voice.engine).load(voice, options)


def text_loggers() -> tuple[str, ...]:
    """Every registered engine's text-carrying loggers (``transport/privacy.py`` caps them)."""
    return tuple(dict.fromkeys(name for e in ENGINES.values() for name in e.text_loggers))


def voice_suffixes() -> dict[str, str]:
    """Model-file suffix -> engine name, for the voice folders' scan."""
    return {e.model_suffix: e.name for e in ENGINES.values()}
