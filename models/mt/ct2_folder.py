"""CTranslate2 MT model folders: family, languages and layout, read without loading weights.

How a folder's family is read (first match wins):

1. ``speechpipe.json`` in the folder: ``{"family": "marian"|"nllb"|"m2m100",
   "source_lang": "en", "target_lang": "fr"}`` (each language may also be a list);
2. ``source.spm`` + ``target.spm`` -> Marian (OPUS-MT);
3. one sentencepiece model (``sentencepiece.bpe.model``, ``spm.model`` ...) and the vocabulary:
   ``fra_Latn``-style tokens -> NLLB, ``__fr__``-style -> M2M-100, ``>>fra<<``-style -> Marian.

Marian's language pair comes from ``speechpipe.json``, else ``tokenizer_config.json``'s
``source_lang``/``target_lang`` (Hugging Face writes them), else an ``opus-mt-SRC-TGT`` folder
name. Multi-target Marian models pick the target with a ``>>xx<<`` token at the start of the
*source*; NLLB and M2M-100 force the target-language token as the first target token.

The tokenizer files are not copied by ``ct2-transformers-converter`` unless asked
(``--copy_files``); ``speechpipe models convert`` copies them.
"""

from __future__ import annotations

import enum
import json
import os
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speechpipe.errors import LanguageError, ModelError, UnknownModelError, echoed

__all__ = ["ModelFamily", "MtModelInfo", "inspect_mt_model", "WHISPER_LANGUAGES", "whisper_code"]


class ModelFamily(enum.StrEnum):
    """The CTranslate2 MT model families speechpipe can drive."""
    MARIAN = "marian"
    NLLB = "nllb"
    M2M100 = "m2m100"


@dataclass(frozen=True, slots=True)
class MtModelInfo:
    """What a folder holds, read without loading the weights.

    ``source_langs``/``target_langs`` are Whisper codes; ``None`` means "any" (e.g. a Marian
    model whose source is a language group such as ``mul`` or ``ROMANCE``).
    """

    path: Path
    family: ModelFamily
    source_langs: frozenset[str] | None
    target_langs: frozenset[str] | None
    size_bytes: int
    multi_target: bool = False


# --- language codes --------------------------------------------------------------------

