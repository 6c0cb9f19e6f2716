"""What a model hub answers, checked before ``huggingface_hub`` acts on it.

huggingface_hub (0.36, and still 2.4) builds cache paths from a hub's answers without checking
them: a file's ``ETag`` names its blob (``blobs/ETAG``) and its lock (``.locks/.../ETAG.lock``),
the commit id (``X-Repo-Commit``, the ``sha`` of the repo info) names the snapshot folder, the
``refs/`` file and ``.no_exist/COMMIT/...``. A hostile hub answering ``../../etc/x`` would have
it write outside its cache. This module hooks every HTTP response of the hub client (its public
``configure_http_backend``) and refuses, before the client sees the answer:

- an ``ETag`` (or ``X-Linked-Etag``) that is not a git SHA-1 or a SHA-256 (hex), on the HEAD
  whose answer the client turns into paths;
- a commit id that is not 40 hex digits, in a header or in the repo info;
- a hub that keeps failing (5xx): one retry, then the client's own ``HTTPError`` (its cache
  may still serve), instead of its five retries over ~24 s; ``answered`` says what the hub
  answered, where the client would say "unreachable".

``contained`` checks, after a download, that every path resolves inside the cache (a ref left
by an older, unchecked client cannot lead outside either).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from speechpipe.errors import InputError, ModelError, echoed

__all__ = ["UnsafeHubAnswer", "guard_hub_client", "contained", "COMMIT", "ETAG",
           "HUB_RETRIES", "shown", "answered"]

COMMIT = re.compile(r"[0-9a-f]{40}")
SHA256 = re.compile(r"[0-9a-f]{64}")
ETAG = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # a git blob's SHA-1, a large file's SHA-256
HUB_RETRIES = 1  # per request, after the first 5xx answer (the client waits 1 s before it)


shown = echoed  # a value for a one-line refusal: the one helper every refusal uses


class UnsafeHubAnswer(InputError):
    """The hub answered a value the hub client would use as a path: refused (exit code 2)."""


def answered(response: Any) -> str:
    """What the hub answered, in a few words: ``the hub answered HTTP 500 (...) to GET /x``."""
    reason = str(getattr(response, "reason", "") or "").strip()
    method = response.request.method if response.request is not None else "GET"
    path = urlsplit(response.url).path
    path = path if len(path) <= 60 else "…" + path[-59:]
    return (f"the hub answered HTTP {response.status_code}"
            f"{' ' + shown(reason, quote=False, limit=40) if reason else ''} to {method} "
            f"{shown(path, quote=False)}")


def _etag_as_the_client_reads_it(headers: Any) -> str | None:
    raw = headers.get("X-Linked-Etag") or headers.get("ETag")
    # huggingface_hub's own normalisation (``_normalize_etag``), character for character
    return None if raw is None else raw.lstrip("W/").strip('"')


class _ResponseCheck:
    """A ``requests`` response hook: raises before a bad answer reaches the hub client."""

    def __init__(self) -> None:
        self._failures: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def __call__(self, response: Any, *args: Any, **kwargs: Any) -> Any:
        method = response.request.method if response.request is not None else "GET"
        commit = response.headers.get("X-Repo-Commit")
        if commit is not None and not COMMIT.fullmatch(commit):
            raise UnsafeHubAnswer(f"the hub answered a commit id that is not 40 hex digits "
                                  f"({shown(commit)}): refused, nothing written")
        if method == "HEAD" and response.status_code < 400:  # the answers it reads metadata from
            etag = _etag_as_the_client_reads_it(response.headers)
            if etag is not None and not ETAG.fullmatch(etag):
                raise UnsafeHubAnswer(f"the hub answered an ETag that is not a SHA-1 or SHA-256 "
                                      f"({shown(etag)}): refused, nothing written")
            xet = response.headers.get("X-Xet-Hash")  # handed to hf_xet, which caches by it
            if xet is not None and not SHA256.fullmatch(xet):
                raise UnsafeHubAnswer(f"the hub answered an X-Xet-Hash that is not a SHA-256 "
                                      f"({shown(xet)}): refused, nothing written")
        if response.status_code >= 500:
            key = (method, response.url)
            with self._lock:
                self._failures[key] = failures = self._failures.get(key, 0) + 1
            if failures > HUB_RETRIES:  # as the client's own last try: its cache may serve
                import requests

                raise requests.HTTPError(answered(response), response=response)
        elif response.status_code == 200 and "/api/" in urlsplit(response.url).path:
            self._check_repo_info(response)
        return response

    @staticmethod
    def _check_repo_info(response: Any) -> None:
        if "json" not in response.headers.get("Content-Type", ""):
            return
        try:
            info = response.json()
        except RecursionError:
            raise UnsafeHubAnswer("the hub answered a repo info nested too deeply: "
                                  "refused") from None
        except ValueError:
            return  # the hub client says what is wrong with it
        sha = info.get("sha") if isinstance(info, dict) else None
        if sha is not None and not (isinstance(sha, str) and COMMIT.fullmatch(sha)):
            raise UnsafeHubAnswer(f"the hub answered a commit id that is not 40 hex digits "
                                  f"({shown(sha)}): refused, nothing written")


_installed = False


def guard_hub_client(hub: Any) -> None:
    """Hook the checks into every session the hub client makes (once per process)."""
    global _installed
    if _installed:
        return
    configure: Callable[..., None] | None = getattr(hub, "configure_http_backend", None)
    if configure is None:  # huggingface_hub >= 1.0 moved to httpx: refuse rather than trust
        raise ModelError(f"models pull needs huggingface_hub 0.x (this is "
                         f"{getattr(hub, '__version__', '?')}): pip install 'huggingface_hub<1'")
    import requests
    from huggingface_hub.utils import _http  # the client's own factory (offline mode, ids)

    default: Callable[[], requests.Session] = getattr(
        _http, "_default_backend_factory", requests.Session)
    check = _ResponseCheck()

    def checked_session() -> requests.Session:
        session = default()
        session.hooks["response"].append(check)
        return session

    configure(backend_factory=checked_session)
    _installed = True


def contained(paths: list[Path], cache: Path) -> None:
    """Every path (its links followed) lies inside ``cache``, else ``UnsafeHubAnswer``."""
    root = cache.resolve()
    for path in paths:
        if not path.resolve().is_relative_to(root):
            raise UnsafeHubAnswer(f"a downloaded file leads outside the hub cache "
                                  f"({shown(str(path))}): refused")
