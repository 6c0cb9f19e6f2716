"""Argos Translate packages (``.argosmodel``) as speechpipe MT pairs.

A package is a zip with one top folder holding ``metadata.json`` (``from_code``, ``to_code``),
``model/`` (a CTranslate2 model converted from OpenNMT-py) and ``sentencepiece.model`` (one
tokenizer for both sides). ``install_argos_package`` unpacks the model and the tokenizer into a
folder of its own and writes ``speechpipe.json`` (family ``marian``: a plain encoder-decoder
with no language tokens; the pair from the metadata; no source ``</s>``, as Argos decodes), so
``Ct2TextTranslator`` loads it like any other folder. Nothing is unpacked outside the folder
(no absolute paths, no ``..``) and the total size is bounded.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from speechpipe.errors import InputError, ModelError

__all__ = ["ArgosPackage", "read_argos_package", "install_argos_package", "ARGOS_SUFFIX"]

T = TypeVar("T")
ARGOS_SUFFIX = ".argosmodel"
MAX_UNPACKED_BYTES = 8 * 1024**3


class ArgosPackage:
    """What a package's metadata says, and where its members are in the zip."""

    def __init__(self, path: Path, prefix: str, metadata: dict[str, Any]) -> None:
        self.path = path
        self.prefix = prefix
        self.metadata = metadata
        self.from_code = str(metadata["from_code"]).strip().lower()
        self.to_code = str(metadata["to_code"]).strip().lower()

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
            names = [info.filename for info in archive.infolist()]
            for name in names:
                _safe(name)
            metas = sorted((n for n in names if PurePosixPath(n).name == "metadata.json"),
                           key=lambda n: len(PurePosixPath(n).parts))
            if not metas:
                raise ModelError(f"{path} is not an Argos Translate package (no metadata.json)")
            prefix = str(PurePosixPath(metas[0]).parent)
            prefix = "" if prefix == "." else prefix + "/"
            try:
                metadata = json.loads(archive.read(metas[0]).decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as exc:
                raise ModelError(f"{path}: metadata.json is not valid JSON ({exc})") from None
            if archive.getinfo(metas[0]).file_size > 1_000_000:
                raise ModelError(f"{path}: metadata.json is too large")
            unpacked = sum(info.file_size for info in archive.infolist())
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
    if unpacked > MAX_UNPACKED_BYTES:
        raise ModelError(f"{path} unpacks to {unpacked} bytes, more than an MT pair needs")
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
