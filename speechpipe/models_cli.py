"""``speechpipe models``: list, add and convert the models and voices a user brings.

- ``models list``: the ASR model, registered CTranslate2 MT models and Piper voices, with
  sizes and languages (``--json`` for scripts).
- ``models add PATH [--name NAME]``: register a CTranslate2 MT model folder (checked by loading
  it: weights, family, tokenizer against vocabulary) in ``$SPEECHPIPE_HOME/registry.json``,
  which records the folder's path (models can be gigabytes; they are not copied); or install a
  Piper ``.onnx`` + ``.onnx.json`` pair (checked by loading it) into
  ``$SPEECHPIPE_HOME/voices/``.
- ``models add FILE.argosmodel``: an Argos Translate package, unpacked into
  ``$SPEECHPIPE_HOME/mt/NAME`` (``speechpipe.models.mt.argos_package``) and registered.
- ``models convert HF_MODEL_DIR --out DIR``: ctranslate2's Transformers converter, copying the
  tokenizer files the translator needs. Needs the optional ``speechpipe[convert]`` extra.

Every check runs before anything is written, and writes are atomic (temp file + rename), so
bad input leaves nothing half-registered. The registry itself is ``speechpipe.models.mt.registry``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from speechpipe.errors import InputError, ModelError, SpeechpipeError, VoiceError
from speechpipe.models.home import speechpipe_home
from speechpipe.models.mt.ct2_folder import MtModelInfo
from speechpipe.models.mt.registry import (
    locked_registry,
    registered_mt_models,
    registry_path,
)
from speechpipe.models.whisper.weights import WHISPER_BASE

__all__ = [
    "register",
    "cmd_models_list",
    "cmd_models_add",
    "cmd_models_convert",
]

# \Z, not $: "$" also matches before a final newline, and "name\n" became a folder and a
# registry key with a newline (issue 74); `.match` with \Z checks the whole name.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
# Tokenizer files the translator reads, copied by ``models convert`` when present.
_TOKENIZER_FILES = (
    "source.spm", "target.spm", "sentencepiece.bpe.model", "spm.model", "sentencepiece.model",
    "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``models list|add|convert`` to the ``speechpipe`` command's subparsers."""
    models = subparsers.add_parser("models", help="list, add and convert models and voices")
    sub = models.add_subparsers(dest="models_command", required=True)

    listing = sub.add_parser("list", help="installed ASR/MT models and voices")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    from speechpipe.config import MODEL_ALIASES, add_aliases

    add_aliases(listing, [a for a in MODEL_ALIASES if a.flag == "--voices-dir"])
    listing.set_defaults(handler=cmd_models_list)

    clean = sub.add_parser("clean", help="remove what the cache holds that nothing uses "
                           "(old restricted decoder copies, unregistered MT folders, leftovers)")
    clean.add_argument("--dry-run", action="store_true", help="only list what would go")
    clean.set_defaults(handler=cmd_models_clean)

    add = sub.add_parser("add", help="register a CTranslate2 MT folder, an Argos Translate "
                         "package or a Piper .onnx voice")
    add.add_argument("path", help="CTranslate2 model folder, FILE.argosmodel, or a Piper .onnx "
                                  "(with .onnx.json)")
    add.add_argument("--name", default=None, help="name to use with --mt ct2:NAME / --voice")
    add.add_argument("--replace", action="store_true", help="overwrite an entry of that name")
    add.set_defaults(handler=cmd_models_add)

    pull = sub.add_parser("pull", help="download an MT pair and/or a Piper voice from the "
                          "Hugging Face hub (HF_ENDPOINT, HF_HUB_OFFLINE apply)")
    pull.add_argument("names", nargs="*", metavar="NAME",
                      help="a pair (en-es), nllb-600m, a Piper voice (es_ES-davefx-medium) or "
                           "a Hugging Face repo (owner/name)")
    pull.add_argument("--list", action="store_true", help="the short names it knows")
    pull.add_argument("--name", default=None, help="registry name for a single MT model")
    pull.add_argument("--no-voice", action="store_true",
                      help="a pair without its default voice")
    pull.add_argument("--replace", action="store_true", help="overwrite an entry of that name")
    pull.set_defaults(handler=cmd_models_pull)

    convert = sub.add_parser("convert", help="convert a Hugging Face MT model to CTranslate2")
    convert.add_argument("hf_model_dir", help="local Hugging Face model folder")
    convert.add_argument("--out", required=True, help="output folder")
    convert.add_argument("--quantization", default="int8",
                         help="int8 (default), int8_float32, int16, float16, float32")
    convert.add_argument("--force", action="store_true", help="replace an existing --out")
    convert.set_defaults(handler=cmd_models_convert)


