"""Fault injection at the shared workers' boundaries: a seam for tests and drills only.

Off unless a test (or a drill) arms it: ``hit(point)`` is one dict lookup on an empty dict
otherwise. The workers call ``hit`` on their own thread just before the model call, so an
injected fault behaves as the model failing there would:

- ``raise``: the call raises ``InjectedFault`` (a RuntimeError, as CTranslate2 or
  onnxruntime would raise);
- ``hang``: the call blocks until ``release()`` / ``clear()`` or ``seconds`` pass (bounded,
  so a test never leaves a thread behind for long), then goes on;
- ``slow``: the call sleeps ``seconds`` first;
- ``full`` / ``readonly``: the call raises ``InjectedDiskFault``, an ``OSError`` with
  ``ENOSPC`` / ``EROFS``, as a write on a full or read-only filesystem would (for the cache
  points: the tests run as root here, where a read-only folder is writable anyway, and
  mounting a tiny tmpfs needs root; the seam works for any user).

Points: ``asr`` (the ASR batcher's engine call), ``mt`` (the text-MT worker's batch),
``tts`` (a voice's synthesis; ``tts:<voice>`` for one voice only), ``cache:write`` (a write
into the model cache under ``$SPEECHPIPE_HOME``: the restricted decoders' kept tokens). Each
armed fault fires ``times`` times, then disarms itself.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["InjectedDiskFault", "InjectedFault", "arm", "armed", "clear", "hit", "injected",
           "release"]

KINDS = ("raise", "hang", "slow", "full", "readonly")
_DISK = {"full": errno.ENOSPC, "readonly": errno.EROFS}


class InjectedFault(RuntimeError):
    """The exception an armed ``raise`` fault throws at a worker boundary."""


class InjectedDiskFault(OSError):
    """The exception an armed ``full`` / ``readonly`` fault throws (``errno`` set)."""


@dataclass
class _Fault:
    kind: str
    times: int
    seconds: float


_lock = threading.Lock()
_armed: dict[str, _Fault] = {}
_release = threading.Event()
fired: dict[str, int] = {}  # point -> faults fired (for the tests' own checks)


def arm(point: str, kind: str, *, times: int = 1, seconds: float = 10.0) -> None:
    """Make the next ``times`` calls at ``point`` fail with ``kind``."""
    if kind not in KINDS or times < 1 or seconds < 0:
        raise ValueError(f"fault kind must be one of {KINDS}, times >= 1, seconds >= 0")
    with _lock:
        _release.clear()
        _armed[point] = _Fault(kind, times, seconds)


def release() -> None:
    """Let every hanging call go on."""
    _release.set()


def clear() -> None:
    """Disarm everything and release hanging calls."""
    with _lock:
        _armed.clear()
    _release.set()


def armed() -> bool:
    return bool(_armed)


def hit(point: str) -> None:
    """Called by a worker at ``point`` (e.g. ``tts:en_US-joe-medium``; ``tts`` matches it;
    ``cache:write`` matches only itself or ``cache``)."""
    if not _armed:
        return
    with _lock:
        name = point if point in _armed else point.split(":", 1)[0]
        fault = _armed.get(name)
        if fault is None:
            return
        fault.times -= 1
        if fault.times <= 0:
            del _armed[name]
        fired[name] = fired.get(name, 0) + 1
    if fault.kind == "raise":
        raise InjectedFault(f"injected fault at {point}")
    if fault.kind in _DISK:
        code = _DISK[fault.kind]
        raise InjectedDiskFault(code, os.strerror(code) + f" (injected at {point})")
    if fault.kind == "hang":
        _release.wait(fault.seconds)
    else:
        time.sleep(fault.seconds)


@contextlib.contextmanager
def injected(point: str, kind: str, *, times: int = 1, seconds: float = 10.0) -> Iterator[None]:
    """``arm`` for the block; everything is cleared (and released) on the way out."""
    arm(point, kind, times=times, seconds=seconds)
    try:
        yield
    finally:
        clear()