# Whisper code -> (ISO 639-3, NLLB/FLORES-200 code or "" when NLLB lacks the language).
_LANGS: dict[str, tuple[str, str]] = {
    "en": ("eng", "eng_Latn"), "zh": ("zho", "zho_Hans"), "de": ("deu", "deu_Latn"),
    "es": ("spa", "spa_Latn"), "ru": ("rus", "rus_Cyrl"), "ko": ("kor", "kor_Hang"),
    "fr": ("fra", "fra_Latn"), "ja": ("jpn", "jpn_Jpan"), "pt": ("por", "por_Latn"),
    "tr": ("tur", "tur_Latn"), "pl": ("pol", "pol_Latn"), "ca": ("cat", "cat_Latn"),
    "nl": ("nld", "nld_Latn"), "ar": ("ara", "arb_Arab"), "sv": ("swe", "swe_Latn"),
    "it": ("ita", "ita_Latn"), "id": ("ind", "ind_Latn"), "hi": ("hin", "hin_Deva"),
    "fi": ("fin", "fin_Latn"), "vi": ("vie", "vie_Latn"), "he": ("heb", "heb_Hebr"),
    "uk": ("ukr", "ukr_Cyrl"), "el": ("ell", "ell_Grek"), "ms": ("msa", "zsm_Latn"),
    "cs": ("ces", "ces_Latn"), "ro": ("ron", "ron_Latn"), "da": ("dan", "dan_Latn"),
    "hu": ("hun", "hun_Latn"), "ta": ("tam", "tam_Taml"), "no": ("nor", "nob_Latn"),
    "th": ("tha", "tha_Thai"), "ur": ("urd", "urd_Arab"), "hr": ("hrv", "hrv_Latn"),
    "bg": ("bul", "bul_Cyrl"), "lt": ("lit", "lit_Latn"), "la": ("lat", ""),
    "mi": ("mri", "mri_Latn"), "ml": ("mal", "mal_Mlym"), "cy": ("cym", "cym_Latn"),
    "sk": ("slk", "slk_Latn"), "te": ("tel", "tel_Telu"), "fa": ("fas", "pes_Arab"),
    "lv": ("lav", "lvs_Latn"), "bn": ("ben", "ben_Beng"), "sr": ("srp", "srp_Cyrl"),
    "az": ("aze", "azj_Latn"), "sl": ("slv", "slv_Latn"), "kn": ("kan", "kan_Knda"),
    "et": ("est", "est_Latn"), "mk": ("mkd", "mkd_Cyrl"), "br": ("bre", ""),
    "eu": ("eus", "eus_Latn"), "is": ("isl", "isl_Latn"), "hy": ("hye", "hye_Armn"),
    "ne": ("nep", "npi_Deva"), "mn": ("mon", "khk_Cyrl"), "bs": ("bos", "bos_Latn"),
    "kk": ("kaz", "kaz_Cyrl"), "sq": ("sqi", "als_Latn"), "sw": ("swa", "swh_Latn"),
    "gl": ("glg", "glg_Latn"), "mr": ("mar", "mar_Deva"), "pa": ("pan", "pan_Guru"),
    "si": ("sin", "sin_Sinh"), "km": ("khm", "khm_Khmr"), "sn": ("sna", "sna_Latn"),
    "yo": ("yor", "yor_Latn"), "so": ("som", "som_Latn"), "af": ("afr", "afr_Latn"),
    "oc": ("oci", "oci_Latn"), "ka": ("kat", "kat_Geor"), "be": ("bel", "bel_Cyrl"),
    "tg": ("tgk", "tgk_Cyrl"), "sd": ("snd", "snd_Arab"), "gu": ("guj", "guj_Gujr"),
    "am": ("amh", "amh_Ethi"), "yi": ("yid", "ydd_Hebr"), "lo": ("lao", "lao_Laoo"),
    "uz": ("uzb", "uzn_Latn"), "fo": ("fao", "fao_Latn"), "ht": ("hat", "hat_Latn"),
    "ps": ("pus", "pbt_Arab"), "tk": ("tuk", "tuk_Latn"), "nn": ("nno", "nno_Latn"),
    "mt": ("mlt", "mlt_Latn"), "sa": ("san", "san_Deva"), "lb": ("ltz", "ltz_Latn"),
    "my": ("mya", "mya_Mymr"), "bo": ("bod", "bod_Tibt"), "tl": ("tgl", "tgl_Latn"),
    "mg": ("mlg", "plt_Latn"), "as": ("asm", "asm_Beng"), "tt": ("tat", "tat_Cyrl"),
    "haw": ("haw", ""), "ln": ("lin", "lin_Latn"), "ha": ("hau", "hau_Latn"),
    "ba": ("bak", "bak_Cyrl"), "jw": ("jav", "jav_Latn"), "su": ("sun", "sun_Latn"),
    "yue": ("yue", "yue_Hant"),
}
WHISPER_LANGUAGES = frozenset(_LANGS)
# Codes some models use for the same language (individual-language ISO codes, M2M's "jv").
_ALIASES: dict[str, tuple[str, ...]] = {
    "zh": ("cmn", "cmn_Hans", "zho_Hans", "zh_cn"), "ar": ("arb",), "fa": ("pes",),
    "ms": ("zsm",), "no": ("nob", "nb"), "lv": ("lvs",), "sq": ("als",), "sw": ("swh",),
    "ne": ("npi",), "mn": ("khk",), "az": ("azj",), "uz": ("uzn",), "ps": ("pbt",),
    "mg": ("plt",), "yi": ("ydd",), "jw": ("jv",), "he": ("iw",), "et": ("ekk",),
}
_ISO3_TO_WHISPER = {iso3: code for code, (iso3, _) in _LANGS.items()} | {
    alias: code for code, aliases in _ALIASES.items() for alias in aliases if len(alias) == 3
}
_NLLB_TOKEN = re.compile(r"^[a-z]{3}_[A-Z][a-z]{3}$")
_M2M_TOKEN = re.compile(r"^__[a-z]{2,3}__$")
_MARIAN_TOKEN = re.compile(r"^>>[A-Za-z]{2,3}(_[A-Za-z]+)?<<$")


def _whisper_code(code: str) -> str | None:
    """Map any code a user or model may use (``fr``, ``fra``, ``fr-FR``, ``fra_Latn``)."""
    code = code.strip()
    if code in _LANGS:
        return code
    base = code.replace("-", "_").split("_", 1)[0].lower()
    if base in _LANGS:
        return base
    if base in _ISO3_TO_WHISPER:
        return _ISO3_TO_WHISPER[base]
    for whisper, aliases in _ALIASES.items():
        if base in aliases:
            return whisper
    return None


def whisper_code(code: str) -> str | None:
    """The Whisper code for a language code a model or package declares, None if unknown."""
    return _whisper_code(code)