# --- handlers ----------------------------------------------------------------------------


def _fail(exc: SpeechpipeError | str, code: int = 1) -> int:
    print(f"speechpipe: error: {exc}", file=sys.stderr)
    return code


def _handles_errors(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def wrapper(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except SpeechpipeError as exc:
            return _fail(exc, 2 if isinstance(exc, InputError) else 1)

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


@_handles_errors
def cmd_models_add(args: argparse.Namespace) -> int:
    """``speechpipe models add``: register an MT folder or install a Piper voice."""
    path = Path(args.path).expanduser()
    if args.name is not None and not _NAME.match(args.name):
        raise InputError(f"bad name {args.name[:80]!r}: use letters, digits, '.', '_' and '-' "
                         "(at most 64)")
    if path.name.endswith((".onnx", ".onnx.json")):
        return _add_voice(path, args.name, args.replace)
    if not path.exists():
        raise InputError(f"{path} does not exist")
    if path.is_file() and path.name.endswith(".argosmodel"):
        return _add_argos(path, args.name, args.replace)
    if path.is_dir():
        return _add_mt(path, args.name, args.replace)
    raise InputError(
        f"{path} is neither a CTranslate2 model folder nor a Piper voice (.onnx + .onnx.json)"
    )


def _add_mt(path: Path, name: str | None, replace: bool) -> int:
    from speechpipe.models.mt.ct2_translator import Ct2TextTranslator

    path = path.resolve()
    name = name or path.name
    if not _NAME.match(name):
        raise InputError(f"cannot use the folder name {name!r} as a model name; pass --name")
    # loads it (weights and tokenizer); the native reader is checked where it serves
    translator = Ct2TextTranslator(path, intra_threads=1, prefill=False)
    info = translator.info
    del translator
    _register_mt(name, path, info, replace)
    return 0


def _register_mt(name: str, path: Path, info: MtModelInfo, replace: bool,
                 origin: str | None = None) -> None:
    entry = {
        "path": str(path),
        "family": info.family.value,
        "source_langs": sorted(info.source_langs) if info.source_langs is not None else None,
        "target_langs": sorted(info.target_langs) if info.target_langs is not None else None,
        "size_bytes": info.size_bytes,
    }
    if origin:
        entry["origin"] = origin
    with locked_registry() as registry:
        old = registry["mt"].get(name)
        if old is not None and old.get("path") != entry["path"] and not replace:
            raise InputError(
                f"an MT model named {name!r} is already registered ({old.get('path')}); "
                "choose another --name or pass --replace"
            )
        registry["mt"][name] = entry
    print(f"registered MT model {name!r} ({info.family}, {_langs(info.source_langs)} -> "
          f"{_langs(info.target_langs)}); --mt auto (the default) uses it for that pair, "
          f"or name it with --mt ct2:{name}")


def _add_argos(path: Path, name: str | None, replace: bool) -> int:
    """An Argos Translate package: unpacked into ``$SPEECHPIPE_HOME/mt/NAME`` and registered."""
    from speechpipe.models.mt.argos_package import install_argos_package, read_argos_package
    from speechpipe.models.mt.ct2_translator import Ct2TextTranslator

    package = read_argos_package(path)
    name = name or package.default_name
    if not _NAME.match(name):
        raise InputError(f"cannot use {name!r} as a model name; pass --name")
    existing = registered_mt_models().get(name)
    if existing is not None and not replace:
        raise InputError(f"an MT model named {name!r} is already registered "
                         f"({existing.get('path')}); choose another --name or pass --replace")
    dest = speechpipe_home() / "mt" / name

    def load(folder: Path) -> MtModelInfo:
        # weights and tokenizer
        return Ct2TextTranslator(folder, intra_threads=1, prefill=False).info

    info = install_argos_package(package, dest, replace=True, check=load)
    assert info is not None
    _register_mt(name, dest, dataclasses.replace(info, path=dest), True,
                 origin=f"argos:{path.name}")
    return 0


def _add_voice(path: Path, name: str | None, replace: bool) -> int:
    from speechpipe.voices.piper_engine import PiperSynthesizer
    from speechpipe.voices.registry import (
        MAX_VOICE_NAME,
        is_voice_name,
        load_voice_info,
        voices_home,
    )

    onnx = path.with_name(path.name.removesuffix(".json"))
    config = onnx.with_name(onnx.name + ".json")
    if not onnx.is_file():
        raise InputError(f"Piper voice model {onnx} does not exist")
    if not config.is_file():
        raise InputError(f"Piper voice {onnx} has no config beside it ({config.name})")
    name = name or onnx.name.removesuffix(".onnx")
    if not is_voice_name(name):  # the rule start.voice and GET /voices follow
        raise InputError(
            f"cannot use {name!r} as a voice name (ASCII letters, digits and '_.+-', at most "
            f"{MAX_VOICE_NAME} characters); pass --name"
        )
    info = load_voice_info(config, name=name)  # size, shape, sample rate and language
    PiperSynthesizer(info)  # the model loads with this config
    home = voices_home()
    dest_onnx, dest_config = home / f"{name}.onnx", home / f"{name}.onnx.json"
    if (dest_onnx.exists() or dest_config.exists()) and not replace:
        raise InputError(f"a voice named {name!r} is already installed; pass --replace")
    home.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex
    tmp_onnx, tmp_config = home / f".{name}.{tag}.onnx.tmp", home / f".{name}.{tag}.json.tmp"
    try:
        for src, tmp in ((onnx, tmp_onnx), (config, tmp_config)):
            shutil.copyfile(src, tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
        os.replace(tmp_onnx, dest_onnx)
        os.replace(tmp_config, dest_config)
    except OSError as exc:
        raise VoiceError(f"cannot install voice {name!r} into {home}: {exc}") from None
    finally:
        tmp_onnx.unlink(missing_ok=True)
        tmp_config.unlink(missing_ok=True)
    print(f"installed voice {name!r} ({info.locale}, {info.sample_rate} Hz) in {home}; "
          f"use it with --voice {name}")
    return 0


@_handles_errors
def cmd_models_list(args: argparse.Namespace) -> int:
    """``speechpipe models list``: the ASR model, MT models and voices."""
    from speechpipe.voices.engines import ENGINES
    from speechpipe.voices.registry import list_voices

    asr = _asr_models()
    mt = []
    for name, entry in sorted(registered_mt_models().items()):
        path = Path(str(entry.get("path", "")))
        mt.append({"name": name, **entry, "present": path.is_dir(),
                   "licence": entry.get("licence") or "see the model's card"})
    voices: list[dict[str, Any]] = [
        {
            "name": v.name, "locale": v.locale, "lang": v.lang, "sample_rate": v.sample_rate,
            "size_bytes": _size(v.model_path), "source": v.source, "path": str(v.model_path),
            "engine": v.engine,
            "licence": getattr(ENGINES.get(v.engine), "licence", "") or "see the voice's card",
        }
        for v in list_voices(getattr(args, "voices_dir", None) or ())
    ]
    from speechpipe.models.mt.backends import MT_BACKENDS

    # each text-MT backend beside CTranslate2: its rows (--json) and its lines
    backends = {name: backend.load().listing() for name, backend in MT_BACKENDS.items()}
    from speechpipe.models.cache import cache_entries

    home = speechpipe_home()
    entries = cache_entries(home)
    cache = [{"path": str(e.path), "kind": e.kind, "size_bytes": e.size_bytes,
              "removable": e.removable, "note": e.note} for e in entries]
    if getattr(args, "json", False):
        listed = {name: rows for name, (rows, _) in backends.items()}
        print(json.dumps({"asr": asr, "mt": mt, **listed, "voices": voices, "cache": cache},
                         indent=2))
        return 0
    print("ASR models:")
    for m in asr:
        print(f"  {m['name']:<24} {m['status']:<28} {_human(m['size_bytes'])}  "
              f"({m['licence']})")
    print(f"MT models (registry: {registry_path()}):")
    if not mt:
        print("  none - Whisper translates to English; for other targets `speechpipe models "
              "pull en-es` (see --list) or `speechpipe models add PATH|FILE.argosmodel`")
    for m in mt:
        state = "" if m["present"] else "  [folder missing]"
        print(f"  {m['name']:<24} {m['family']:<7} {_langs(m['source_langs'])} -> "
              f"{_langs(m['target_langs'])}  {_human(m['size_bytes'])}  {m['path']}{state}")
    for _, lines in backends.values():
        print("\n".join(lines))
    print("Voices:")
    # an engine with a catalogue (a voice per language, no file) is one line
    catalogues = [row for row in ENGINES.values() if row.catalogue]
    for v in voices:
        if not any(v["engine"] == row.name for row in catalogues):
            print(f"  {v['name']:<24} {v['locale']:<7} {v['sample_rate']} Hz  "
                  f"{_human(v['size_bytes'])}  {v['source']}  ({v['engine']}; {v['licence']})")
    for row in catalogues:  # one line each: a voice per language, all the same engine
        spoken = [v for v in voices if v["engine"] == row.name]
        if spoken:
            print(f"  {row.name + '-LANG':<24} {row.description}, {len(spoken)} languages: "
                  f"{' '.join(v['lang'] for v in spoken)}  ({spoken[0]['licence']})")
        elif row.catalogue_install:
            print(f"  no {row.name} voices ({row.catalogue_offer}): {row.catalogue_install}")
    print(f"Cache ({home}): {_human(sum(e.size_bytes for e in entries))}")
    for e in entries:
        mark = "  [removable: speechpipe models clean]" if e.removable else ""
        note = f"  {e.note}" if e.note else ""
        print(f"  {_human(e.size_bytes):>9}  {e.kind:<16} {e.path.relative_to(home)}{note}{mark}")
    return 0


@_handles_errors
def cmd_models_clean(args: argparse.Namespace) -> int:
    """``speechpipe models clean``: remove the cache entries nothing uses."""
    from speechpipe.models.cache import clean

    home = speechpipe_home()
    gone = clean(home, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for entry in gone:
        print(f"{verb} {_human(entry.size_bytes):>9}  {entry.kind:<16} "
              f"{entry.path.relative_to(home)}")
    print(f"{verb} {_human(sum(e.size_bytes for e in gone))} in all"
          if gone else "nothing to remove")
    return 0


def _asr_models() -> list[dict[str, Any]]:
    folder = speechpipe_home() / "models" / WHISPER_BASE
    ready = (folder / "model.bin").is_file()
    return [{
        "name": WHISPER_BASE,
        "languages": "99 (Whisper)",
        "status": "ready" if ready else "bundled, assembled on first use",
        "size_bytes": sum(_size(p) for p in folder.iterdir()) if ready else None,
        "path": str(folder) if ready else None,
        "licence": "MIT (OpenAI Whisper weights; faster-whisper and CTranslate2 MIT)",
    }]


@_handles_errors
def cmd_models_pull(args: argparse.Namespace) -> int:
    """``speechpipe models pull``: MT pairs and voices through huggingface_hub."""
    from speechpipe.models.hub import pull as hub_pull
    from speechpipe.models.hub.guard import shown

    if args.list:
        print("speechpipe models pull NAME, where NAME is:")
        print("\n".join(hub_pull.catalogue_lines()))
        return 0
    if not args.names:
        raise InputError("models pull needs a NAME (see `speechpipe models pull --list`)")
    if args.name is not None and not _NAME.match(args.name):
        raise InputError(f"bad name {shown(args.name)}: use letters, digits, '.', '_' and '-'")
    items = [item for name in args.names
             for item in hub_pull.resolve_pull(name, with_voice=not args.no_voice)]
    if args.name is not None and sum(1 for i in items if i.kind == "mt") != 1:
        raise InputError("--name needs exactly one MT model to pull")
    for item in items:
        if item.kind == "voice":
            _pull_voice(item, args.replace)
        else:
            _pull_mt(item, args.name or item.name, args.replace)
    return 0


def _pull_voice(item: Any, replace: bool) -> None:
    from speechpipe.models.hub import pull as hub_pull
    from speechpipe.voices.registry import voices_home

    if (voices_home() / f"{item.name}.onnx").exists() and not replace:
        print(f"voice {item.name!r} is already installed")
        return
    _add_voice(hub_pull.download_voice(item.name), item.name, replace)


def _pull_mt(item: Any, name: str, replace: bool) -> None:
    from speechpipe.models.hub import pull as hub_pull
    from speechpipe.models.hub.guard import shown
    from speechpipe.models.mt.ct2_translator import Ct2TextTranslator

    if not _NAME.match(name):
        raise InputError(f"cannot use {shown(name)} as a model name; pass --name")
    existing = registered_mt_models().get(name)
    if existing is not None and not replace and str(existing.get("origin", "")).split("@")[0] \
            != f"hf:{item.repo}":
        raise InputError(f"an MT model named {name!r} is already registered "
                         f"({existing.get('path')}); choose another --name or pass --replace")
    snapshot = hub_pull.download_repo(item.repo)
    folder = hub_pull.prepare_mt_folder(snapshot, speechpipe_home() / "mt" / name, item.pair,
                                        _convert_into)
    # loads it: weights and tokenizer
    info = Ct2TextTranslator(folder, intra_threads=1, prefill=False).info
    if item.pair is not None:
        source, target = item.pair
        if (info.source_langs is not None and source not in info.source_langs) or (
                info.target_langs is not None and target not in info.target_langs):
            raise ModelError(f"{item.repo} does not translate {source} -> {target} "
                             f"(it says {_langs(info.source_langs)} -> "
                             f"{_langs(info.target_langs)})")
    _register_mt(name, folder, info, True, origin=f"hf:{item.repo}@{snapshot.name}")


def _convert_into(src: Path, out: Path) -> None:
    """``models convert`` for a downloaded repo (int8), as ``models pull`` needs it."""
    import importlib.util

    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        raise ModelError(f"{src.name} is a Hugging Face model: converting it needs "
                         f"{' and '.join(missing)}: pip install 'speechpipe[convert]'")
    code = cmd_models_convert(argparse.Namespace(
        hf_model_dir=str(src), out=str(out), quantization="int8", force=True))
    if code != 0:
        raise ModelError(f"cannot convert the downloaded model into {out} (see above)")


@_handles_errors
def cmd_models_convert(args: argparse.Namespace) -> int:
    """``speechpipe models convert``: a Hugging Face MT model to CTranslate2."""
    src = Path(args.hf_model_dir).expanduser()
    out = Path(args.out).expanduser()
    if not (src / "config.json").is_file():
        raise InputError(f"{src} is not a Hugging Face model folder (no config.json)")
    if out.exists() and not args.force:
        raise InputError(f"{out} already exists; pass --force to replace it")
    try:
        import torch  # noqa: F401  (the converter needs both)
        import transformers  # noqa: F401
        from ctranslate2.converters import TransformersConverter
    except ImportError as exc:
        return _fail(
            f"models convert needs the optional converter dependencies ({exc.name} is missing): "
            "pip install 'speechpipe[convert]'"
        )
    copy = [name for name in _TOKENIZER_FILES if (src / name).is_file()]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{uuid.uuid4().hex}.tmp")
    try:
        converter = TransformersConverter(str(src), copy_files=copy or None)
        converter.convert(str(tmp), quantization=args.quantization, force=True)
        _write_family_hint(src, tmp)
        from speechpipe.models.mt.ct2_translator import Ct2TextTranslator

        info = Ct2TextTranslator(tmp, intra_threads=1, prefill=False).info
        if out.exists():
            old = out.with_name(f".{out.name}.{uuid.uuid4().hex}.old")
            os.replace(out, old)
            shutil.rmtree(old, ignore_errors=True)
        os.replace(tmp, out)
    except SpeechpipeError:
        raise
    except Exception as exc:  # the converter raises whatever transformers/torch raise
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ModelError(f"cannot convert {src}: {first}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"converted {src} -> {out} ({info.family}, {_langs(info.source_langs)} -> "
          f"{_langs(info.target_langs)}); register it with: speechpipe models add {out}")
    return 0


def _write_family_hint(src: Path, out: Path) -> None:
    """Record what the Hugging Face config says, so detection need not guess."""
    try:
        config = json.loads((src / "config.json").read_text(encoding="utf-8"))
        tok = json.loads((src / "tokenizer_config.json").read_text(encoding="utf-8")) if (
            src / "tokenizer_config.json"
        ).is_file() else {}
    except (OSError, ValueError, RecursionError):
        return
    model_type = str(config.get("model_type", ""))
    tokenizer = str(tok.get("tokenizer_class", config.get("tokenizer_class", "")))
    hint: dict[str, Any] = {}
    if model_type == "marian":
        hint["family"] = "marian"
        for key in ("source_lang", "target_lang"):
            if tok.get(key):
                hint[key] = tok[key]
    elif model_type == "m2m_100":
        hint["family"] = "nllb" if "Nllb" in tokenizer else "m2m100"
    if hint:
        (out / "speechpipe.json").write_text(json.dumps(hint, indent=2) + "\n", encoding="utf-8")


# --- formatting --------------------------------------------------------------------------


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _human(size: int | None) -> str:
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def _langs(langs: Any) -> str:
    if langs is None:
        return "any"
    langs = sorted(langs)
    if len(langs) > 6:
        return f"{len(langs)} languages"
    return ",".join(langs) or "none"
