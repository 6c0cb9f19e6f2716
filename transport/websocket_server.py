"""The live server: one port for the demo page, ``/ws`` sessions, metrics and health checks.

Built on websockets' asyncio server. Plain HTTP GETs are answered in ``process_request``
(``/``, static files, ``/metrics``, ``/healthz``, ``/readyz``, ``/voices``); ``/ws`` upgrades
to a session speaking the protocol in ``transport.protocol`` (reference: ``docs/protocol.md``).

Per connection, once ``start`` is accepted, three tasks run in one ``asyncio.TaskGroup``:

- *reader*: decodes and validates client messages, resamples audio into the session, handles
  ``flush``/``stop`` and WebRTC signalling; enforces the real-time guard;
- *pump*: session events -> encoded messages on the bounded outgoing channel;
- *sender*: the only task that writes to the socket, so an ``audio`` header and its binary
  PCM are never split by another message (only a fatal ``rate_limited`` from
  ``transport.frame_guard``, the last message, can come between).

Whichever task ends the connection raises; the group cancels the rest, the session's own
``async with`` cancels its stages, and the close code is sent. A client's garbage ends at
most its own connection: every failure is caught per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import importlib.resources
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from websockets.asyncio.server import Server, ServerConnection
from websockets.asyncio.server import serve as ws_serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from speechpipe.errors import AdmissionError, SessionRedirect, SpeechpipeError
from speechpipe.stages.channels import Channel, ChannelClosed
from speechpipe.stages.frames import STREAM_RATE, AudioFrame, OutputEvent, SpeechChunk, StatusEvent
from speechpipe.transport.auth import OriginPolicy, StaticToken
from speechpipe.transport.codes import CloseCode, ErrorCode, refusal_close
from speechpipe.transport.frame_guard import (
    FrameLimits,
    GuardedConnection,
    Violation,
    guarded_connection_class,
)
from speechpipe.transport.gate import AccessGate, Admission
from speechpipe.transport.hosts import (
    HeaderError,
    HostPolicy,
    is_ip_literal,
    parse_host,
    single_header,
)
from speechpipe.transport.limits import ServerLimits
from speechpipe.transport.privacy import ContentFreeLogger, describe_content, guard_library_logs
from speechpipe.transport.protocol import (
    Flush,
    Ice,
    InputResampler,
    Offer,
    OutputResampler,
    ProtocolError,
    RealtimeGuard,
    Start,
    Stop,
    dumps,
    encode_answer,
    encode_end,
    encode_error,
    encode_event,
    encode_started,
    parse_text,
    validate_audio,
)
from speechpipe.transport.quotas import Expired, QuotaGuard, check_sdp_size
from speechpipe.transport.session_api import LiveSession, SessionFactory

if TYPE_CHECKING:
    from speechpipe.transport.webrtc import WebRtcPeer

__all__ = ["ServerObserver", "SpeechServer"]

log = logging.getLogger("speechpipe.server")

_HANDLER_EXIT_S = 1.0  # after the shutdown grace: how long aborted handlers get to return
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
STATIC_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}


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


class _NullObserver:
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


class _Close(Exception):
    """Ends a connection: optionally sends an error event, then closes with ``code``."""

    def __init__(self, code: int, reason: str = "", error: dict[str, Any] | None = None) -> None:
        super().__init__(code, reason)
        self.code = code
        self.reason = reason
        self.error = error


def _fatal(exc: ProtocolError, code: int | None = None) -> _Close:
    close = code if code is not None else (exc.close_code or CloseCode.POLICY)
    return _Close(close, exc.code, encode_error(exc.code, str(exc), fatal=True))


def _load_static() -> dict[str, tuple[str, bytes]]:
    files: dict[str, tuple[str, bytes]] = {}
    try:
        root = importlib.resources.files("speechpipe.transport") / "static"
        for entry in root.iterdir():
            suffix = "." + entry.name.rsplit(".", 1)[-1]
            if entry.is_file() and suffix in STATIC_TYPES:
                files["/" + entry.name] = (STATIC_TYPES[suffix], entry.read_bytes())
    except (FileNotFoundError, NotADirectoryError):
        log.warning("no static files found: the demo page is unavailable")
    if "/index.html" in files:
        files["/"] = files["/index.html"]
    return files


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
        self.observer: ServerObserver = observer or _NullObserver()
        self.limits = limits or ServerLimits()
        self.webrtc = webrtc
        self.connections: set[_Connection] = set()
        self._static = _load_static()
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
            process_request=self._process_request,
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

    # -- plain HTTP --------------------------------------------------------------------------
    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        path = request.path.split("?", 1)[0]
        refused = self._check_host(request, health=path in ("/healthz", "/readyz"))
        if refused is not None:
            if path == "/ws":
                reason = "host_not_served" if refused.status_code == 403 else "bad_header"
                self.observer.upgrade_refused(refused.status_code, reason)
            return refused
        if path == "/ws":
            if not self.is_ready():
                self.observer.upgrade_refused(503)
                return _response(503, "text/plain; charset=utf-8", b"models are loading\n")
            refusal = self.gate.check_upgrade(connection.remote_address, request)
            if refusal is not None:
                self.observer.upgrade_refused(refusal.status_code)
            return refusal
        if path == "/healthz":
            return _response(200, "text/plain; charset=utf-8", b"ok\n")
        if path == "/readyz":
            if self.is_ready():
                return _response(200, "text/plain; charset=utf-8", b"ready\n")
            return _response(503, "text/plain; charset=utf-8", b"loading\n")
        if path == "/metrics":
            return _response(200, METRICS_CONTENT_TYPE, self.metrics_text())
        if path == "/voices":
            body = json.dumps({"voices": self.voices()}, separators=(",", ":")).encode()
            return _response(200, "application/json", body)
        static = self._static.get(path)
        if static is not None:
            return _response(200, static[0], static[1])
        return _response(404, "text/plain; charset=utf-8", b"not found\n")

    def _check_host(self, request: Request, *, health: bool) -> Response | None:
        """400 for a missing, repeated or malformed ``Host``; 403 for a name this server does
        not serve (DNS rebinding: ``transport.hosts``). Health checks answer any name."""
        try:
            value = single_header(request.headers, "Host")
            if value is None:
                raise HeaderError("no Host header")
            name, _ = parse_host(value)
        except HeaderError as exc:
            return _response(400, "text/plain; charset=utf-8", f"{exc}\n".encode())
        if health or self.hosts.allows(name):
            return None
        log.info("request refused: host not served")
        return _response(
            403, "text/plain; charset=utf-8",
            b"host not served (the operator can add it with --allow-host)\n",
        )

    # -- sessions ----------------------------------------------------------------------------
    async def _handle(self, ws: ServerConnection) -> None:
        conn = _Connection(self, ws)
        self.connections.add(conn)
        try:
            await conn.run()
        finally:
            self.connections.discard(conn)


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def _response(status: int, content_type: str, body: bytes) -> Response:
    headers = Headers(
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
            ("Connection", "close"),
        ]
    )
    return Response(status, http.HTTPStatus(status).phrase, headers, body)


class _Connection:
    """One WebSocket client: its session, its tasks and (maybe) its WebRTC peer."""

    def __init__(self, server: SpeechServer, ws: ServerConnection) -> None:
        self.server = server
        self.ws = ws
        self.limits = server.limits
        self.observer = server.observer
        self.id = secrets.token_hex(4)
        self.session_open = False
        self.peer: WebRtcPeer | None = None
        self.last_pts = 0
        self.outgoing: Channel[list[str | bytes]] = Channel(
            self.limits.outgoing_capacity, name="outgoing"
        )
        self.tasks: list[asyncio.Task[Any]] = []
        self.resampler = InputResampler(16_000)
        self.stopping = False
        self.quota = QuotaGuard(self.limits.quotas, count_messages=False)  # frames: below
        self.admission: Admission | None = None
        self.session_started = False

    async def run(self) -> None:
        opened = time.monotonic()
        close: _Close | None = None
        try:
            self._admit()
            start = await self._await_start()
            close = await self._run_session(start)
        except _Close as exc:
            close = exc
        except ConnectionClosed:
            pass
        except Exception:
            log.exception("session %s: unexpected server error", self.id)
            close = _Close(
                CloseCode.INTERNAL,
                ErrorCode.INTERNAL,
                encode_error(ErrorCode.INTERNAL, "internal server error", fatal=True),
            )
        finally:
            self.server.gate.release(self.admission)
            violation = self._violation()
            if violation is not None:
                self.observer.error(violation.code)
            if self.session_open:
                self.session_open = False
                self.observer.session_closed(time.monotonic() - opened, self._close_cause(close)[0])
        if close is not None:
            await self._close(close)
        code, reason = self._close_cause(close)
        if close is None and reason == ErrorCode.NOT_READING and self._violation() is None:
            self.observer.error(reason)  # the keepalive found the client not reading
        self.observer.connection_closed(code, reason, session=self.session_started)
        log.info("session %s closed: code=%s reason=%s", self.id, code, reason)

    def _violation(self) -> Violation | None:
        """Why the connection layer ended this connection (flood, not reading), if it did."""
        return self.ws.violation if isinstance(self.ws, GuardedConnection) else None

    def _close_cause(self, close: _Close | None) -> tuple[int | None, str]:
        """(the close code the server sent or ``None`` if the client closed or vanished
        first, a short reason) for the metrics; the server's own codes only."""
        if close is not None:
            return close.code, close.reason or "closed"
        violation = self._violation()  # a flood (4008), or a client that did not read (1006)
        if violation is not None:
            return violation.close_code, violation.code
        protocol = self.ws.protocol
        sent = protocol.close_sent
        if sent is not None and not protocol.close_rcvd_then_sent:
            reasons: dict[int, str] = {CloseCode.TOO_BIG: "message_too_big",
                                       CloseCode.NOT_READING: "not_reading",
                                       CloseCode.GOING_AWAY: "going_away"}
            reason = reasons.get(sent.code, "closed")
            return sent.code, reason
        return None, "client_closed" if protocol.close_rcvd is not None else "connection_lost"

    async def _close(self, close: _Close) -> None:
        if close.error is not None:
            self.observer.error(close.error["code"])
            with contextlib.suppress(ConnectionClosed):
                await self.ws.send(dumps(close.error))
        await self.ws.close(close.code, close.reason[:120])

    async def _send_error(self, exc: ProtocolError) -> None:
        """Before the session exists: the connection is idle, so send directly."""
        self.observer.error(exc.code)
        await self.ws.send(dumps(encode_error(exc.code, str(exc))))

    async def _await_start(self) -> Start:
        try:
            async with asyncio.timeout(self.limits.start_timeout_s):
                while True:
                    message = await self._recv()
                    if isinstance(message, bytes):
                        await self._send_error(
                            ProtocolError(ErrorCode.NOT_STARTED, "send 'start' before audio")
                        )
                        continue
                    # the session length runs from ``begin_session``, after ``start``
                    assert not isinstance(message, Expired)
                    try:
                        parsed = parse_text(message)
                    except ProtocolError as exc:
                        if exc.fatal:
                            raise _fatal(exc) from None
                        await self._send_error(exc)
                        continue
                    if isinstance(parsed, Start):
                        self._check_token(parsed)
                        return parsed
                    await self._send_error(
                        ProtocolError(ErrorCode.NOT_STARTED, "no session yet: send 'start' first")
                    )
        except TimeoutError:
            raise _fatal(
                ProtocolError(ErrorCode.START_TIMEOUT, "no 'start' message in time"),
                CloseCode.START_TIMEOUT,
            ) from None

    def _admit(self) -> None:
        try:
            self.admission = self.server.gate.admit(self.ws.remote_address, self.ws.request)
        except ProtocolError as exc:
            raise _fatal(exc) from None

    def _check_token(self, start: Start) -> None:
        assert self.admission is not None, "connection not admitted"
        try:
            self.server.gate.authorize(self.admission, start.token)
        except ProtocolError as exc:
            raise _fatal(exc) from None

    async def _recv(self) -> str | bytes | Expired:
        """The next client message under the quotas (rate, idle, session length)."""
        try:
            return await self.quota.recv(
                self.ws.recv, stopping=self.stopping,
                activity=lambda: self.peer.frames_in if self.peer is not None else 0,
            )
        except ProtocolError as exc:
            if exc.code == ErrorCode.TOO_SLOW and not await self._client_reads():
                raise _fatal(ProtocolError(
                    ErrorCode.NOT_READING,
                    "the client stopped reading: it did not answer a ping within "
                    f"{self.limits.read_check_s:g} s",
                ), CloseCode.NOT_READING) from None
            raise _fatal(exc) from None

    async def _client_reads(self) -> bool:
        """Whether the client still reads what the server sends: it answers a ping within
        ``read_check_s`` (its pong comes after everything sent before the ping). Audio that
        stopped arriving means ``too_slow`` only for a client that is still listening."""
        try:
            async with asyncio.timeout(self.limits.read_check_s):
                pong = await self.ws.ping()  # waits while our write buffer is full
                await pong
        except TimeoutError:
            return False
        except ConnectionClosed:
            return True  # gone: the close says why, not this check
        return True

    async def _hold_capacity(self, stack: contextlib.AsyncExitStack, start: Start) -> None:
        """A capacity slot for this session (waiting in line with ``status`` events)."""
        if self.server.capacity is None:
            return
        ip = getattr(self.admission, "ip", None)
        client = start.request.client_id or ip or self.id

        async def notify(event: StatusEvent) -> None:  # the connection is idle: send directly
            await self.ws.send(dumps(encode_event(event)))

        identity = getattr(self.admission, "identity", None)
        held = await stack.enter_async_context(self.server.capacity.slot(
            client, notify, token=(identity.key or "") if identity is not None else "",
            ticket=start.ticket or "", resume=start.resume or "",
        ))
        if isinstance(held, str) and held:
            self.id = held

    async def _run_session(self, start: Start) -> _Close | None:
        try:
            return await self._session(start)
        except ExceptionGroup as group:  # e.g. the client left while the session was set up:
            return self._outcome(group)  # ConnectionClosed through the session's TaskGroup

    async def _session(self, start: Start) -> _Close | None:
        async with contextlib.AsyncExitStack() as stack:
            try:
                await self._hold_capacity(stack, start)
                session = await stack.enter_async_context(self.server.factory(start.request))
            except SpeechpipeError as exc:  # refused: the close code by the code table
                extra: dict[str, Any] = {}
                if isinstance(exc, SessionRedirect):
                    extra = {"url": exc.url, "ticket": exc.ticket,
                             "expires_in_s": round(exc.expires_in_s, 1)}
                elif isinstance(exc, AdmissionError):
                    extra = {"retry_after_s": exc.retry_after_s}
                return _Close(refusal_close(exc), exc.code,
                              encode_error(exc.code, str(exc), fatal=True, **extra))
            self.session_open = self.session_started = True
            self.observer.session_opened()
            self.quota.begin_session()
            out_rate = start.request.output_sample_rate
            await self.ws.send(dumps(encode_started(self.id, start, output_sample_rate=out_rate)))
            log.info(
                "session %s started: rate=%d out_rate=%d mode=%s",
                self.id, start.sample_rate, out_rate, start.request.mode,
            )
            stack.push_async_callback(self._close_peer)
            try:
                async with asyncio.TaskGroup() as tg:
                    self.tasks = [
                        tg.create_task(self._reader(session, start, tg), name=f"{self.id}:reader"),
                        tg.create_task(self._pump(session, out_rate), name=f"{self.id}:pump"),
                        tg.create_task(self._sender(), name=f"{self.id}:sender"),
                    ]
            except ExceptionGroup as group:
                return self._outcome(group)
        return None

    def _outcome(self, group: ExceptionGroup) -> _Close | None:
        """Which close a failed task group calls for: a deliberate close wins, then a gone
        client; anything else is a server error (the original exception is re-raised)."""
        leaves = _leaves(group)
        for exc in leaves:
            if isinstance(exc, _Close):
                return exc
        if any(isinstance(exc, ConnectionClosed) for exc in leaves):
            return None
        for exc in leaves:
            if isinstance(exc, SpeechpipeError):
                log.warning("session %s failed: %s", self.id, type(exc).__name__)
                return _Close(
                    CloseCode.INTERNAL, exc.code, encode_error(exc.code, str(exc), fatal=True)
                )
        raise group

    # -- the three tasks ---------------------------------------------------------------------
    async def _reader(self, session: LiveSession, start: Start, tg: asyncio.TaskGroup) -> None:
        self.resampler = InputResampler(start.sample_rate)
        guard = RealtimeGuard(self.limits.max_lead_s)
        while True:
            message = await self._recv()
            if isinstance(message, Expired):
                await self._reply_error(
                    ErrorCode.SESSION_EXPIRED,
                    "the session reached its maximum length: finishing (as after 'stop')",
                )
                await self._stop(session)
                continue
            if isinstance(message, bytes):
                if self.stopping:
                    await self._reply_error(ErrorCode.STOPPING, "audio after 'stop' is ignored")
                    continue
                if self.peer is not None:
                    await self._reply_error(
                        ErrorCode.WEBRTC_ACTIVE, "audio arrives over WebRTC: binary ignored"
                    )
                    continue
                try:
                    samples = validate_audio(message, max_bytes=self.limits.max_message_bytes)
                except ProtocolError as exc:
                    await self._reply_error(exc.code, str(exc))
                    continue
                if not guard.add(len(samples) / start.sample_rate, time.monotonic()):
                    raise _fatal(
                        ProtocolError(
                            ErrorCode.TOO_FAST,
                            f"audio is more than {self.limits.max_lead_s:g} s ahead of real time",
                        ),
                        CloseCode.POLICY,
                    )
                self.quota.audio(len(samples) / start.sample_rate)
                for frame in self.resampler.feed(samples):
                    await session.push(frame)
                continue
            try:
                parsed = parse_text(message)
            except ProtocolError as exc:
                await self._reply_error(exc.code, str(exc))
                continue
            if isinstance(parsed, Start):
                await self._reply_error(ErrorCode.BAD_START, "the session has already started")
            elif isinstance(parsed, Flush):
                session.flush()
            elif isinstance(parsed, Stop):
                await self._stop(session)
            elif isinstance(parsed, Offer):
                if self.stopping:
                    await self._reply_error(ErrorCode.STOPPING, "the session is stopping")
                else:
                    await self._offer(parsed, session, start.sample_rate, tg)
            elif isinstance(parsed, Ice):
                if self.peer is None:
                    await self._reply_error(ErrorCode.BAD_MESSAGE, "'ice' before 'offer'")
                else:
                    try:
                        await self.peer.add_ice(parsed)
                    except ProtocolError as exc:
                        await self._reply_error(exc.code, str(exc))

    async def _stop(self, session: LiveSession) -> None:
        """No more input: after ``stop``, or when the session reached its maximum length."""
        if not self.stopping:
            self.stopping = True
            if self.peer is None:
                for frame in self.resampler.finish():
                    await session.push(frame)
            else:
                self.peer.stop_input()
            await session.finish()

    async def _pump(self, session: LiveSession, out_rate: int) -> None:
        resampler = OutputResampler(out_rate)
        try:
            async for event in session.events():
                self.observer.output_event(event)
                if self.limits.log_content:  # an operator's debug switch; off by default
                    log.debug("session %s content: %s", self.id, describe_content(event))
                pts = getattr(event, "stream_pts", None)
                if isinstance(pts, int):
                    self.last_pts = max(self.last_pts, pts)
                if isinstance(event, SpeechChunk):
                    peer = self.peer
                    if peer is not None:
                        peer.play(event)
                        header = encode_event(event)
                        header["via"] = "webrtc"
                        await self.outgoing.put([dumps(header)])
                    else:
                        header, pcm = resampler.encode(event)
                        await self.outgoing.put([dumps(header), pcm])
                else:
                    await self.outgoing.put([dumps(encode_event(event))])
        finally:
            self.outgoing.close()

    async def _sender(self) -> None:
        async for batch in self.outgoing:
            for message in batch:
                await self.ws.send(message)
        # The session's events have ended: only after ``stop`` (or the session ending itself).
        if self.peer is not None:
            await self.peer.drain()  # the last translated speech plays out over WebRTC
        await self.ws.send(dumps(encode_end(self.last_pts)))
        if self.quota.expired:
            raise _Close(CloseCode.SESSION_EXPIRED, ErrorCode.SESSION_EXPIRED)
        raise _Close(CloseCode.NORMAL, "stopped")

    async def _reply_error(self, code: str, message: str, **extra: Any) -> None:
        self.observer.error(code)
        with contextlib.suppress(ChannelClosed):
            await self.outgoing.put([dumps(encode_error(code, message, **extra))])

    # -- WebRTC ------------------------------------------------------------------------------
    async def _offer(
        self, offer: Offer, session: LiveSession, rate: int, tg: asyncio.TaskGroup
    ) -> None:
        if self.peer is not None:
            await self._reply_error(ErrorCode.WEBRTC_ACTIVE, "a WebRTC peer is already connected")
            return
        if not self.server.webrtc:
            await self._reply_error(ErrorCode.WEBRTC_FAILED, "WebRTC is disabled on this server")
            return
        try:
            check_sdp_size(offer.sdp, self.limits.quotas.max_sdp_bytes)
        except ProtocolError as exc:
            await self._reply_error(exc.code, str(exc))
            return
        try:
            from speechpipe.transport.webrtc import WebRtcPeer
        except ImportError as exc:  # aiortc is a declared dependency; say what is missing
            await self._reply_error(ErrorCode.WEBRTC_FAILED, f"WebRTC unavailable: {exc}")
            return
        # WebSocket audio so far, then WebRTC audio contiguous after it
        for frame in self.resampler.finish():
            await session.push(frame)
        self.resampler = InputResampler(rate, start_pts=self.resampler.pts)

        async def push(frame: AudioFrame) -> None:  # WebRTC audio keeps the pace too
            self.quota.audio(len(frame.samples) / STREAM_RATE)
            await session.push(frame)

        peer = WebRtcPeer(
            push=push,
            start_pts=self.resampler.pts,
            connect_timeout_s=self.limits.webrtc_connect_timeout_s,
            label=self.id,
        )
        try:
            answer = await peer.accept_offer(offer.sdp)
        except ProtocolError as exc:
            await peer.close()
            await self._reply_error(exc.code, str(exc))
            return
        self.peer = peer
        with contextlib.suppress(ChannelClosed):
            await self.outgoing.put([dumps(encode_answer(answer))])
        tg.create_task(self._run_peer(peer), name=f"{self.id}:webrtc")

    async def _run_peer(self, peer: WebRtcPeer) -> None:
        try:
            await peer.run()
        except SpeechpipeError as exc:  # ICE/DTLS timeout or failure: the WebSocket stays
            log.info("session %s: webrtc peer ended: %s", self.id, exc.code)
            await self._reply_error(exc.code, str(exc))
        finally:
            if self.peer is peer:
                self.peer = None
                # WebSocket audio may follow, contiguous after what came over WebRTC
                self.resampler = InputResampler(self.resampler.sample_rate, start_pts=peer.pts)
            await peer.close()

    async def _close_peer(self) -> None:
        peer, self.peer = self.peer, None
        if peer is not None:
            await peer.close()