def _candidates(lang: str) -> list[str]:
    """Language codes to look for in a vocabulary, most specific first."""
    whisper = _whisper_code(lang)
    if whisper is None:
        return [lang]
    iso3, nllb = _LANGS[whisper]
    out = [lang, whisper, iso3, *([nllb] if nllb else []), *_ALIASES.get(whisper, ())]
    return list(dict.fromkeys(out))


# --- folder inspection -------------------------------------------------------------------

_SINGLE_SPM = ("sentencepiece.bpe.model", "spm.model", "sentencepiece.model", "tokenizer.model")
_META = "speechpipe.json"


def _spec_name(model_bin: Path) -> str:
    """The spec name in a CTranslate2 ``model.bin`` header (binary version, then the name)."""
    try:
        with open(model_bin, "rb") as f:
            head = f.read(4 + 2 + 256)
    except OSError as exc:
        raise ModelError(f"cannot read {model_bin}: {exc.strerror or exc}") from None
    if len(head) < 6:
        raise ModelError(f"{model_bin} is truncated: not a CTranslate2 model")
    (length,) = struct.unpack_from("H", head, 4)
    raw = head[6 : 6 + length]
    if length < 2 or len(raw) < length or raw[-1] != 0:
        raise ModelError(f"{model_bin} is not a CTranslate2 model file")
    try:
        return raw[:-1].decode("utf-8")
    except UnicodeDecodeError:
        raise ModelError(f"{model_bin} is not a CTranslate2 model file") from None


def _load_vocab(path: Path, side: str) -> list[str]:
    for stem in (f"{side}_vocabulary", "shared_vocabulary"):
        json_path, txt_path = path / f"{stem}.json", path / f"{stem}.txt"
        try:
            if json_path.is_file():
                tokens = json.loads(json_path.read_text(encoding="utf-8"))
                if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
                    raise ModelError(f"{json_path} is not a list of tokens")
                return tokens
            if txt_path.is_file():
                return txt_path.read_text(encoding="utf-8").split("\n")
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise ModelError(f"cannot read the vocabulary in {path}: {exc}") from None
    raise ModelError(
        f"{path} has no CTranslate2 vocabulary (shared_vocabulary.json or "
        "source_vocabulary.json + target_vocabulary.json)"
    )


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise ModelError(f"{path} is nested too deeply to be a model config") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ModelError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ModelError(f"{path} is not a JSON object")
    return data


def _folder_size(path: Path) -> int:
    total = 0
    for entry in path.iterdir():
        if entry.is_file():
            total += entry.stat().st_size
    return total


def _check_layout(path: Path) -> None:
    if not path.exists():
        raise UnknownModelError(f"MT model folder {path} does not exist")
    if not path.is_dir():
        raise UnknownModelError(
            f"MT model {path} is not a folder (pass the folder that holds model.bin)")
    if not os.access(path, os.R_OK | os.X_OK):
        raise ModelError(f"MT model folder {path} is not readable")
    if not (path / "model.bin").is_file():
        hf = _read_json(path / "config.json").get("model_type")
        if hf or any(path.glob("*.safetensors")) or (path / "pytorch_model.bin").exists():
            raise ModelError(
                f"{path} is a Hugging Face model ({hf or 'unknown type'}), not a CTranslate2 "
                f"one: convert it with `speechpipe models convert {path} --out DIR`"
            )
        raise ModelError(f"{path} is not a CTranslate2 model folder (no model.bin)")
    name = _spec_name(path / "model.bin")
    if name == "WhisperSpec":
        raise ModelError(
            f"{path} is a Whisper speech-recognition model, not a text translation model "
            "(use it for ASR with --asr-model)"
        )
    if name != "TransformerSpec":
        raise ModelError(
            f"{path} holds a CTranslate2 {name!r} model; text MT needs an encoder-decoder "
            "TransformerSpec (Marian/OPUS-MT, NLLB or M2M-100)"
        )


def _tokenizer_paths(path: Path, family: ModelFamily | None) -> tuple[Path, Path] | None:
    src, tgt = path / "source.spm", path / "target.spm"
    if src.is_file() and tgt.is_file() and family in (None, ModelFamily.MARIAN):
        return src, tgt
    for name in _SINGLE_SPM:
        if (path / name).is_file():
            return path / name, path / name
    if src.is_file():
        return src, tgt if tgt.is_file() else src
    return None


# what a declared language may look like: a code (``fr``, ``fra_Latn``, ``pt-BR``) or a group
# name (``mul``, ``ROMANCE``); anything else (``..``, ``../x``, a NUL) is refused, not read as
# "any language" (issue 74)
_DECLARED_CODE = re.compile(r"[A-Za-z]{2,10}(?:[-_][A-Za-z0-9]{2,8}){0,2}")


