"""The ``espeak-ng`` engine: a robotic but intelligible voice for 100+ languages, no files.

Its voices are a catalogue, not files in the voice folders: one ``espeak-ng-LANG`` voice per
language espeak-ng speaks (read from its data folder's ``lang/`` voice files, so a newer
espeak-ng brings its new languages), the registry's last choice after every Piper voice.
Formant synthesis at 22,050 Hz; ``speed`` scales espeak-ng's words-per-minute rate (175 at
1.0). The library is espeak-ng's (``voices/espeak_library.py``); licence GPL-3.0-or-later.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from speechpipe.errors import VoiceError
from speechpipe.voices.espeak_library import (
    DEFAULT_RATE_WPM,
    EspeakLibrary,
    espeak_install,
    espeak_library,
)
from speechpipe.voices.registry import VoiceInfo

__all__ = ["ENGINE_NAME", "EspeakSynthesizer", "espeak_voices", "load_espeak",
           "voice_name", "PREFERRED_VOICES", "SAMPLE_RATE"]

ENGINE_NAME = "espeak-ng"
SAMPLE_RATE = 22_050
PREFERRED_VOICES = {"en": "en-US", "pt": "pt-BR"}
"""Voice files chosen over espeak-ng's own default for a language: American English (as
the built-in Piper voice speaks it), Brazilian Portuguese (most of the language's speakers
live in Brazil, and most of Piper's Portuguese voices are Brazilian)."""
_NOT_ISO_639_1 = frozenset({"py"})  # Pyash, a constructed language espeak-ng names "py"
_DEFAULT_PRIORITY = 5  # espeak-ng's priority of a ``language`` line that names none
_REGION = re.compile(r"[a-z]{2}|\d{3}")


def voice_name(lang: str) -> str:
    """The catalogue's name for ``lang``'s voice: ``espeak-ng-es``."""
    return f"{ENGINE_NAME}-{lang}"


@dataclass(frozen=True, slots=True)
class _VoiceFile:
    """One of espeak-ng's ``lang/`` voice files."""

    path: Path
    languages: tuple[tuple[str, int], ...]  # (tag such as "pt-br", priority), as written
    dictionary: str
    dict_min: int  # the smallest dictionary file espeak-ng speaks it with without complaint


def _read_voice_file(path: Path) -> _VoiceFile | None:
    languages: list[tuple[str, int]] = []
    dictionary, dict_min = "", 0
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        words = line.split()
        if len(words) >= 2 and words[0] == "language":
            priority = int(words[2]) if len(words) > 2 and words[2].isdigit() else None
            languages.append((words[1].lower(), priority or _DEFAULT_PRIORITY))
        elif len(words) >= 2 and words[0] == "dictionary":
            dictionary = words[1]
        elif len(words) >= 2 and words[0] == "dict_min" and words[1].isdigit():
            dict_min = int(words[1])
    if not languages:
        return None
    # espeak-ng's rule: the dictionary is named by the first language, unless one is named
    return _VoiceFile(path, tuple(languages), dictionary or languages[0][0].split("-")[0],
                      dict_min)


def _speaks_quietly(data: Path, voice: _VoiceFile) -> bool:
    """Whether its dictionary is there in full: espeak-ng prints to stderr when a voice's
    dictionary is missing or under its ``dict_min`` (Debian's Belarusian), so those voices
    are not offered."""
    try:
        return (data / f"{voice.dictionary}_dict").stat().st_size >= voice.dict_min
    except OSError:
        return False


def _offered(lang: str, whisper: frozenset[str]) -> bool:
    """A language the catalogue offers: an ISO 639-1 code, or one of Whisper's (haw, yue)."""
    return (lang.isascii() and lang.isalpha() and lang not in _NOT_ISO_639_1
            and (len(lang) == 2 or lang in whisper))


def _choose(lang: str, files: list[_VoiceFile]) -> _VoiceFile:
    preferred = PREFERRED_VOICES.get(lang)
    for voice in files:
        if voice.path.name == preferred:
            return voice

    def rank(voice: _VoiceFile) -> tuple[bool, int, int, str]:
        exact = [p for tag, p in voice.languages if tag == lang]
        regional = [p for tag, p in voice.languages if tag.split("-")[0] == lang]
        return (not exact, min(exact or regional), len(voice.path.name), voice.path.name)

    return min(files, key=rank)


def _locale(lang: str, voice: _VoiceFile) -> str:
    """``pt_BR`` for the Brazilian voice, ``es`` for Spanish (Spain's voice names no region)."""
    for tag, _ in voice.languages:
        base, _, region = tag.partition("-")
        if base == lang and _REGION.fullmatch(region):
            return f"{lang}_{region.upper()}"
    return lang


@functools.cache
def _catalogue(data: Path) -> tuple[VoiceInfo, ...]:
    from speechpipe.models.whisper.prompts import WHISPER_LANGUAGES

    whisper = frozenset(WHISPER_LANGUAGES)
    by_lang: dict[str, list[_VoiceFile]] = {}
    for path in sorted((data / "lang").rglob("*")):
        voice = _read_voice_file(path) if path.is_file() else None
        if voice is None or not _speaks_quietly(data, voice):
            continue
        for tag, _ in voice.languages:
            lang = tag.split("-")[0]
            if _offered(lang, whisper) and voice not in by_lang.setdefault(lang, []):
                by_lang[lang].append(voice)
    voices = []
    for lang, files in sorted(by_lang.items()):
        chosen = _choose(lang, files)
        voices.append(VoiceInfo(
            name=voice_name(lang), lang=lang, locale=_locale(lang, chosen),
            sample_rate=SAMPLE_RATE, model_path=data / f"{chosen.dictionary}_dict",
            config_path=chosen.path, source=ENGINE_NAME, engine=ENGINE_NAME,
        ))
    return tuple(voices)


def espeak_voices() -> list[VoiceInfo]:
    """The catalogue: one voice per language espeak-ng speaks (``model_path``: its
    dictionary, ``config_path``: its voice file); empty when espeak-ng is not installed.
    Reads the data folder once per process and loads no library."""
    install = espeak_install()
    return list(_catalogue(install.data)) if install is not None else []


def _speakable(text: str) -> str:
    """``text`` with control characters (espeak-ng reads U+0001 as the start of a command),
    unpaired surrogates, private-use and unassigned code points made spaces."""
    kept = "".join(" " if unicodedata.category(c) in ("Cc", "Cs", "Co", "Cn") else c
                   for c in text)
    return " ".join(kept.split())


class EspeakSynthesizer:
    """One espeak-ng voice: text in, int16 mono samples at ``sample_rate`` out. Thread-safe
    (the library's lock); the voice is set again before each synthesis if another spoke."""

    def __init__(self, voice: str, library: EspeakLibrary,
                 rate_wpm: int = DEFAULT_RATE_WPM) -> None:
        self.voice = voice  # espeak-ng's voice file id, e.g. "roa/pt-BR"
        self.rate_wpm = rate_wpm  # at speed 1.0
        self._library = library
        library.check_voice(voice)

    @property
    def sample_rate(self) -> int:
        """espeak-ng's native rate (22,050 Hz)."""
        return self._library.sample_rate

    def synthesize(self, text: str, speed: float = 1.0) -> NDArray[np.int16]:
        """Speak ``text``; ``speed`` > 1 speaks faster. Empty when there is nothing to say."""
        text = _speakable(text)
        if not any(c.isalnum() for c in text):
            return np.zeros(0, dtype=np.int16)
        speed = speed if math.isfinite(speed) and speed > 0 else 1.0
        samples = self._library.speak(self.voice, text, round(self.rate_wpm * speed))
        return samples if samples.any() else samples[:0]


def load_espeak(voice: VoiceInfo, options: object = None) -> EspeakSynthesizer:
    """The ``espeak-ng`` engine's loader (``voices/engines.py``): a catalogue voice, whose
    ``config_path`` is an espeak-ng voice file under the data folder's ``lang/``."""
    library = espeak_library()
    voices = library.install.data / "lang"
    try:
        voice_id = voice.config_path.resolve().relative_to(voices.resolve()).as_posix()
    except ValueError:
        raise VoiceError(f"voice {voice.name!r} is not one of espeak-ng's voices "
                         "(its voices come from its catalogue, not voice files)") from None
    rate = getattr(options, "rate_wpm", DEFAULT_RATE_WPM)  # EspeakOptions, the espeak group
    variant = getattr(options, "variant", "")
    if variant and not (library.install.data / "voices" / "!v" / variant).is_file():
        raise VoiceError(f"espeak-ng has no voice variant {variant!r} (espeak.variant: "
                         "m1-m7, f1-f5, klatt, ...; empty for none)")
    return EspeakSynthesizer(f"{voice_id}+{variant}" if variant else voice_id, library, rate)
