"""Argos Translate packages (``.argosmodel``) as speechpipe MT pairs.

A package is a zip with one top folder holding ``metadata.json`` (``from_code``, ``to_code``),
``model/`` (a CTranslate2 model converted from OpenNMT-py) and ``sentencepiece.model`` (one
tokenizer for both sides). ``install_argos_package`` unpacks the model and the tokenizer into a
folder of its own and writes ``speechpipe.json`` (family ``marian``: a plain encoder-decoder
with no language tokens; the pair from the metadata; no source ``</s>``, as Argos decodes), so
``Ct2TextTranslator`` loads it like any other folder. Nothing is unpacked outside the folder
(no absolute paths, no ``..``), and sizes come from the zip's own entries before a byte is
inflated: ``metadata.json`` is read with a cap, and a member too large or packed too tightly
(a few MB that inflate to gigabytes) refuses the whole package before anything is unpacked.
The language codes must be ones speechpipe knows: ``..`` or a NUL once registered as "any".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from speechpipe.errors import InputError, LanguageError, ModelError
from speechpipe.models.mt.ct2_folder import whisper_code

__all__ = ["ArgosPackage", "read_argos_package", "install_argos_package", "ARGOS_SUFFIX"]

T = TypeVar("T")
ARGOS_SUFFIX = ".argosmodel"
MAX_UNPACKED_BYTES = 4 * 1024**3
"""All members together (Argos packages unpack to 100-400 MB)."""
MAX_MEMBER_BYTES = 2 * 1024**3 - 1
"""One member (a model.bin); a 2 GiB one packed 700:1 was once kept on disk."""
MAX_RATIO = 100
"""Inflated / packed, for members over ``RATIO_FLOOR``: weights pack about 1:1, text 4:1."""
RATIO_FLOOR = 1 << 20
MAX_METADATA_BYTES = 1 << 20
_CODE = re.compile(r"[a-z]{2,3}")
_SHOWN = 80


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "...'"


def _check_member(path: Path, info: zipfile.ZipInfo) -> None:
    """Refuse a member by its entry (sizes from the zip's directory, before inflating it)."""
    name = _show(info.filename)
    if info.file_size > MAX_MEMBER_BYTES:
        raise InputError(f"{path}: member {name} unpacks to {info.file_size} bytes, "
                         f"more than an MT model needs ({MAX_MEMBER_BYTES >> 20} MiB)")
    ratio = info.file_size // max(info.compress_size, 1)
    if info.file_size > RATIO_FLOOR and ratio >= MAX_RATIO:
        raise InputError(f"{path}: member {name} unpacks {ratio}:1 ({info.file_size} bytes), "
                         f"not a model (under {MAX_RATIO}:1)")


def _language(path: Path, key: str, value: str) -> str:
    code = value.strip().lower()
    if not _CODE.fullmatch(code) or whisper_code(code) is None:
        raise LanguageError(f"{path}: metadata.json {key} {_show(value)} is not a language "
                            "code speechpipe knows (such as en, es, fr)")
    return code


class ArgosPackage:
    """What a package's metadata says, and where its members are in the zip."""

    def __init__(self, path: Path, prefix: str, metadata: dict[str, Any]) -> None:
        self.path = path
        self.prefix = prefix
        self.metadata = metadata
        self.from_code = _language(path, "from_code", str(metadata["from_code"]))
        self.to_code = _language(path, "to_code", str(metadata["to_code"]))

    @property
    def default_name(self) -> str:
        """``argos-FROM-TO``, the registry name unless ``--name`` says otherwise."""
        return f"argos-{self.from_code}-{self.to_code}"


def _safe(name: str) -> PurePosixPath:
    member = PurePosixPath(name)
    if member.is_absolute() or ".." in member.parts:
        raise ModelError(f"refusing an Argos package member outside its folder: {name!r}")
    return member


def read_argos_package(path: Path) -> ArgosPackage:
    """Open and check a package's layout and metadata (``ModelError`` if it is not one)."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            names = [info.filename for info in infos]
            for info in infos:
                _safe(info.filename)
                _check_member(path, info)
            unpacked = sum(info.file_size for info in infos)
            if unpacked > MAX_UNPACKED_BYTES:
                raise InputError(f"{path} unpacks to {unpacked} bytes, more than an MT pair "
                                 "needs")
            metas = sorted((n for n in names if PurePosixPath(n).name == "metadata.json"),
                           key=lambda n: len(PurePosixPath(n).parts))
            if not metas:
                raise ModelError(f"{path} is not an Argos Translate package (no metadata.json)")
            prefix = str(PurePosixPath(metas[0]).parent)
            prefix = "" if prefix == "." else prefix + "/"
            if archive.getinfo(metas[0]).file_size > MAX_METADATA_BYTES:  # before reading
                raise InputError(f"{path}: metadata.json is too large "
                                 f"({archive.getinfo(metas[0]).file_size} bytes)")
            with archive.open(metas[0]) as member:
                raw = member.read(MAX_METADATA_BYTES + 1)
            if len(raw) > MAX_METADATA_BYTES:
                raise InputError(f"{path}: metadata.json is too large")
            try:
                metadata = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as exc:
                raise ModelError(f"{path}: metadata.json is not valid JSON ({exc})") from None
    except zipfile.BadZipFile:
        raise ModelError(f"{path} is not an Argos Translate package (not a zip file)") from None
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not isinstance(metadata, dict) or not all(
        isinstance(metadata.get(k), str) and metadata.get(k) for k in ("from_code", "to_code")
    ):
        raise ModelError(f"{path}: metadata.json needs 'from_code' and 'to_code'")
    if f"{prefix}model/model.bin" not in names:
        raise ModelError(f"{path} has no CTranslate2 model (model/model.bin) inside")
    if f"{prefix}sentencepiece.model" not in names:
        raise ModelError(f"{path} has no sentencepiece.model inside")
    return ArgosPackage(path, prefix, metadata)


def install_argos_package(
    package: ArgosPackage, dest: Path, *, replace: bool = False,
    check: Callable[[Path], T] | None = None,
) -> T | None:
    """Unpack ``package`` into ``dest``: into a temp folder that ``check`` (e.g. loading the
    model) sees first, then renamed into place. Returns what ``check`` returned."""
    if dest.exists() and not replace:
        raise InputError(f"{dest} already exists; pass --replace")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.tmp")
    tmp.mkdir()
    try:
        with zipfile.ZipFile(package.path) as archive:
            model = f"{package.prefix}model/"
            for info in archive.infolist():
                if info.is_dir():
                    continue
                _check_member(package.path, info)  # again: the file may have changed since
                name = info.filename
                if name.startswith(model):
                    rel = _safe(name[len(model):])
                    if len(rel.parts) != 1:  # the CT2 folder is flat
                        continue
                    out = tmp / rel.name
                elif name == f"{package.prefix}sentencepiece.model":
                    out = tmp / "sentencepiece.model"
                else:
                    continue
                with archive.open(info) as src, open(out, "wb") as dst:
                    # zipfile stops at the entry's file_size (and checks its CRC there)
                    shutil.copyfileobj(src, dst, 1 << 20)
        meta = {"family": "marian", "source_lang": package.from_code,
                "target_lang": package.to_code, "source_eos": False,
                "origin": f"argos:{package.path.name}"}
        (tmp / "speechpipe.json").write_text(json.dumps(meta, indent=2) + "\n", "utf-8")
        checked = check(tmp) if check is not None else None
        if dest.exists():
            old = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.old")
            os.replace(dest, old)
            shutil.rmtree(old, ignore_errors=True)
        os.replace(tmp, dest)
    except (OSError, zipfile.BadZipFile) as exc:
        raise ModelError(f"cannot unpack {package.path}: {exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return checked
