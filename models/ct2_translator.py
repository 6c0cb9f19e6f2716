"""Bring-your-own text MT: CTranslate2 Marian/OPUS-MT, NLLB and M2M-100 models.

``Ct2TextTranslator`` (sync) loads a converted model folder, works out its family from what is
in it, maps Whisper's language codes to the family's tokens and runs prefix-constrained
``translate_batch``. ``Ct2TranslationWorker`` is the async front that many sessions share: it
micro-batches requests that arrive together into one ``translate_batch`` on a dedicated thread.

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

import asyncio
import collections
import concurrent.futures
import enum
import json
import os
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal, overload

from speechpipe.errors import InputError, LanguageError, ModelError, SpeechpipeError, WorkerError

__all__ = [
    "ModelFamily",
    "MtModelInfo",
    "Ct2Options",
    "TextMtRequest",
    "TextMtResult",
    "Ct2TextTranslator",
    "Ct2TranslationWorker",
    "inspect_mt_model",
    "WHISPER_LANGUAGES",
]


class ModelFamily(enum.StrEnum):
    MARIAN = "marian"
    NLLB = "nllb"
    M2M100 = "m2m100"


@dataclass(frozen=True, slots=True)
class TextMtRequest:
    """Translate ``source_text``, forcing the output to start with ``target_prefix``."""

    source_text: str
    source_lang: str
    target_lang: str
    target_prefix: str = ""
    beam_size: int = 1


@dataclass(frozen=True, slots=True)
class TextMtResult:
    """``text`` is the whole translation as the tokenizer decodes it (prefix included);
    ``continuation`` is what follows the forced prefix, without its leading space.

    ``joins_prefix`` is true when the model went on *inside* the prefix's last word (the first
    new piece has no word-boundary marker), e.g. prefix ``Hal`` + ``lo``. Token counts measure
    the work done: source tokens encoded, prefix tokens forced, new tokens generated.
    """

    text: str
    continuation: str
    joins_prefix: bool = False
    source_tokens: int = 0
    prefix_tokens: int = 0
    generated_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Ct2Options:
    """Decoding limits. The length cap guards against a model that never emits ``</s>``:
    a target of at most ``length_ratio * source tokens + length_slack`` tokens (at most
    ``max_target_tokens``), prefix included, but always room for ``min_new_tokens`` after it."""

    length_ratio: float = 1.5
    length_slack: int = 10
    max_target_tokens: int = 256
    min_new_tokens: int = 8
    max_input_tokens: int = 1024


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
        except (OSError, UnicodeDecodeError, ValueError) as exc:
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
        raise ModelError(f"MT model folder {path} does not exist")
    if not path.is_dir():
        raise ModelError(f"MT model {path} is not a folder (pass the folder that holds model.bin)")
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


def _lang_set(value: object) -> frozenset[str] | None:
    """Languages declared in metadata: a code, a list of codes, or a group (-> None: any)."""
    values = value if isinstance(value, list) else [value]
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


# --- the translator --------------------------------------------------------------------

_MIN_COVERAGE = 0.9


def _load_spm(path: Path) -> Any:
    try:
        import sentencepiece
    except ImportError:
        raise ModelError(
            "CTranslate2 text MT needs the sentencepiece package: pip install sentencepiece"
        ) from None
    try:
        return sentencepiece.SentencePieceProcessor(model_file=str(path))
    except (OSError, RuntimeError) as exc:
        raise ModelError(f"{path} is not a sentencepiece model ({exc})") from None


def _normal_pieces(sp: Any) -> list[str]:
    return [
        sp.id_to_piece(i)
        for i in range(sp.get_piece_size())
        if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i))
    ]


def _check_coverage(sp_path: Path, pieces: list[str], vocab: set[str], side: str) -> None:
    if not pieces:
        raise ModelError(f"{sp_path} has no pieces")
    step = max(1, len(pieces) // 5000)
    sample = pieces[::step]
    coverage = sum(1 for p in sample if p in vocab) / len(sample)
    if coverage < _MIN_COVERAGE:
        raise ModelError(
            f"tokenizer {sp_path.name} does not match the model's {side} vocabulary "
            f"(only {coverage:.0%} of its pieces are in it); was it copied from another model?"
        )


@dataclass(frozen=True, slots=True)
class _Prepared:
    source: list[str]
    prefix: list[str]
    prefix_text: str
    lang_tokens: int
    max_length: int
    beam_size: int


class Ct2TextTranslator:
    """A loaded CTranslate2 MT model with its tokenizers. Thread-safe; blocking."""

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        *,
        model_id: str | None = None,
        device: str = "cpu",
        compute_type: str = "default",
        intra_threads: int = 0,
        inter_threads: int = 1,
        options: Ct2Options | None = None,
    ) -> None:
        path = Path(model_dir).expanduser().resolve()
        self.info, vocabs = _detect(path)
        self.path = path
        self.family = self.info.family
        self.model_id = model_id or str(path)
        self.options = options or Ct2Options()
        self.batch_calls = 0
        src_path, tgt_path = _tokenizer_paths(path, self.family)  # type: ignore[misc]
        self._src_sp = _load_spm(src_path)
        self._tgt_sp = self._src_sp if tgt_path == src_path else _load_spm(tgt_path)
        self._source_vocab = set(vocabs["source_vocab"])
        self._target_vocab = set(vocabs["target_vocab"])
        _check_coverage(src_path, _normal_pieces(self._src_sp), self._source_vocab, "source")
        target_pieces = _normal_pieces(self._tgt_sp)
        _check_coverage(tgt_path, target_pieces, self._target_vocab, "target")
        self._target_pieces = frozenset(target_pieces)
        config = _read_json(path / "config.json")
        self._append_eos = not config.get("add_source_eos", False)
        self._eos = str(config.get("eos_token") or "</s>")
        try:
            import ctranslate2

            self._translator = ctranslate2.Translator(
                str(path),
                device=device,
                compute_type=compute_type,
                intra_threads=intra_threads,
                inter_threads=inter_threads,
            )
        except ImportError:
            raise ModelError("CTranslate2 text MT needs the ctranslate2 package") from None
        except (RuntimeError, ValueError, OSError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelError(f"CTranslate2 cannot load {path}: {first}") from None

    # -- languages

    def _token(self, lang: str, vocab: set[str], form: str, pattern: re.Pattern[str]) -> str | None:
        for code in _candidates(lang):
            token = form.format(code)
            if token in vocab and pattern.match(token):
                return token
        return None

    def _pair_tokens(self, lang: str, vocab: set[str]) -> str | None:
        if self.family is ModelFamily.NLLB:
            return self._token(lang, vocab, "{}", _NLLB_TOKEN)
        if self.family is ModelFamily.M2M100:
            return self._token(lang, vocab, "__{}__", _M2M_TOKEN)
        return self._token(lang, vocab, ">>{}<<", _MARIAN_TOKEN)

    def language_tokens(self, source_lang: str, target_lang: str) -> tuple[str | None, str | None]:
        """Tokens that select the pair: (source token, target token), ``None`` where the
        family needs none. Raises ``LanguageError`` for an unsupported pair.

        NLLB/M2M-100 need the source language; a Marian model with a single source language
        (or a group such as ``mul``) accepts ``auto``.
        """
        name = self.path.name
        known_source = bool(source_lang) and source_lang != "auto"
        if self.family is not ModelFamily.MARIAN:
            if not known_source:
                raise LanguageError(
                    f"MT model {name} ({self.family}) needs the source language, got "
                    f"{source_lang or 'none'}"
                )
            src_token = self._pair_tokens(source_lang, self._source_vocab)
            if src_token is None:
                raise LanguageError(
                    f"MT model {name} ({self.family}) cannot translate from {source_lang!r}"
                )
            tgt_token = self._pair_tokens(target_lang, self._target_vocab)
            if tgt_token is None:
                raise LanguageError(
                    f"MT model {name} ({self.family}) cannot translate into {target_lang!r}"
                )
            return src_token, tgt_token
        sources = self.info.source_langs
        if known_source and _whisper_code(source_lang) is None:
            raise LanguageError(f"unknown source language {source_lang!r}")
        if sources is not None:
            listed = ", ".join(sorted(sources))
            if known_source and _whisper_code(source_lang) not in sources:
                raise LanguageError(
                    f"MT model {name} translates from {listed}, not {source_lang!r}"
                )
            if not known_source and len(sources) > 1:
                raise LanguageError(
                    f"MT model {name} needs the source language (one of {listed}), got "
                    f"{source_lang or 'none'}"
                )
        targets = ", ".join(sorted(self.info.target_langs or ()))
        if self.info.multi_target:
            token = self._pair_tokens(target_lang, self._source_vocab)
            if token is None:
                raise LanguageError(
                    f"MT model {name} cannot translate into {target_lang!r} (targets: {targets})"
                )
            return None, token
        if _whisper_code(target_lang) not in (self.info.target_langs or ()):
            raise LanguageError(f"MT model {name} translates into {targets}, not {target_lang!r}")
        return None, None

    def check_languages(self, source_lang: str, target_lang: str) -> None:
        """Raise ``LanguageError`` unless the model can translate this pair.

        With ``source_lang="auto"`` only the target is checked here; the language Whisper
        detects is checked when its text is translated.
        """
        if source_lang and source_lang != "auto":
            self.language_tokens(source_lang, target_lang)
        elif self.family is ModelFamily.MARIAN:
            sources = sorted(self.info.source_langs or ())
            self.language_tokens(sources[0] if len(sources) > 1 else "", target_lang)
        elif self._pair_tokens(target_lang, self._target_vocab) is None:
            raise LanguageError(
                f"MT model {self.path.name} ({self.family}) cannot translate into "
                f"{target_lang!r}"
            )

    # -- translation

    def _prepare(self, request: TextMtRequest) -> _Prepared:
        if request.beam_size < 1:
            raise InputError("beam_size must be >= 1")
        src_token, tgt_token = self.language_tokens(request.source_lang, request.target_lang)
        source = list(self._src_sp.encode(request.source_text, out_type=str))
        limit = self.options.max_input_tokens - 2
        source = source[:limit]
        if self.family is ModelFamily.MARIAN:
            source = ([tgt_token] if tgt_token else []) + source
        elif src_token:
            source = [src_token, *source]
        if self._append_eos:
            source.append(self._eos)
        prefix_pieces = list(self._tgt_sp.encode(request.target_prefix.strip(), out_type=str))
        lang_prefix = [tgt_token] if tgt_token and self.family is not ModelFamily.MARIAN else []
        opts = self.options
        budget = min(
            opts.max_target_tokens, int(opts.length_ratio * len(source)) + opts.length_slack
        )
        prefix = lang_prefix + prefix_pieces
        return _Prepared(
            source=source,
            prefix=prefix,
            prefix_text=self._decode(prefix_pieces),
            lang_tokens=len(lang_prefix),
            # The cap counts the forced prefix, so forcing tokens greedy decoding would have
            # produced anyway yields the same output as not forcing them.
            max_length=max(len(lang_prefix) + budget, len(prefix) + opts.min_new_tokens),
            beam_size=request.beam_size,
        )

    def _decode(self, tokens: Sequence[str]) -> str:
        pieces = [t for t in tokens if t in self._target_pieces]
        return str(self._tgt_sp.decode_pieces(pieces)) if pieces else ""

    def _result(self, prepared: _Prepared, tokens: Sequence[str]) -> TextMtResult:
        generated = list(tokens[len(prepared.prefix) :])
        full = self._decode(list(tokens[prepared.lang_tokens :]))
        prefix_text = prepared.prefix_text
        if prefix_text and full.startswith(prefix_text):
            rest = full[len(prefix_text) :]
            joins = bool(rest) and not rest[0].isspace()
        else:
            rest, joins = self._decode(generated), False
        return TextMtResult(
            text=full,
            continuation=rest.strip(),
            joins_prefix=joins and bool(prefix_text),
            source_tokens=len(prepared.source),
            prefix_tokens=len(prepared.prefix),
            generated_tokens=len(generated),
        )

    def _run(self, batch: list[_Prepared]) -> list[list[str]]:
        # Greedy hypotheses under a longer length cap start with the shorter-cap ones, so
        # greedy requests share a call and are trimmed to their own cap; beam search picks
        # differently under another cap, so its requests are grouped by cap as well.
        groups: dict[tuple[int, int], list[int]] = collections.defaultdict(list)
        for i, p in enumerate(batch):
            groups[(p.beam_size, 0 if p.beam_size == 1 else p.max_length)].append(i)
        hyps: dict[int, list[str]] = {}
        for (beam, _), indexes in groups.items():
            group = [batch[i] for i in indexes]
            self.batch_calls += 1
            results = self._translator.translate_batch(
                [p.source for p in group],
                target_prefix=[p.prefix or None for p in group],
                beam_size=beam,
                max_decoding_length=max(p.max_length for p in group),
                max_input_length=self.options.max_input_tokens,
                disable_unk=True,
            )
            for i, p, r in zip(indexes, group, results, strict=True):
                hyps[i] = list(r.hypotheses[0])[: p.max_length]
        return [hyps[i] for i in range(len(batch))]

    @overload
    def translate_batch(
        self, requests: Sequence[TextMtRequest], *, return_exceptions: Literal[False] = False
    ) -> list[TextMtResult]: ...

    @overload
    def translate_batch(
        self, requests: Sequence[TextMtRequest], *, return_exceptions: Literal[True]
    ) -> list[TextMtResult | SpeechpipeError]: ...

    def translate_batch(
        self, requests: Sequence[TextMtRequest], *, return_exceptions: bool = False
    ) -> list[TextMtResult] | list[TextMtResult | SpeechpipeError]:
        """Translate requests together (one ``translate_batch`` per beam size; per beam size
        and length cap for beam search).

        With ``return_exceptions``, a bad request (``LanguageError``...) or a request the engine
        fails on yields its exception in its slot and the others still get results, the way
        ``asyncio.gather(return_exceptions=True)`` does; otherwise the first error is raised.
        """
        outcomes: list[TextMtResult | SpeechpipeError | None] = [None] * len(requests)
        prepared: list[tuple[int, _Prepared]] = []
        for i, request in enumerate(requests):
            try:
                prepared.append((i, self._prepare(request)))
            except SpeechpipeError as exc:
                if not return_exceptions:
                    raise
                outcomes[i] = exc
        if prepared:
            try:
                tokens = self._run([p for _, p in prepared])
            except (RuntimeError, ValueError) as exc:
                if not return_exceptions:
                    raise WorkerError(f"text MT failed: {exc}") from exc
                tokens = None
            if tokens is None:
                # Isolate the failure: retry one by one so only the bad request fails.
                for i, p in prepared:
                    try:
                        outcomes[i] = self._result(p, self._run([p])[0])
                    except (RuntimeError, ValueError) as exc:
                        outcomes[i] = WorkerError(f"text MT failed: {exc}")
            else:
                for (i, p), toks in zip(prepared, tokens, strict=True):
                    outcomes[i] = self._result(p, toks)
        return outcomes  # type: ignore[return-value]

    def translate(self, request: TextMtRequest) -> TextMtResult:
        return self.translate_batch([request])[0]


# --- the shared async worker -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Queued:
    request: TextMtRequest
    future: asyncio.Future[TextMtResult]
    queued_at: float


def _fail_future(future: asyncio.Future[TextMtResult]) -> None:
    if not future.done():
        future.set_exception(WorkerError("the translation worker restarted"))


class Ct2TranslationWorker:
    """Micro-batches requests from many sessions into one ``translate_batch`` call.

    Requests arriving within ``window_s`` of the first queued one (or until ``max_batch``
    are queued) run together on one dedicated thread, so the event loop never blocks and
    the model never runs two batches at once. Each caller awaits its own future; an error
    reaches only the requests it concerns. At most ``max_pending`` requests wait; further
    callers wait for room (backpressure, not memory).

    Cancel-safety: cancelling ``translate`` drops the request if it has not started; a
    request already running completes and its result is discarded.
    """

    def __init__(
        self,
        translator: Ct2TextTranslator,
        *,
        max_batch: int = 16,
        window_s: float = 0.010,
        max_pending: int = 256,
    ) -> None:
        if max_batch < 1 or max_pending < 1:
            raise ValueError("max_batch and max_pending must be >= 1")
        self.translator = translator
        self.max_batch = max_batch
        self.window_s = window_s
        self.max_pending = max_pending
        self.batches = 0
        self.requests = 0
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ct2-mt")
        self._pending: collections.deque[_Queued] = collections.deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Event | None = None
        self._room: asyncio.Semaphore | None = None
        self._closed = False

    @property
    def model_id(self) -> str:
        return self.translator.model_id

    def check_languages(self, source_lang: str, target_lang: str) -> None:
        self.translator.check_languages(source_lang, target_lang)

    def _ensure_running(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._task is None or self._task.done():
            # First use, or a new event loop: whatever was queued on the old one is lost.
            while self._pending:
                future = self._pending.popleft().future
                if not future.get_loop().is_closed():
                    future.get_loop().call_soon_threadsafe(_fail_future, future)
            self._loop = loop
            self._wakeup = asyncio.Event()
            self._room = asyncio.Semaphore(self.max_pending)
            self._task = loop.create_task(self._serve(), name="ct2-mt-worker")

    async def translate(self, request: TextMtRequest) -> TextMtResult:
        if self._closed:
            raise WorkerError("the translation worker is closed")
        self._ensure_running()
        assert self._room is not None and self._wakeup is not None and self._loop is not None
        async with self._room:
            future: asyncio.Future[TextMtResult] = self._loop.create_future()
            self._pending.append(_Queued(request, future, self._loop.time()))
            self._wakeup.set()
            return await future

    async def _serve(self) -> None:
        assert self._wakeup is not None and self._loop is not None
        while True:
            await self._wakeup.wait()
            if self._pending and len(self._pending) < self.max_batch:
                # Wait out the window from the oldest request's arrival, not from now, so
                # requests left over from a full batch do not wait twice.
                delay = self._pending[0].queued_at + self.window_s - self._loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            batch = []
            while self._pending and len(batch) < self.max_batch:
                queued = self._pending.popleft()
                if not queued.future.done():
                    batch.append((queued.request, queued.future))
            if not self._pending:
                self._wakeup.clear()
            if not batch:
                continue
            call = partial(
                self.translator.translate_batch, [r for r, _ in batch], return_exceptions=True
            )
            try:
                outcomes = await self._loop.run_in_executor(self._executor, call)
            except asyncio.CancelledError:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(WorkerError("the translation worker was stopped"))
                raise
            except Exception as exc:  # a bug in the worker: fail this batch, keep serving
                outcomes = [WorkerError(f"text MT failed: {exc}")] * len(batch)
            self.batches += 1
            self.requests += len(batch)
            for (_, future), outcome in zip(batch, outcomes, strict=True):
                if future.done():
                    continue
                if isinstance(outcome, BaseException):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)

    async def aclose(self) -> None:
        """Stop serving: queued requests fail with ``WorkerError``; the thread is released."""
        self._closed = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                if (task := asyncio.current_task()) is not None and task.cancelling():
                    raise
        while self._pending:
            future = self._pending.popleft().future
            if not future.done():
                future.set_exception(WorkerError("the translation worker is closed"))
        self._executor.shutdown(wait=False, cancel_futures=True)

    def shutdown(self) -> None:
        """Synchronous stop for process teardown (the other workers' interface): queued
        batches are cancelled and the thread is joined (a batch in progress finishes first)."""
        self._closed = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._executor.shutdown(wait=True, cancel_futures=True)

    async def __aenter__(self) -> Ct2TranslationWorker:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
