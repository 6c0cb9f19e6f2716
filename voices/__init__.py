"""Piper voices: find them, load them, synthesize.

The names below are imported lazily (PEP 562), so that importing a leaf of this package (the
options tree reads ``voices.piper_options``) loads neither numpy nor the voice registry.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> module that defines it
_EXPORTS: dict[str, str] = {
    "BUILTIN_VOICE": "speechpipe.voices.registry",
    "PiperOptions": "speechpipe.voices.piper_options",
    "PiperSynthesizer": "speechpipe.voices.piper_engine",
    "VoiceInfo": "speechpipe.voices.registry",
    "list_voices": "speechpipe.voices.registry",
    "load_voice_info": "speechpipe.voices.registry",
    "resolve_voice": "speechpipe.voices.registry",
    "voices_home": "speechpipe.voices.registry",
}

__all__ = [
    "BUILTIN_VOICE",
    "PiperOptions",
    "PiperSynthesizer",
    "VoiceInfo",
    "list_voices",
    "load_voice_info",
    "resolve_voice",
    "voices_home",
]

if TYPE_CHECKING:
    from speechpipe.voices.piper_engine import PiperSynthesizer
    from speechpipe.voices.piper_options import PiperOptions
    from speechpipe.voices.registry import (
        BUILTIN_VOICE,
        VoiceInfo,
        list_voices,
        load_voice_info,
        resolve_voice,
        voices_home,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
