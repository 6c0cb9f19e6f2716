"""Security flags of ``speechpipe serve`` and the ``speechpipe token`` command.

::

    export SPEECHPIPE_AUTH_SECRET="$(speechpipe token --new-secret)"
    speechpipe serve --allow-origin https://translate.example.com
    speechpipe token --ttl 3600 --subject alice      # prints one session token

The token logic itself is ``transport/auth.py`` (HS256 JWTs through PyJWT), the limits are
``transport/quotas.py``; this module only maps command-line flags onto them.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from speechpipe.config import Alias, add_aliases
from speechpipe.errors import InputError, echoed

if TYPE_CHECKING:
    from speechpipe.transport.limits import ServerLimits

__all__ = [
    "SECRET_ENV",
    "register",
    "SECURITY_ALIASES",
    "add_security_arguments",
    "security_limits",
    "resolve_secret",
]

SECRET_ENV = "SPEECHPIPE_AUTH_SECRET"


def _positive_or_off(text: str) -> float | None:
    value = float(text)
    return None if value <= 0 else value


def _ratio(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:  # nan included
        raise argparse.ArgumentTypeError(f"not a ratio in [0, 1]: {text!r}")
    return value


def _count_or_off(text: str) -> int | None:
    return int(text) or None


# Each a shorthand of one leaf of ``limits.*`` / ``quotas.*`` (``speechpipe.config.Alias``)
SECURITY_ALIASES = (
    Alias("--allow-origin", "limits.allowed_origins",
          "a web origin allowed to open WebSocket sessions, e.g. https://example.com "
          "(repeatable; '*' = any; none: same origin only)", repeat=True, metavar="ORIGIN"),
    Alias("--allow-host", "limits.allowed_hosts",
          "a host name this server answers to besides IP addresses and localhost, e.g. "
          "translate.example.com (repeatable; '*' = any). Guards against DNS rebinding; "
          "needed behind a proxy that forwards Host, and for scraping /metrics by name",
          repeat=True, metavar="NAME"),
    Alias("--max-session-s", "quotas.max_session_s",
          "maximum session length in seconds (0 = no limit)", type=_positive_or_off),
    Alias("--max-idle-s", "quotas.max_idle_s",
          "close a session after this many seconds without input (0 = off)",
          type=_positive_or_off),
    Alias("--rate", "quotas.messages_per_s",
          "client frames per second allowed, pings included (token bucket rate)", type=float),
    Alias("--burst", "quotas.message_burst",
          "client frames allowed in a burst (token bucket size)", type=int),
    Alias("--audio-window-s", "quotas.audio_window_s",
          "audio pace rule: close a session (4010) whose audio over any S seconds is under "
          "--min-audio-ratio of real time (0 = off)", type=_positive_or_off, metavar="S"),
    Alias("--min-audio-ratio", "quotas.min_audio_ratio",
          "seconds of audio per second that must arrive over every audio window",
          type=_ratio, metavar="R"),
    Alias("--max-sdp-bytes", "quotas.max_sdp_bytes", "largest WebRTC offer accepted", type=int),
    Alias("--max-sessions-per-token", "quotas.max_sessions_per_token",
          "concurrent sessions one issued token may hold (0 = no limit)", type=_count_or_off),
    Alias("--max-sessions-per-ip", "quotas.max_sessions_per_ip",
          "concurrent connections from one address (0 = no limit)", type=_count_or_off),
    Alias("--client-ip-header", "quotas.client_ip_header",
          "take the client address from this header (e.g. X-Forwarded-For; only behind a "
          "reverse proxy that sets it)", metavar="NAME"),
    Alias("--ping-interval", "limits.ping_interval_s",
          "seconds between keepalive pings (0 = off)", type=_positive_or_off),
    Alias("--ping-timeout", "limits.ping_timeout_s",
          "drop a client that does not answer a ping within this many s (0 = off)",
          type=_positive_or_off),
    Alias("--log-content", "limits.log_content",
          "DEBUGGING ONLY: log captions and translations at DEBUG level (never audio or "
          "tokens)", switch=True),
)


def add_security_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags for ``serve``: auth, origins, quotas, keepalive and the content-logging switch."""
    group = parser.add_argument_group("security and quotas")
    group.add_argument("--auth-secret", default=None,
                       help=f"require signed session tokens made with this secret (default: "
                            f"${SECRET_ENV}; prefer the variable or --auth-secret-file, since "
                            "arguments show in the process list)")
    group.add_argument("--auth-secret-file", default=None,
                       help="read the auth secret from this file")
    add_aliases(group, SECURITY_ALIASES)


