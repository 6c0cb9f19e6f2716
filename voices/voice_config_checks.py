"""What a voice's ``.onnx.json`` may hand its engine: every name and number checked where the
config is read (listing, ``models add``/``models pull``, the load), before any engine sees it.

Piper passes ``espeak.voice`` to espeak-ng, which opens a voice *file* by that name: a relative
path such as ``../../../../dev/zero`` made a session spin forever (deaf to SIGTERM), and
``/etc/passwd`` gave silence with exit 0. So the name must look like an espeak-ng voice
(``en-us``, ``es``, ``pt-br``, ``en-gb-x-rp``, an optional ``+variant``) and be one of the voices
in Piper's own ``espeak-ng-data`` (its ``lang/`` tree and ``voices/!v`` variants). A sample rate
of 1 Hz made the resampler ask for gigabytes, 1e12 Hz gave silence: rates, speaker counts,
symbol tables and the inference scales are held to what real voices use.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import re
from pathlib import Path

from speechpipe.errors import UnsafeVoiceError, VoiceError

__all__ = [
    "SAMPLE_RATES",
    "check_sample_rate",
    "check_piper_config",
    "check_piper_voice",
    "espeak_voice_known",
    "piper_espeak_data",
]

SAMPLE_RATES = (8_000, 48_000)
"""The sample rates a voice may declare (Piper's are 16000 and 22050; 44100/48000 exist)."""
MAX_SYMBOLS = 65_536
MAX_SPEAKERS = 10_000  # Piper's libritts voice has 904
MAX_IDS_PER_PHONEME = 16
MAX_VOWEL_CLUSTERS = 1024
MAX_HOP_LENGTH = 4096
_SCALES = {  # inference.KEY -> (lowest, highest); Piper's defaults 0.667, 1.0, 0.8
    "noise_scale": (0.0, 4.0),
    "length_scale": (0.05, 10.0),
    "noise_w": (0.0, 4.0),
}
_PHONEME_TYPES = frozenset({"espeak", "text", "pinyin", "hebrew", "japanese", "thai"})
_ESPEAK_VOICE = re.compile(r"[a-z]{2,3}(-[a-z0-9]{1,8}){0,4}(\+[A-Za-z0-9_]{1,32})?")
_SHOWN = 80


# a voice's ``language.code`` / ``family``: es, es_ES, cmn, sr-Latn (issue 74 review)
_LANGUAGE_CODE = re.compile(r"[A-Za-z]{2,3}(?:[_-][A-Za-z0-9]{2,8})?")


def _show(value: object) -> str:
    """A value for a one-line refusal: its repr, capped."""
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "...'"


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _int_in(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def check_sample_rate(value: object, name: str, where: Path) -> int:
    """``audio.sample_rate`` as an int within ``SAMPLE_RATES`` (any engine's voice)."""
    low, high = SAMPLE_RATES
    if not _int_in(value, low, high):
        raise UnsafeVoiceError(
            f"voice {name!r}: {where} has audio.sample_rate {_show(value)}, not a whole "
            f"number of Hz from {low} to {high}"
        )
    assert isinstance(value, int)
    return value


def piper_espeak_data() -> Path | None:
    """Piper's bundled ``espeak-ng-data`` (found without importing piper), or None."""
    try:
        spec = importlib.util.find_spec("piper")
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        data = Path(location) / "espeak-ng-data"
        if (data / "lang").is_dir():
            return data
    return None


@functools.lru_cache(maxsize=4)
def _espeak_names(data: Path) -> tuple[frozenset[str], frozenset[str]]:
    """(voice names, variant names) of an espeak-ng data folder: every file of ``lang/`` by
    its file name and the ``language`` codes it declares (lower case), and ``voices/!v``."""
    names: set[str] = set()
    for path in (data / "lang").rglob("*"):
        if not path.is_file():
            continue
        names.add(path.name.lower())
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                head = f.read(4096)
        except OSError:
            continue
        for line in head.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "language":
                names.add(parts[1].lower())
    variants_dir = data / "voices" / "!v"
    variants = {p.name for p in variants_dir.iterdir() if p.is_file()} if (
        variants_dir.is_dir()) else set()
    return frozenset(names), frozenset(variants)


def espeak_voice_known(voice: str, data: Path | None) -> bool:
    """Whether ``voice`` is an espeak-ng voice name (never a path) of ``data`` (when there is
    no data folder to look in, the name's shape alone decides: nothing can speak it anyway)."""
    if not _ESPEAK_VOICE.fullmatch(voice):
        return False
    if data is None:
        return True
    base, _, variant = voice.partition("+")
    names, variants = _espeak_names(data)
    return base in names and (not variant or variant in variants)


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check_piper_voice(config: dict[str, object], name: str, where: Path) -> None:
    """A Piper voice file's config, before anything loads it (the Piper row's
    ``config_check``, ``voices.engines``): ``VoiceError`` when it lacks what Piper needs
    (``num_symbols``, ``num_speakers``, a ``phoneme_id_map`` of phonemes to id lists), then
    ``check_piper_config``."""
    for key in ("num_symbols", "num_speakers"):
        if not _positive_int(config.get(key)):
            raise VoiceError(f"voice {name!r}: {where} has no valid {key}")
    ids = config.get("phoneme_id_map")
    if not isinstance(ids, dict) or not ids or not all(
        isinstance(phoneme, str) and isinstance(values, list)
        and all(_positive_int(v) or v == 0 for v in values)
        for phoneme, values in ids.items()
    ):
        raise VoiceError(
            f"voice {name!r}: {where} has no valid phoneme_id_map (phoneme -> id list)"
        )
    check_piper_config(config, name, where)  # espeak.voice, ranges: hostile values


def check_piper_config(config: dict[str, object], name: str, where: Path) -> None:
    """Refuse (``UnsafeVoiceError``) a Piper config whose names or numbers are not what a
    real voice holds. Shape (``num_symbols`` present, ``phoneme_id_map`` a map of id lists)
    is checked by the caller first."""

    def refuse(what: str) -> UnsafeVoiceError:
        return UnsafeVoiceError(f"voice {name!r}: {where} has {what}")

    phoneme_type = config.get("phoneme_type", "espeak")
    if phoneme_type not in _PHONEME_TYPES:
        raise refuse(f"phoneme_type {_show(phoneme_type)} (Piper knows "
                     f"{', '.join(sorted(_PHONEME_TYPES))})")
    espeak = config.get("espeak")
    voice = espeak.get("voice") if isinstance(espeak, dict) else None
    data = piper_espeak_data() if phoneme_type == "espeak" else None
    # a missing one is damage, not a hostile value: Piper's loader says "unusable config"
    if voice is not None and (not isinstance(voice, str) or not espeak_voice_known(voice, data)):
        raise refuse(f"espeak.voice {_show(voice)}, not an espeak-ng voice name "
                     "(such as en-us, es, fr-fr)")
    language = config.get("language")
    codes = ([language.get("code"), language.get("family")] if isinstance(language, dict)
             else [])
    for code in codes:  # the voice's language picks routes and the default voice
        if code is not None and not (isinstance(code, str)
                                     and _LANGUAGE_CODE.fullmatch(code)):
            raise refuse(f"language {_show(code)}, not a language code (such as es or es_ES)")
    num_symbols, num_speakers = config.get("num_symbols"), config.get("num_speakers")
    if not _int_in(num_symbols, 1, MAX_SYMBOLS):
        raise refuse(f"num_symbols {_show(num_symbols)}, not 1 to {MAX_SYMBOLS}")
    if not _int_in(num_speakers, 1, MAX_SPEAKERS):
        raise refuse(f"num_speakers {_show(num_speakers)}, not 1 to {MAX_SPEAKERS}")
    assert isinstance(num_symbols, int) and isinstance(num_speakers, int)
    ids = config.get("phoneme_id_map")
    if isinstance(ids, dict):
        if len(ids) > MAX_SYMBOLS:
            raise refuse(f"{len(ids)} phonemes in phoneme_id_map, over {MAX_SYMBOLS}")
        for phoneme, values in ids.items():
            if len(values) > MAX_IDS_PER_PHONEME or not all(
                    _int_in(v, 0, num_symbols - 1) for v in values):
                raise refuse(f"phoneme_id_map[{_show(phoneme)}] = {_show(values)}: ids must "
                             f"be 0 to num_symbols - 1 ({num_symbols - 1}), at most "
                             f"{MAX_IDS_PER_PHONEME}")
    phoneme_map = config.get("phoneme_map", {})
    if not isinstance(phoneme_map, dict) or len(phoneme_map) > MAX_SYMBOLS:
        raise refuse(f"a phoneme_map that is not a map of at most {MAX_SYMBOLS} phonemes")
    inference = config.get("inference", {})
    if not isinstance(inference, dict):
        raise refuse(f"inference {_show(inference)}, not an object")
    for key, (low, high) in _SCALES.items():
        value = inference.get(key)
        if value is not None and not (_number(value) and low <= value <= high):
            raise refuse(f"inference.{key} {_show(value)}, not a number from {low} to {high}")
    hop = config.get("hop_length", 256)
    if not _int_in(hop, 1, MAX_HOP_LENGTH):
        raise refuse(f"hop_length {_show(hop)}, not 1 to {MAX_HOP_LENGTH}")
    speakers = config.get("speaker_id_map", {})
    if not isinstance(speakers, dict) or len(speakers) > num_speakers or not all(
            _int_in(v, 0, num_speakers - 1) for v in speakers.values()):
        raise refuse(f"a speaker_id_map that is not a map of speakers to ids 0 to "
                     f"num_speakers - 1 ({num_speakers - 1})")
    default = config.get("default_speaker_id", 0)
    if not _int_in(default, 0, num_speakers - 1):
        raise refuse(f"default_speaker_id {_show(default)}, not 0 to {num_speakers - 1}")
    clusters = config.get("vowel_clusters") or []  # Piper reads a missing one as {}
    if not isinstance(clusters, list) or len(clusters) > MAX_VOWEL_CLUSTERS or not all(
            isinstance(c, list) and 1 <= len(c) <= 8 and all(isinstance(p, str) for p in c)
            for c in clusters):
        raise refuse(f"vowel_clusters that are not at most {MAX_VOWEL_CLUSTERS} lists of "
                     "1 to 8 phonemes")
