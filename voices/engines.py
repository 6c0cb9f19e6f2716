"""The TTS engine seam: what a voice's engine must give, and the one table of engines.

A voice names its engine (``VoiceInfo.engine``); ``ENGINES`` maps each engine to its loader,
the suffix of its voice files, the loggers that may carry text and its options. Adding an
engine is one module (a loader returning a ``Synthesizer``) and one row here (or one
``register_engine`` call) — pipecat's ``TTSService.run_tts`` with ``services/piper/tts.py``
is the model. The loader is named as ``"module:function"`` and imported on a voice's first
load, so an engine's libraries load only when one of its voices speaks (and this table
imports no engine, nor numpy: the options tree reads it). An engine may also name a
catalogue: voices it speaks with no file (espeak-ng's languages), offered after every file
voice and built-in voice of the same language.

An engine's options are its own dataclass, named by its row (``options``, a
``"module:factory"`` of its defaults, in a leaf module): the options tree
(``speechpipe.config``) gives each row of this table a group of that type, named
``options_group`` (default: the engine's name), so ``--set espeak.rate_wpm=200`` reaches
it; its loader gets that group. An engine registered later (``register_engine``) has no
group in the tree: its loader gets its defaults.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from speechpipe.errors import VoiceError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

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
    options: str = ""
    """``"module:factory"`` of its options' defaults (a frozen dataclass in a leaf module:
    the options tree imports it); empty: it takes none."""
    options_group: str = ""  # its options' group in the pipeline's tree (default: ``name``)
    catalogue_offer: str = ""  # what its catalogue gives, e.g. "robotic voices for 100+ ..."
    catalogue_install: str = ""  # the command that installs its catalogue
    config_check: str = ""
    """``"module:function"`` called as function(config, name, path) on a voice file's config
    when it is read, before anything loads it: ``VoiceError`` for what the engine lacks,
    ``UnsafeVoiceError`` for what it must never be given; empty: the sample rate only."""

    @property
    def group(self) -> str:
        """The name of its options' group in the tree (``--set GROUP.FIELD``)."""
        return self.options_group or self.name

    def default_options(self) -> Any:
        """Its options' defaults; None when it takes none."""
        return _made(self.options) if self.options else None

    def options_in(self, tree: Any) -> Any:
        """Its options in the pipeline's options ``tree`` (its group), else its defaults."""
        found = getattr(tree, self.group, None) if self.options else None
        return found if found is not None else self.default_options()

    def check_config(self, config: dict[str, object], name: str, path: Any) -> None:
        """Check a voice file's config with its ``config_check``."""
        if self.config_check:
            _named(self.config_check)(config, name, path)

    def load(self, voice: Any, options: Any) -> Synthesizer:
        """Import the loader and load ``voice`` with ``options``."""
        loader: Loader = _named(self.loader)
        return loader(voice, options)

    def catalogue_voices(self) -> list[Any]:
        """The voices it speaks without files (``VoiceInfo``s); [] without a catalogue."""
        if not self.catalogue:
            return []
        voices: list[Any] = _named(self.catalogue)()
        return voices


def _named(name: str) -> Any:
    """The object ``"module:attribute"`` names (the module imported now)."""
    module, _, attribute = name.partition(":")
    return getattr(importlib.import_module(module), attribute)


def _made(name: str) -> Any:
    """What the factory ``"module:factory"`` makes."""
    return _named(name)()


ENGINES: dict[str, TtsEngine] = {
    "piper": TtsEngine("piper", "speechpipe.voices.piper_engine:load_piper", ".onnx",
                       text_loggers=("piper",), description="Piper neural voice",
                       licence="the voice's own; piper-tts GPL-3.0-or-later",
                       options="speechpipe.voices.piper_options:pipeline_defaults",
                       config_check="speechpipe.voices.voice_config_checks:check_piper_voice"),
    "espeak-ng": TtsEngine("espeak-ng", "speechpipe.voices.espeak_engine:load_espeak", ".espeak",
                           catalogue="speechpipe.voices.espeak_engine:espeak_voices",
                           description="robotic voice (espeak-ng formant synthesis)",
                           licence="GPL-3.0-or-later",
                           options="speechpipe.voices.espeak_options:EspeakOptions",
                           options_group="espeak",
                           catalogue_offer="robotic voices for 100+ languages",
                           catalogue_install="pip install 'speechpipe[languages]'"),
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