def resolve_secret(args: argparse.Namespace) -> str | None:
    """The auth secret from --auth-secret-file, --auth-secret or the environment."""
    path = getattr(args, "auth_secret_file", None)
    if path:
        try:
            return Path(path).read_text().strip() or None
        except OSError as exc:
            raise InputError(f"{path}: cannot read the auth secret ({exc.strerror})") from None
    return getattr(args, "auth_secret", None) or os.environ.get(SECRET_ENV) or None


def security_limits(args: argparse.Namespace, limits: ServerLimits) -> ServerLimits:
    """``limits`` with the signed-token authority of ``args`` (the secret is never a leaf of
    the tree: ``speechpipe config`` prints the tree), after checking the allowed origins and
    host names; warns when a non-loopback server takes sessions without auth."""
    from speechpipe.transport.auth import TokenAuthority

    secret = resolve_secret(args)
    auth = TokenAuthority(secret) if secret else None
    host = getattr(args, "host", "127.0.0.1")
    if auth is None and limits.token is None and not _is_loopback(host):
        print(f"speechpipe: warning: serving on {host} without --auth-secret: anyone who can "
              "reach this port can open sessions", file=sys.stderr)
    from speechpipe.transport.hosts import HeaderError, parse_host, parse_origin

    for origin in limits.allowed_origins:
        try:
            if origin.strip() != "*":
                parse_origin(origin)
        except HeaderError:
            raise InputError(f"--allow-origin {echoed(origin)}: not an origin such as "
                             "https://example.com") from None
    for name in limits.allowed_hosts:
        try:
            if name.strip() != "*":
                parse_host(name)
        except HeaderError:
            raise InputError(f"--allow-host {echoed(name)}: not a host name") from None
    return dataclasses.replace(limits, auth=auth)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# --------------------------------------------------------------------------- speechpipe token


def register(commands: argparse._SubParsersAction) -> None:
    """Add ``speechpipe token`` to the command's subparsers."""
    token = commands.add_parser(
        "token", help="issue a signed session token for a server run with --auth-secret"
    )
    token.add_argument("--ttl", type=float, default=3600.0,
                       help="seconds until the token expires (default 3600)")
    token.add_argument("--subject", default="", help="who the token is for (shown to no one; "
                                                     "for your own bookkeeping)")
    token.add_argument("--auth-secret", default=None,
                       help=f"the server's secret (default: ${SECRET_ENV})")
    token.add_argument("--auth-secret-file", default=None, help="read the secret from a file")
    token.add_argument("--room", default=None,
                       help="rooms: the room this token is for ('new': a fresh random id, "
                            "printed on stderr)")
    token.add_argument("--role", default=None, choices=("speaker", "listener", "participant"),
                       help="rooms: the only role this token may take (a listener cannot speak)")
    token.add_argument("--new-secret", action="store_true",
                       help="print a new random secret for --auth-secret instead")
    token.set_defaults(handler=cmd_token)


def cmd_token(args: argparse.Namespace) -> int:
    """``speechpipe token``: issue a session token (or a new secret)."""
    from speechpipe.transport.auth import TokenAuthority, new_secret

    if args.new_secret:
        print(new_secret())
        return 0
    secret = resolve_secret(args)
    if not secret:
        raise InputError(f"no secret: pass --auth-secret, --auth-secret-file or set {SECRET_ENV}")
    room = args.room
    if room == "new":
        from speechpipe.transport.room import new_room_id

        room = new_room_id()
        print(f"room: {room}", file=sys.stderr)
    elif room is not None and not (0 < len(room) <= 64):
        raise InputError("--room must be 1-64 characters (or 'new')")
    print(TokenAuthority(secret).issue(ttl_s=args.ttl, subject=args.subject, room=room,
                                       role=args.role))
    return 0
