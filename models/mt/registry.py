"""The MT model registry: names for CTranslate2 model folders a user registered.

``$SPEECHPIPE_HOME/registry.json`` records each folder's path (models can be gigabytes; they are
not copied). ``resolve_mt_model`` is what ``--mt ct2:SPEC`` uses; ``speechpipe models add``
(``speechpipe/models_cli.py``) writes entries under ``locked_registry``, whose rewrite is atomic.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from speechpipe.errors import InputError, ModelError, UnknownModelError
from speechpipe.models.home import speechpipe_home

__all__ = ["registry_path", "registered_mt_models", "locked_registry", "resolve_mt_model"]

_REGISTRY_VERSION = 1


# --- registry ----------------------------------------------------------------------------


def registry_path() -> Path:
    """``$SPEECHPIPE_HOME/registry.json``: the registered MT models."""
    return speechpipe_home() / "registry.json"


def _read_registry(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"version": _REGISTRY_VERSION, "mt": {}}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ModelError(f"model registry {path} is unreadable ({exc}); fix or delete it") from None
    if not isinstance(data, dict) or not isinstance(data.get("mt", {}), dict):
        raise ModelError(f"model registry {path} is malformed; fix or delete it")
    data.setdefault("mt", {})
    return data


def registered_mt_models() -> dict[str, dict[str, Any]]:
    """Registered MT models: name -> entry (``path``, ``family``, languages, size)."""
    return dict(_read_registry(registry_path())["mt"])


@contextlib.contextmanager
def locked_registry() -> Iterator[dict[str, Any]]:
    """Read-modify-write under an ``flock``; the new file replaces the old in one rename."""
    path = registry_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(".registry.lock"), "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            data = _read_registry(path)
            yield data
            tmp = path.with_name(f".registry.{uuid.uuid4().hex}.tmp")
            try:
                with open(tmp, "w", encoding="utf-8") as f:
                    json.dump(data, f, indent=2, sort_keys=True)
                    f.write("\n")
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def resolve_mt_model(spec: str) -> Path:
    """The folder for ``--mt ct2:SPEC``: a registered name, else a path to a model folder.

    Raises ``ModelError`` with what is registered when neither matches. The folder is not
    loaded here; ``Ct2TextTranslator`` checks it.
    """
    spec = spec.removeprefix("ct2:").strip()
    if not spec:
        raise InputError("--mt ct2: needs a model name or folder, e.g. --mt ct2:opus-en-fr")
    entries = registered_mt_models()
    if spec in entries:
        path = Path(str(entries[spec].get("path", "")))
        if not path.is_dir():
            raise ModelError(
                f"MT model {spec!r} is registered at {path}, which no longer exists; "
                f"re-add it with `speechpipe models add PATH --name {spec} --replace`"
            )
        return path
    path = Path(spec).expanduser()
    if path.exists():
        return path.resolve()
    names = ", ".join(sorted(entries)) or "none"
    raise UnknownModelError(
        f"no MT model named {spec!r} and no such folder (registered: {names}); "
        "add one with `speechpipe models add PATH`"
    )
