"""``speechpipe models pull NAME``: MT pairs and Piper voices through ``huggingface_hub``.

Its cache (``HF_HOME``), mirrors (``HF_ENDPOINT``), offline mode (``HF_HUB_OFFLINE=1``: a
cached repo is used, nothing is asked of the network), resumable downloads (a cut transfer
leaves ``.incomplete`` and the next pull continues it with a ``Range`` request) and its progress
bar are the hub client's own. What speechpipe adds:

- names: a short pair (``en-es``: the OPUS-MT repo and a default voice for the target, see
  ``models pull --list``), a Piper voice (``es_ES-davefx-medium``, in the ``rhasspy/piper-voices``
  layout ``es/es_ES/davefx/medium/...``) or any ``owner/repo``;
- a content check: a file stored under its SHA-256 (the hub's ETag for large files) must hash
  to it, else it is deleted and the pull fails (the next pull fetches it again);
- a hostile hub's answers refused before the hub client builds paths from them (an ETag or a
  commit id that is a path), every file pulled resolving inside the cache, and a failing hub
  said in one line with what it answered, after one retry (``hub_guard``);
- the layout: a repo holding a CTranslate2 model (``model.bin``) is registered as it is; a
  Hugging Face Marian / M2M-100 / NLLB repo is converted (int8) into ``$SPEECHPIPE_HOME/mt``
  (needs ``speechpipe[convert]``); anything else is refused in one line.

Every failure is one ``ModelError`` line; nothing is registered half-way.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speechpipe.errors import InputError, ModelError, SpeechpipeError
from speechpipe.models.hub.guard import (
    COMMIT,
    UnsafeHubAnswer,
    answered,
    contained,
    guard_hub_client,
    shown,
)
from speechpipe.models.mt.routes import MULTILINGUAL, PAIR_CATALOGUE

__all__ = ["PullItem", "resolve_pull", "download_repo", "download_voice", "catalogue_lines",
           "DEFAULT_VOICES", "VOICE_REPO"]

VOICE_REPO = "rhasspy/piper-voices"
MULTILINGUAL_REPO = "facebook/nllb-200-distilled-600M"
DEFAULT_VOICES: dict[str, str] = {
    "es": "es_ES-davefx-medium", "fr": "fr_FR-siwis-medium", "de": "de_DE-thorsten-medium",
    "it": "it_IT-paola-medium", "ru": "ru_RU-irina-medium", "zh": "zh_CN-huayan-medium",
    "nl": "nl_BE-nathalie-medium", "en": "en_US-lessac-medium",
}
_VOICE_NAME = re.compile(r"^([a-z]{2,3})_([A-Z]{2})-([A-Za-z0-9_]+)-(x_low|low|medium|high)$")
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_MT_PATTERNS = ["*.json", "*.spm", "*.model", "model.bin", "*.txt", "*.safetensors",
                "pytorch_model.bin"]
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_CONFIG_BYTES = 16 << 20  # a model's config.json is a few kB


@dataclass(frozen=True, slots=True)
class PullItem:
    """One thing to fetch: an MT repo or a voice; ``pair`` is the (source, target) a short
    name promises, checked against what the model says."""

    kind: str  # "mt" | "voice"
    name: str
    repo: str
    pair: tuple[str, str] | None = None


def voice_path(name: str) -> str:
    """A Piper voice's ``.onnx`` path in the ``rhasspy/piper-voices`` layout."""
    match = _VOICE_NAME.match(name)
    if match is None:
        raise InputError(f"{shown(name)} is not a Piper voice name (like es_ES-davefx-medium)")
    lang, region, speaker, quality = match.groups()
    return f"{lang}/{lang}_{region}/{speaker}/{quality}/{name}.onnx"


def resolve_pull(name: str, *, with_voice: bool = True) -> list[PullItem]:
    """What ``models pull NAME`` fetches."""
    name = name.strip()
    if name in PAIR_CATALOGUE:
        source, target = name.split("-")
        items = [PullItem("mt", f"opus-mt-{name}", PAIR_CATALOGUE[name], (source, target))]
        voice = DEFAULT_VOICES.get(target)
        if with_voice and voice is not None:
            items.append(PullItem("voice", voice, VOICE_REPO))
        return items
    if name == MULTILINGUAL:
        return [PullItem("mt", MULTILINGUAL, MULTILINGUAL_REPO)]
    if _VOICE_NAME.match(name):
        return [PullItem("voice", name, VOICE_REPO)]
    if _REPO.match(name):
        return [PullItem("mt", name.split("/")[1], name)]
    raise InputError(
        f"don't know what to pull for {shown(name)}: use a pair (en-es), {MULTILINGUAL}, a Piper "
        "voice (es_ES-davefx-medium) or a Hugging Face repo (owner/name); "
        "`speechpipe models pull --list` shows the short names"
    )


def catalogue_lines() -> list[str]:
    """``models pull --list``: the short names, one a line."""
    lines = [f"  {pair:<10} {repo}  (+ voice {DEFAULT_VOICES.get(pair.split('-')[1], '-')})"
             for pair, repo in PAIR_CATALOGUE.items()]
    lines.append(f"  {MULTILINGUAL:<10} {MULTILINGUAL_REPO}  (many pairs, one model)")
    lines.append("  any Piper voice name (e.g. es_ES-davefx-medium) from rhasspy/piper-voices")
    lines.append("  any Hugging Face repo (owner/name) holding a CTranslate2 or Marian model")
    return lines


