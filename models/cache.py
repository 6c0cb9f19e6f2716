"""What speechpipe keeps under its home folder, with true sizes, and what can go.

``cache_entries`` lists every top-level item of the home (and each model folder under
``models/`` and ``mt/``) with its size on disk, summed over every file below it, so
``speechpipe models list`` shows where the bytes are. ``clean`` removes what this version no
longer reads or nothing refers to:

- ``models/restricted/*``: per-language copies of the Whisper model (~120 MB each) that
  earlier versions built for the restricted vocabulary; decoders now share one model
  (docs/design.md, "Memory that does not grow with languages");
- ``models/vocabularies/*``: the kept-token sets of those decoders (small, computed again
  when needed);
- folders under ``mt/`` that no registered MT model points to;
- leftovers of interrupted builds (``.tmp-*``) and lock files of removed entries.

The bundled Whisper model, registered MT models, installed voices and the eval cache are
listed, never removed.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CacheEntry", "cache_entries", "clean", "tree_size"]


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """One item of the home folder."""

    path: Path
    kind: str  # "asr", "restricted copy", "vocabulary", "mt", "voices", "eval", "leftover", ...
    size_bytes: int
    removable: bool  # what ``clean`` removes
    note: str = ""


def tree_size(path: Path) -> int:
    """Bytes of the files at or under ``path`` (symlinks not followed; 0 if gone)."""
    try:
        if path.is_symlink() or path.is_file():
            return path.lstat().st_size
    except OSError:
        return 0
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += (Path(root) / name).lstat().st_size
            except OSError:
                pass
    return total


def _registered_mt_paths(home: Path) -> set[Path]:
    try:
        registry = json.loads((home / "registry.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    out = set()
    for entry in (registry.get("mt") or {}).values():
        if isinstance(entry, dict) and entry.get("path"):
            out.add(Path(str(entry["path"])).expanduser().resolve())
    return out


def cache_entries(home: Path) -> list[CacheEntry]:
    """Every item of ``home``, largest kinds broken down per model folder."""
    if not home.is_dir():
        return []
    entries: list[CacheEntry] = []
    registered = _registered_mt_paths(home)
    for item in sorted(home.iterdir()):
        if item.name == "models" and item.is_dir():
            entries += _model_entries(item)
        elif item.name == "mt" and item.is_dir():
            for folder in sorted(item.iterdir()):
                used = folder.resolve() in registered
                entries.append(CacheEntry(folder, "mt", tree_size(folder), not used,
                                          "" if used else "not registered"))
        elif item.name.startswith(".tmp-"):
            entries.append(CacheEntry(item, "leftover", tree_size(item), True))
        else:
            kind = {"voices": "voices", "eval-offline": "eval",
                    "registry.json": "registry"}.get(item.name, "other")
            entries.append(CacheEntry(item, kind, tree_size(item), False))
    return entries


def _model_entries(models: Path) -> list[CacheEntry]:
    entries: list[CacheEntry] = []
    for item in sorted(models.iterdir()):
        if item.name == "restricted" and item.is_dir():
            for copy in sorted(item.iterdir()):
                if copy.name.endswith(".lock"):
                    continue  # removed with the copies (``clean``)
                entries.append(CacheEntry(copy, "restricted copy", tree_size(copy), True,
                                          "no longer used"))
        elif item.name == "vocabularies" and item.is_dir():
            entries.append(CacheEntry(item, "vocabulary", tree_size(item), True,
                                      "kept-token sets, made again when needed"))
        elif item.name.startswith(".tmp-"):
            entries.append(CacheEntry(item, "leftover", tree_size(item), True))
        elif item.name.endswith(".lock"):
            continue  # a lock of an entry listed on its own (a few bytes)
        else:
            entries.append(CacheEntry(item, "asr", tree_size(item), False))
    return entries


def clean(home: Path, *, dry_run: bool = False) -> list[CacheEntry]:
    """Remove the removable entries (module docs); returns them. ``dry_run``: only say."""
    gone = [e for e in cache_entries(home) if e.removable]
    if dry_run:
        return gone
    for entry in gone:
        if entry.path.is_dir() and not entry.path.is_symlink():
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            entry.path.unlink(missing_ok=True)
    restricted = home / "models" / "restricted"
    if restricted.is_dir():  # the copies' lock files, then the folder if empty
        for lock in restricted.glob(".*.lock"):
            lock.unlink(missing_ok=True)
        try:
            restricted.rmdir()
        except OSError:
            pass
    return gone
