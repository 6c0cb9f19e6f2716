"""``Host`` and ``Origin`` headers: strict parsing, and which host names the server answers to.

A page on ``http://evil.example:8765`` whose DNS name is re-pointed at 127.0.0.1 (DNS
rebinding) reaches a loopback server as a same-origin request: its ``Host`` and ``Origin``
both say ``evil.example``. Comparing the two cannot catch that; checking ``Host`` against the
names the server really serves does. ``HostPolicy`` answers for:

- IP literals (``127.0.0.1``, ``[::1]``, a LAN address): a rebinding attack needs a DNS name,
  and a page whose own address is an IP literal is what it says;
- ``localhost`` and ``*.localhost`` (RFC 6761: always loopback);
- the names the operator lists (``speechpipe serve --allow-host NAME``; ``*`` = any).

Malformed values raise ``HeaderError`` (answered with HTTP 400); a header that may appear only
once (``Host``, ``Origin``) appearing twice is malformed too (RFC 9110 7.2, RFC 6454 7.3).
Pure: no sockets, no event loop.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "HeaderError",
    "WebOrigin",
    "HostPolicy",
    "single_header",
    "parse_host",
    "parse_origin",
    "is_ip_literal",
]

DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
_NAME = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.?")  # a DNS name or an IPv4 address
_HOST = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[^\[\]:/?#@\s]+)(:(?P<port>[0-9]{1,5}))?")
_ORIGIN = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)")


class HeaderError(ValueError):
    """A malformed or duplicated header: the request gets HTTP 400."""


class _Headers(Protocol):
    def get_all(self, key: str) -> list[str]: ...


def single_header(headers: _Headers, name: str) -> str | None:
    """The value of a header that may appear at most once; ``HeaderError`` if repeated."""
    values = headers.get_all(name)
    if len(values) > 1:
        raise HeaderError(f"more than one {name} header")
    return values[0] if values else None


def _host_and_port(text: str, what: str) -> tuple[str, int | None]:
    match = _HOST.fullmatch(text)
    if match is None:
        raise HeaderError(f"malformed {what}")
    host, port_text = match["host"], match["port"]
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise HeaderError(f"malformed {what}: bad IPv6 address") from None
    elif not _NAME.fullmatch(host):
        raise HeaderError(f"malformed {what}: bad host name")
    port = None
    if port_text is not None:
        port = int(port_text)
        if not 0 < port < 65536:
            raise HeaderError(f"malformed {what}: bad port")
    return host.lower().rstrip("."), port


def parse_host(value: str) -> tuple[str, int | None]:
    """``Host: name[:port]`` -> (lower-case name, port or None). IPv6 stays bracketed."""
    return _host_and_port(value.strip(), "Host header")


@dataclass(frozen=True, slots=True)
class WebOrigin:
    """An origin as RFC 6454 serializes it: ``scheme://host[:port]``, port made explicit."""

    scheme: str
    host: str
    port: int | None

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host}" + (f":{self.port}" if self.port else "")


def parse_origin(value: str) -> WebOrigin | None:
    """An ``Origin`` header (or an ``--allow-origin`` value) -> ``WebOrigin``; ``None`` for
    the opaque origin ``null``. Anything with a path, query, user or bad port is malformed."""
    text = value.strip()
    if text == "null":
        return None
    match = _ORIGIN.fullmatch(text.rstrip("/") if text.count("/") == 3 else text)
    if match is None:
        raise HeaderError("malformed Origin header")
    scheme = match["scheme"].lower()
    host, port = _host_and_port(match["rest"], "Origin header")
    if port is None:
        port = DEFAULT_PORTS.get(scheme)
    return WebOrigin(scheme, host, port)


def is_ip_literal(host: str) -> bool:
    """Whether ``host`` is an IPv4 or IPv6 address (brackets allowed)."""
    try:
        ipaddress.ip_address(host[1:-1] if host.startswith("[") else host)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """Which ``Host`` names this server answers to (see the module docstring)."""

    allowed: tuple[str, ...] = ()

    def allows(self, host: str) -> bool:
        """``host`` as ``parse_host`` returns it (lower case, no port)."""
        if is_ip_literal(host) or host == "localhost" or host.endswith(".localhost"):
            return True
        names = {name.strip().lower().rstrip(".") for name in self.allowed}
        return "*" in names or host in names
