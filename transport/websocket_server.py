"""The live server: one port for the demo page, ``/ws`` sessions, metrics and health checks.

Built on websockets' asyncio server. Plain HTTP GETs are answered in ``process_request``
(``/``, static files, ``/metrics``, ``/healthz``, ``/readyz``, ``/voices``); ``/ws`` upgrades
to a session speaking the protocol in ``transport.protocol`` (reference: ``docs/protocol.md``).

Three layers (websockets' shape: ``protocol.py``, ``asyncio/connection.py``,
``asyncio/router.py``): ``SpeechServer`` here accepts connections and shuts them down;
``transport.http_routes`` answers plain HTTP and checks upgrades; each connection is a
``transport.ws_connection`` (the asyncio layer) around a ``transport.connection_core``
(the protocol's rules, without I/O); WebRTC signalling runs in the connection's reader.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from websockets.asyncio.server import Server, ServerConnection
from websockets.asyncio.server import serve as ws_serve
from websockets.exceptions import ConnectionClosed

from speechpipe.transport.auth import OriginPolicy, StaticToken
from speechpipe.transport.caption_routes import CaptionRoutes
from speechpipe.transport.frame_guard import (
    FrameLimits,
    guarded_connection_class,
)
from speechpipe.transport.gate import AccessGate
from speechpipe.transport.hosts import (
    HostPolicy,
    is_ip_literal,
)
from speechpipe.transport.http_routes import HttpRoutes
from speechpipe.transport.limits import ServerLimits
from speechpipe.transport.privacy import ContentFreeLogger, guard_library_logs
from speechpipe.transport.protocol import (
    dumps,
)
from speechpipe.transport.room import RoomRegistry
from speechpipe.transport.room_access import JoinLimiter
from speechpipe.transport.room_captions import RoomCaptions
from speechpipe.transport.room_shell import RoomHub
from speechpipe.transport.session_api import SessionFactory
from speechpipe.transport.ws_connection import (
    CapacityGate,
    NullObserver,
    ServerObserver,
    WsConnection,
)

__all__ = ["SpeechServer"]

log = logging.getLogger("speechpipe.server")

_HANDLER_EXIT_S = 1.0  # after the shutdown grace: how long aborted handlers get to return


class SpeechServer:
    """``async with SpeechServer(factory, port=0) as server: ... server.port``."""

    def __init__(
        self,
        factory: SessionFactory,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        is_ready: Callable[[], bool] = lambda: True,
        metrics_text: Callable[[], bytes] = lambda: b"",
        observer: ServerObserver | None = None,
        limits: ServerLimits | None = None,
        webrtc: bool = True,
        capacity: CapacityGate | None = None,
        voices: Callable[[], list[dict[str, Any]]] = list,
    ) -> None:
        self.factory = factory
        self.voices = voices  # what ``GET /voices`` lists: the names ``start.voice`` may use
        self.capacity = capacity  # admission control: queue or refuse when full
        self.host = host
        self.requested_port = port
        self.is_ready = is_ready
        self.metrics_text = metrics_text
        self.observer: ServerObserver = observer or NullObserver()
        self.limits = limits or ServerLimits()
        self.webrtc = webrtc
        self.connections: set[WsConnection] = set()
        rooms = self.limits.rooms
        self.rooms = RoomHub(RoomRegistry(
            max_listeners_per_room=rooms.max_listeners_per_room or None,
            max_listeners=rooms.max_listeners or None,
            history_s=rooms.history_s, history_items=rooms.history_items,
        ), outbox_capacity=rooms.outbox_capacity, observer=self.observer, mt=rooms.mt,
            captions=RoomCaptions(rooms.captions_kept), joins=JoinLimiter(
                per_ip_s=rooms.join_per_ip_s, ip_burst=rooms.join_ip_burst,
                per_room_s=rooms.join_per_room_s, room_burst=rooms.join_room_burst))
        self._server: Server | None = None
        verifier = self.limits.auth or (
            StaticToken(self.limits.token) if self.limits.token else None
        )
        self.gate = AccessGate(
            verifier=verifier,
            origins=OriginPolicy(self.limits.allowed_origins),
            quotas=self.limits.quotas,
        )
        bound = () if host in ("", "0.0.0.0", "::") or is_ip_literal(host) else (host,)
        self.hosts = HostPolicy(self.limits.allowed_hosts + bound)
        self.routes = HttpRoutes(
            is_ready=lambda: self.is_ready(), metrics_text=lambda: self.metrics_text(),
            voices=lambda: self.voices(), gate=self.gate, hosts=self.hosts,
            observer=lambda: self.observer, captions=CaptionRoutes(self.rooms, verifier),
        )
        guard_library_logs(self.limits.log_content)

    @property
    def port(self) -> int:
        """The port the server listens on (after ``start``)."""
        assert self._server is not None, "server not started"
        sock = next(iter(self._server.sockets))
        return int(sock.getsockname()[1])

    @property
    def active_sessions(self) -> int:
        """Number of connections with an open session."""
        return sum(1 for conn in self.connections if conn.session_open)

    async def start(self) -> SpeechServer:
        """Start listening; returns the server."""
        self._server = await ws_serve(
            self._handle,
            self.host,
            self.requested_port,
            process_request=self.routes,
            max_size=self.limits.max_message_bytes,
            compression=None,  # PCM does not compress; deflate would only cost CPU
            server_header="speechpipe",
            ping_interval=self.limits.ping_interval_s,
            ping_timeout=self.limits.ping_timeout_s,
            close_timeout=self.limits.close_timeout_s,
            logger=ContentFreeLogger(logging.getLogger("websockets.server")),
            create_connection=guarded_connection_class(FrameLimits(
                frames_per_s=self.limits.quotas.messages_per_s,
                frame_burst=self.limits.quotas.message_burst,
                control_per_s=self.limits.quotas.control_frames_per_s,
                control_burst=self.limits.quotas.control_frame_burst,
                max_unread_bytes=self.limits.max_unread_bytes,
                linger_s=self.limits.close_timeout_s,
            )),
        )
        log.info("listening on %s:%d", self.host, self.port)
        return self

    async def stop(self) -> None:
        """Stop accepting; close every connection with 1001 and wait for their sessions, for
        at most ``limits.shutdown_grace_s``: then connections still open (clients that do not
        answer the close) are dropped, and session handlers still running are cancelled."""
        if self._server is None:
            return
        server = self._server
        server.close(close_connections=True)
        try:
            async with asyncio.timeout(self.limits.shutdown_grace_s):
                await server.wait_closed()
            return
        except TimeoutError:
            pass
        log.warning("shutdown grace over: dropping %d connections", len(server.all_connections))
        for connection in server.all_connections:
            connection.transport.abort()
        try:  # aborted connections end their handlers at once; give them a moment
            async with asyncio.timeout(_HANDLER_EXIT_S):
                await server.wait_closed()
        except TimeoutError:
            log.warning("shutdown: cancelling %d session handlers", len(server.handler_tasks))
            for task in server.handler_tasks:
                task.cancel()
            await server.wait_closed()

    async def close_sessions(self, code: int, reason: str,
                             error: Callable[[str], dict[str, Any]]) -> int:
        """Close every open session with ``code``, first sending ``error(session_id)``
        (cluster drain). Returns how many were closed."""
        closing = [conn for conn in self.connections if conn.session_open]
        for conn in closing:
            with contextlib.suppress(ConnectionClosed):
                await conn.ws.send(dumps(error(conn.id)))
            await conn.ws.close(code, reason)
        return len(closing)

    async def serve_forever(self) -> None:
        """Serve until cancelled (after ``start``)."""
        assert self._server is not None
        await self._server.serve_forever()

    async def __aenter__(self) -> SpeechServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- sessions ----------------------------------------------------------------------------
    async def _handle(self, ws: ServerConnection) -> None:
        conn = WsConnection(self, ws)
        self.connections.add(conn)
        try:
            await conn.run()
        finally:
            self.connections.discard(conn)


