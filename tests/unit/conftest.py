"""The unit tier's guard: a test under tests/unit starts no process and touches no network.

"Network" here is any socket but an in-process pair: while a unit test runs (its fixtures'
setup and teardown included), from any thread,

- starting a process: ``subprocess.Popen`` (so ``subprocess.run``, ``os.popen`` and
  asyncio's subprocesses too), ``os.fork``, ``os.forkpty``, ``os.posix_spawn(p)``,
  ``os.system``, and ``_posixsubprocess.fork_exec``, where ``multiprocessing`` ends;
- opening a socket: any new ``socket.socket`` (TCP, UDP, Unix, raw; loopback included, so an
  in-process server on 127.0.0.1 is the cli tier's), but ``socket.socketpair()`` (asyncio's
  event loop wakes itself through one) and the sockets made from an existing descriptor;
- resolving a name: ``socket.getaddrinfo`` and the ``gethostby*`` calls, for anything but an
  IP literal,

raises ``UnitTierError`` at the call and fails the test, naming the call, even when the code
under test swallowed the error. Such a test belongs in tests/cli (docs/layout.md, "Tests").
What a module does while it is being imported is left alone (urllib3 probes for IPv6 with a
socket at import; whichever test imports it first would fail). The wrappers are installed
once, when this file is imported, and refuse only while a unit test's phase runs: tests of
other tiers in the same process are left alone.
"""

from __future__ import annotations

import _posixsubprocess  # type: ignore[import-not-found]
import ipaddress
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest


class UnitTierError(PermissionError):
    """A unit test started a process, opened a socket or resolved a name."""


class UnitGuard:
    """Records what a unit test's phase did that the tier forbids."""

    def __init__(self) -> None:
        self.active = False
        self.calls: list[str] = []
        self._lock = threading.Lock()

    def refuse(self, what: str) -> None:
        if not self.active or _importing():
            return
        with self._lock:
            self.calls.append(what)
        raise UnitTierError(f"a unit test {what}: move it to tests/cli (tests/unit/conftest.py)")

    def phase(self) -> Iterator[None]:
        self.calls.clear()
        self.active = True
        try:
            result = yield
        except BaseException as exc:
            self.active = False
            if self.calls:
                raise pytest.fail.Exception(self._report(), pytrace=False) from exc
            raise
        self.active = False
        if self.calls:
            pytest.fail(self._report(), pytrace=False)
        return result

    def _report(self) -> str:
        counts = dict.fromkeys(self.calls, 0)
        for call in self.calls:
            counts[call] += 1
        return "\n".join(f"a unit test {call}" + (f" ({n} times)" if n > 1 else "")
                         for call, n in counts.items()) + \
            ": the unit tier starts no process and opens no socket; move it to tests/cli"


GUARD = UnitGuard()


def _importing() -> bool:
    """Whether the caller runs inside an import (module-level code of a module loading)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _is_ip_literal(host: Any) -> bool:
    if host is None:
        return True
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    try:
        ipaddress.ip_address(str(host).split("%", 1)[0])
    except ValueError:
        return False
    return True


def _wrap(owner: Any, name: str, check: Callable[..., str | None]) -> None:
    original = getattr(owner, name)

    def guarded(*args: Any, **kwargs: Any) -> Any:
        what = check(*args, **kwargs)
        if what:
            GUARD.refuse(what)
        return original(*args, **kwargs)

    guarded.__name__ = getattr(original, "__name__", name)
    guarded.__doc__ = original.__doc__
    guarded.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(owner, name, guarded)


def _program(args: Any) -> str:
    words = args.split() if isinstance(args, (str, bytes)) else list(args)
    return str(words[0]) if words else "?"


def _install() -> None:
    _wrap(subprocess.Popen, "__init__",
          lambda self, args, *a, **k: f"starts a process (subprocess.Popen: {_program(args)})")
    _wrap(_posixsubprocess, "fork_exec", lambda *a, **k: "starts a process (fork_exec)")
    for name in ("fork", "forkpty", "system", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            _wrap(os, name, lambda *a, _name=name, **k: f"starts a process (os.{_name})")

    def new_socket(self: Any, family: Any = -1, type: Any = -1, proto: Any = -1,
                   fileno: Any = None) -> str | None:
        if fileno is not None:  # socketpair(), accept(), fromfd(): made from a descriptor
            return None
        return "opens a socket (socket.socket)"

    _wrap(socket.socket, "__init__", new_socket)
    _wrap(socket, "getaddrinfo",
          lambda host, *a, **k: None if _is_ip_literal(host) else
          f"resolves a name (socket.getaddrinfo: {host!r})")
    for name in ("gethostbyname", "gethostbyname_ex", "gethostbyaddr"):
        _wrap(socket, name, lambda host, *a, _name=name, **k: None if _is_ip_literal(host) else
              f"resolves a name (socket.{_name}: {host!r})")


_install()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    return (yield from GUARD.phase())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    return (yield from GUARD.phase())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    return (yield from GUARD.phase())