def _hub() -> Any:
    try:
        import huggingface_hub
    except ImportError:
        raise ModelError("models pull needs huggingface_hub: pip install huggingface_hub") from None
    guard_hub_client(huggingface_hub)
    # its retry warnings would be many lines for one failure; the failure is said in one
    huggingface_hub.utils.logging.set_verbosity_error()
    return huggingface_hub


def _cache() -> Path:
    return Path(_hub().constants.HF_HUB_CACHE)


def _endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


def _causes(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain and len(chain) < 16:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _hub_error(repo: str, exc: BaseException) -> SpeechpipeError:
    hub = _hub()
    errors = hub.errors if hasattr(hub, "errors") else hub.utils
    repo = shown(repo, quote=False)
    chain = _causes(exc)
    for cause in chain:  # the checks of hub_guard, raised inside the hub client
        if isinstance(cause, UnsafeHubAnswer):
            return UnsafeHubAnswer(f"cannot pull {repo} from {_endpoint()}: {cause}")
    answer = next((r for r in (getattr(c, "response", None) for c in chain)
                   if r is not None and r.status_code >= 400), None)
    if isinstance(exc, RecursionError):
        return UnsafeHubAnswer(f"cannot pull {repo} from {_endpoint()}: it answered JSON "
                               "nested too deeply")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return ModelError(f"no repository {repo!r} on {_endpoint()}")
    if isinstance(exc, errors.LocalEntryNotFoundError):
        offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
        why = ("HF_HUB_OFFLINE is set and it is not in the cache" if offline
               else "the hub is unreachable and it is not in the cache")
        if not offline and answer is not None:  # it answered: say what, not "unreachable"
            why = f"{answered(answer)} and it is not in the cache"
        return ModelError(f"cannot pull {repo} from {_endpoint()}: {why}")
    if isinstance(exc, errors.EntryNotFoundError):
        return ModelError(f"{repo} on {_endpoint()} has no such file ({_first_line(exc)})")
    if answer is not None:
        return ModelError(f"cannot pull {repo} from {_endpoint()}: {answered(answer)}")
    return ModelError(f"cannot pull {repo} from {_endpoint()}: {_first_line(exc)}")


def _verify(files: list[Path]) -> None:
    """Files the cache stores under their SHA-256 must hash to it (else: deleted, failed)."""
    for path in files:
        blob = path.resolve()
        if not _SHA256.match(blob.name):
            continue
        digest = hashlib.sha256()
        with open(blob, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        if digest.hexdigest() != blob.name:
            blob.unlink(missing_ok=True)
            path.unlink(missing_ok=True)
            raise ModelError(
                f"checksum mismatch for {path.name}: the download is corrupt "
                "and was deleted; pull again"
            )


def download_repo(repo: str) -> Path:
    """The repo's MT files in the hub cache (downloaded, resumed or found offline)."""
    hub = _hub()
    try:
        folder = Path(hub.snapshot_download(repo, allow_patterns=_MT_PATTERNS))
    except Exception as exc:  # the hub client raises requests', its own and OS errors
        raise _hub_error(repo, exc) from None
    files = [p for p in folder.rglob("*") if p.is_file()]
    if not COMMIT.fullmatch(folder.name):  # a ref that an unchecked client once wrote
        raise UnsafeHubAnswer(f"cannot use {repo}: its cached commit id {shown(folder.name)} "
                              "is not 40 hex digits")
    contained([folder, *files], _cache())
    _verify(files)
    return folder


def download_voice(name: str) -> Path:
    """A Piper voice's ``.onnx`` (with its ``.onnx.json`` beside it) in the hub cache."""
    hub = _hub()
    onnx = voice_path(name)
    try:
        paths = [Path(hub.hf_hub_download(VOICE_REPO, f)) for f in (onnx, onnx + ".json")]
    except Exception as exc:
        raise _hub_error(f"{VOICE_REPO}/{onnx}", exc) from None
    contained(paths, _cache())
    _verify(paths)
    return paths[0]


def prepare_mt_folder(folder: Path, dest: Path, pair: tuple[str, str] | None,
                      convert: Callable[[Path, Path], None]) -> Path:
    """The CTranslate2 folder to register for a downloaded repo: itself when it holds one,
    else its conversion into ``dest``; ``ModelError`` when it is no translation model."""
    if (folder / "model.bin").is_file():
        return folder
    config: dict[str, Any] = {}
    path = folder / "config.json"
    try:
        if path.stat().st_size > _CONFIG_BYTES:
            raise ModelError(f"this repo's config.json is over {_CONFIG_BYTES >> 20} MiB: "
                             "not a model config")
        config = json.loads(path.read_text("utf-8"))
    except RecursionError:
        raise ModelError("this repo's config.json is nested too deeply to be a model "
                         "config") from None
    except (OSError, ValueError):
        pass
    model_type = str(config.get("model_type", "")) if isinstance(config, dict) else ""
    if model_type not in ("marian", "m2m_100"):
        kind = f"a {model_type!r} model" if model_type else "no model speechpipe knows"
        raise ModelError(
            f"this repo is not a translation model speechpipe can use ({kind}; it needs a "
            "CTranslate2 model.bin, or a Marian / M2M-100 / NLLB Hugging Face model)"
        )
    convert(folder, dest)
    if pair is not None and model_type == "marian":
        meta_path = dest / "speechpipe.json"
        meta: dict[str, Any] = {}
        if meta_path.is_file():
            meta = json.loads(meta_path.read_text("utf-8"))
        meta.setdefault("family", "marian")
        meta.setdefault("source_lang", pair[0])
        meta.setdefault("target_lang", pair[1])
        meta_path.write_text(json.dumps(meta, indent=2) + "\n", "utf-8")
    return dest
