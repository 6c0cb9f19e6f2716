"""Test traffic stays on this machine: a socket guard for the test process (a pytest plugin).

While tests run, a TCP or UDP ``connect``/``connect_ex``/``sendto``/``sendmsg`` from a Python
socket to an address outside ``127.0.0.0/8``, ``::1`` and ``198.18.0.0/15`` (the test
address a private network namespace gives loopback, see ``scripts/netns-pytest``) raises
``NonLocalTrafficError`` at the call and is recorded; the test phase it happened in then
fails with the address in the message, even when the caller swallowed the error (asyncio's
datagram transports hand send errors to the protocol; a server task may log and go on).
asyncio's stream and datagram paths (``sock_connect``, ``create_connection``,
``create_datagram_endpoint(remote_addr=...)``, ``DatagramTransport.sendto``) all go through
these socket methods, so aioice's STUN checks and websockets clients are covered. Unix,
netlink and other non-IP sockets are left alone.

Not covered: subprocesses the tests start (Chromium, ``speechpipe`` CLIs, Ray workers) and
sockets that native code opens without Python (gRPC core, libwebrtc). The private network
namespace ``.ci/run`` runs the tests in covers those.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest

__all__ = [
    "local_ice",
    "local_traffic_only",
    "pytest_runtest_call",
    "pytest_runtest_setup",
    "pytest_runtest_teardown",
    "pytest_sessionfinish",
]

ALLOWED_NETWORKS = (
    ipaddress.ip_network("127.0.0.0/8"),
    ipaddress.ip_network("::1/128"),
    ipaddress.ip_network("198.18.0.0/15"),
)
ALLOWED_TEXT = "127.0.0.0/8, ::1 and 198.18.0.0/15"
NETNS_SCRIPT = "scripts/netns-pytest"


class NonLocalTrafficError(PermissionError):
    """A test tried to reach an address outside the allowed loopback/test ranges."""


def is_local_address(host: str) -> bool:
    """Whether an IP literal (IPv6 zone and IPv4-mapped forms accepted) is allowed."""
    address = ipaddress.ip_address(host.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in ALLOWED_NETWORKS)


def _ip_literals(host: str, family: int) -> list[str]:
    """The IP addresses ``host`` stands for in a socket address (names are resolved the way
    the socket call would; a name that does not resolve yields none: that call fails anyway)."""
    if host == "":
        return ["0.0.0.0" if family == socket.AF_INET else "::"]
    if host == "<broadcast>":
        return ["255.255.255.255"]
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
        return [host]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, family)
    except OSError:
        return []
    return [str(info[4][0]) for info in infos]


class Guard:
    """Wraps the IP-sending methods of ``socket.socket``; records every refused call."""

    METHODS = ("connect", "connect_ex", "sendto", "sendmsg")

    def __init__(self) -> None:
        self.violations: list[str] = []
        self.reported = 0
        self._saved: dict[str, Any] = {}

    def check(self, sock: socket.socket, address: Any, call: str) -> None:
        if sock.family not in (socket.AF_INET, socket.AF_INET6) or not isinstance(address, tuple):
            return
        host, port = address[0], address[1]
        for ip in _ip_literals(str(host), sock.family):
            if not is_local_address(ip):
                kind = "UDP" if sock.type == socket.SOCK_DGRAM else "TCP"
                message = (
                    f"refused test traffic to {ip} port {port} ({kind} {call}): tests may "
                    f"reach only {ALLOWED_TEXT} (tests/netguard.py)"
                )
                self.violations.append(message)
                raise NonLocalTrafficError(message)

    def install(self) -> None:
        if self._saved:
            return
        for name in self.METHODS:
            self._saved[name] = socket.socket.__dict__.get(name)
            setattr(socket.socket, name, self._wrap(name, getattr(socket.socket, name)))

    def uninstall(self) -> None:
        for name, previous in self._saved.items():
            if previous is None:
                delattr(socket.socket, name)
            else:
                setattr(socket.socket, name, previous)
        self._saved.clear()

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        check = self.check
        if name in ("connect", "connect_ex"):

            def guarded(sock: socket.socket, address: Any) -> Any:
                check(sock, address, name)
                return original(sock, address)

        elif name == "sendto":  # sendto(data, address) or sendto(data, flags, address)

            def guarded(sock: socket.socket, data: Any, *args: Any) -> Any:
                if args:
                    check(sock, args[-1], name)
                return original(sock, data, *args)

        else:  # sendmsg(buffers, ancdata, flags, address)

            def guarded(sock: socket.socket, *args: Any) -> Any:
                if len(args) > 3 and args[3] is not None:
                    check(sock, args[3], name)
                return original(sock, *args)

        guarded.__name__ = name
        guarded.__doc__ = original.__doc__
        return guarded

    def unreported(self) -> str:
        """The violations since the last call, one line per distinct one ("" if none)."""
        new = self.violations[self.reported :]
        self.reported = len(self.violations)
        counts = dict.fromkeys(new, 0)
        for message in new:
            counts[message] += 1
        return "\n".join(m + (f" ({n} times)" if n > 1 else "") for m, n in counts.items())


GUARD = Guard()


@pytest.fixture(scope="session", autouse=True)
def local_traffic_only() -> Iterator[Guard]:
    """The socket guard, installed for the whole test session."""
    GUARD.install()
    yield GUARD
    GUARD.uninstall()


def _fail_on_new_violations() -> Iterator[None]:
    try:
        result = yield
    except BaseException as exc:
        new = GUARD.unreported()
        if new:
            raise pytest.fail.Exception(new, pytrace=False) from exc
        raise
    new = GUARD.unreported()
    if new:
        pytest.fail(new, pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    return (yield from _fail_on_new_violations())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    return (yield from _fail_on_new_violations())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    return (yield from _fail_on_new_violations())


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Traffic outside any test phase (e.g. a server still running) fails the run too."""
    new = GUARD.unreported()
    if new:
        print("\n" + new)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def ice_addresses_outside() -> tuple[list[str], list[str]]:
    """(allowed, refused) host addresses aioice would gather ICE candidates on here."""
    from aioice.ice import get_host_addresses

    gathered = get_host_addresses(use_ipv4=True, use_ipv6=True)
    allowed = [a for a in gathered if is_local_address(a)]
    return allowed, [a for a in gathered if not is_local_address(a)]


@pytest.fixture(scope="session")
def local_ice() -> None:
    """Skips a WebRTC test unless aiortc's ICE would use only allowed addresses here (in a
    private network namespace: the test address on loopback; elsewhere: the machine's
    interfaces, which the guard refuses)."""
    allowed, refused = ice_addresses_outside()
    if refused:
        pytest.skip(
            f"WebRTC ICE candidates would use the machine's interface address {refused[0]}; "
            f"run the tests via {NETNS_SCRIPT} to run them in a private network namespace"
        )
    if not allowed:
        pytest.skip(
            "no address for WebRTC ICE candidates (aioice leaves out 127.0.0.1): give "
            f"loopback a test address, e.g. `ip addr add 198.18.0.1/32 dev lo` ({NETNS_SCRIPT})"
        )
