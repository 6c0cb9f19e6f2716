"""What a ``/ws`` connection uses of its server, and what its paths use of the connection.

``ServerObserver`` (the app layer's metrics hooks), ``CapacityGate`` (its admission control)
and ``ServerSide`` (``transport.websocket_server.SpeechServer`` as a connection sees it) are
the seams to the application: the transport never imports it. ``ConnectionShell`` is what a
speaker's path (``transport.speaker_path``) and a listener's (``transport.listener_path``)
use of their connection (``transport.ws_connection.WsConnection``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Protocol

from websockets.asyncio.server import ServerConnection

from speechpipe.stages.frames import OutputEvent, StatusEvent
from speechpipe.transport.connection_core import ConnectionCore
from speechpipe.transport.gate import AccessGate, Admission
from speechpipe.transport.limits import ServerLimits
from speechpipe.transport.peer_link import PeerLink
from speechpipe.transport.quotas import Expired, QuotaGuard
from speechpipe.transport.room_shell import RoomHub
from speechpipe.transport.session_api import SessionFactory

__all__ = ["ServerObserver", "CapacityGate", "ServerSide", "NullObserver", "ConnectionShell"]


class ServerObserver(Protocol):
    """Hooks for the app layer's metrics; the transport never imports a metrics registry."""

    def session_opened(self) -> None:
        """A session started."""
        ...

    def session_closed(self, seconds: float, close_code: int | None) -> None:
        """A session lasting ``seconds`` ended with ``close_code`` (None: by the client)."""
        ...

    def output_event(self, event: OutputEvent) -> None:
        """A session emitted ``event``."""
        ...

    def error(self, code: str) -> None:
        """A session or connection failed with this error code."""
        ...

    def upgrade_refused(self, status: int, reason: str | None = None) -> None:
        """The HTTP upgrade of ``/ws`` was refused with ``status`` (400/401/403/429/503);
        ``reason`` when the status alone does not say it (403 ``host_not_served``)."""

    def connection_closed(self, code: int | None, reason: str, *, session: bool) -> None:
        """A WebSocket connection ended. ``code``: the close code the server sent (``None``
        when the client closed or vanished first); ``reason``: a short server-chosen error
        code; ``session``: whether a session had started on it."""

    def rooms_changed(self, rooms: int, listeners: int) -> None:
        """There are ``rooms`` rooms with ``listeners`` listeners now."""

    def fanout_dropped(self) -> None:
        """A room listener's outbox overflowed (it is closed with ``listener_too_slow``)."""

    def fanout_delay(self, seconds: float, cpu_s: float = 0.0) -> None:
        """A room message reached a listener's socket ``seconds`` after it was published;
        writing it there took ``cpu_s`` of the server's CPU (the fan-out cost)."""


class CapacityGate(Protocol):
    """The app layer's admission control (``speechpipe.server.admission.AdmissionGate``)."""

    def slot(
        self, client: str, notify: Callable[[StatusEvent], Awaitable[None]], *,
        token: str = "", ticket: str = "", resume: str = "",
    ) -> contextlib.AbstractAsyncContextManager[str | None]:
        """Hold one session slot while the session runs. While the server is full it waits,
        sending ``status`` events through ``notify``; raises ``AdmissionError`` to refuse
        (``SessionRedirect``: the slot is on another node). In cluster mode the slot yields
        the session's cluster ticket, which becomes its ``session`` id."""
        ...


class ServerSide(Protocol):
    """What a connection uses of its server (``transport.websocket_server.SpeechServer``)."""

    factory: SessionFactory
    limits: ServerLimits
    observer: ServerObserver
    gate: AccessGate
    capacity: CapacityGate | None
    webrtc: bool
    rooms: RoomHub


class NullObserver:
    """A ``ServerObserver`` that records nothing (a server without metrics)."""

    def session_opened(self) -> None:
        pass

    def session_closed(self, seconds: float, close_code: int | None) -> None:
        pass

    def output_event(self, event: OutputEvent) -> None:
        pass

    def error(self, code: str) -> None:
        pass

    def upgrade_refused(self, status: int, reason: str | None = None) -> None:
        pass

    def connection_closed(self, code: int | None, reason: str, *, session: bool) -> None:
        pass

    def rooms_changed(self, rooms: int, listeners: int) -> None:
        pass

    def fanout_dropped(self) -> None:
        pass

    def fanout_delay(self, seconds: float, cpu_s: float = 0.0) -> None:
        pass


class ConnectionShell(Protocol):
    """What a connection's speaker or listener path uses of it: the socket (whose only
    writer the path's sender is), the core, the quotas, the WebRTC link, and ``recv`` (the
    next client message under the quotas; a fatal one raises ``transport.closing.Close``).
    ``id`` is the session's id (a cluster slot may replace it before ``started``)."""

    id: str
    ws: ServerConnection
    server: ServerSide
    limits: ServerLimits
    observer: ServerObserver
    core: ConnectionCore
    quota: QuotaGuard
    link: PeerLink
    admission: Admission | None

    async def recv(self) -> str | bytes | Expired:
        """The next client message under the quotas (rate, idle, session length)."""
        ...
