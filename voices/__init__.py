"""Piper voices: find them, load them, synthesize."""

from __future__ import annotations

from speechpipe.voices.piper_engine import PiperOptions, PiperSynthesizer
from speechpipe.voices.registry import (
    BUILTIN_VOICE,
    VoiceInfo,
    list_voices,
    load_voice_info,
    resolve_voice,
    voices_home,
)

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