def _lang_set(value: object) -> frozenset[str] | None:
    """Languages declared in metadata: a code, a list of codes, or a group (-> None: any)."""
    values = value if isinstance(value, list) else [value]
    for v in values:
        if isinstance(v, str) and v and not _DECLARED_CODE.fullmatch(v):
            raise LanguageError(f"unusable language code {echoed(v)} in the model's metadata: "
                             "a language code such as fr or fra_Latn, or a group such as mul")
    codes = {_whisper_code(v) for v in values if isinstance(v, str) and v}
    if not codes or None in codes:
        return None
    return frozenset(c for c in codes if c is not None)


def _marian_pair(path: Path, meta: dict[str, Any]) -> tuple[object, object]:
    if "source_lang" in meta or "target_lang" in meta:
        return meta.get("source_lang"), meta.get("target_lang")
    tok = _read_json(path / "tokenizer_config.json")
    if tok.get("source_lang") or tok.get("target_lang"):
        return tok.get("source_lang"), tok.get("target_lang")
    match = re.search(r"opus-mt-(?:tc-[a-z]+-)?([A-Za-z_]+)-([A-Za-z_]+)$", path.name)
    if match:
        return match.group(1), match.group(2)
    return None, None


def _vocab_languages(vocab: Sequence[str], pattern: re.Pattern[str]) -> frozenset[str]:
    codes = set()
    for token in vocab:
        if pattern.match(token):
            code = _whisper_code(token.strip("_<>"))
            if code is not None:
                codes.add(code)
    return frozenset(codes)


def _detect(path: Path) -> tuple[MtModelInfo, dict[str, Any]]:
    _check_layout(path)
    meta = _read_json(path / _META)
    family: ModelFamily | None = None
    if "family" in meta:
        try:
            family = ModelFamily(str(meta["family"]).lower().replace("-", ""))
        except ValueError:
            raise ModelError(
                f"{path / _META}: unknown family {meta['family']!r} "
                f"(use one of {', '.join(f.value for f in ModelFamily)})"
            ) from None
    source_vocab = _load_vocab(path, "source")
    target_vocab = _load_vocab(path, "target")
    marian_tokens = sum(1 for t in source_vocab if _MARIAN_TOKEN.match(t))
    if family is None:
        if (path / "source.spm").is_file() and (path / "target.spm").is_file():
            family = ModelFamily.MARIAN
        elif sum(1 for t in target_vocab if _NLLB_TOKEN.match(t)) >= 2:
            family = ModelFamily.NLLB
        elif sum(1 for t in target_vocab if _M2M_TOKEN.match(t)) >= 2:
            family = ModelFamily.M2M100
        elif marian_tokens:
            family = ModelFamily.MARIAN
        else:
            raise ModelError(
                f"cannot tell which model family {path} is (no source.spm/target.spm and no "
                f"language tokens in its vocabulary); declare it in {_META}: "
                '{"family": "marian", "source_lang": "en", "target_lang": "fr"}'
            )
    if _tokenizer_paths(path, family) is None:
        raise ModelError(
            f"{path} has no sentencepiece tokenizer (source.spm + target.spm, or "
            "sentencepiece.bpe.model); copy it from the original model, e.g. "
            "ct2-transformers-converter --copy_files source.spm target.spm"
        )
    multi = False
    sources: frozenset[str] | None
    targets: frozenset[str] | None
    if family is ModelFamily.NLLB:
        sources = targets = _vocab_languages(target_vocab, _NLLB_TOKEN)
    elif family is ModelFamily.M2M100:
        sources = targets = _vocab_languages(target_vocab, _M2M_TOKEN)
    else:
        src, tgt = _marian_pair(path, meta)
        multi = marian_tokens > 0
        sources = _lang_set(src)
        if multi:
            targets = _vocab_languages(source_vocab, _MARIAN_TOKEN)
        else:
            targets = _lang_set(tgt)
            if targets is None:
                raise ModelError(
                    f"cannot tell the target language of Marian model {path}: add {_META} "
                    '{"source_lang": "en", "target_lang": "fr"} or tokenizer_config.json'
                )
    info = MtModelInfo(path, family, sources, targets, _folder_size(path), multi)
    return info, {"source_vocab": source_vocab, "target_vocab": target_vocab}


def inspect_mt_model(path: str | os.PathLike[str]) -> MtModelInfo:
    """Check a folder's layout and read its family and languages, without loading weights."""
    return _detect(Path(path).expanduser().resolve())[0]
