"""One WebSocket client's connection, the asyncio layer: it moves messages between the socket,
the connection core (``transport.connection_core``: the protocol's rules, without I/O), the
session and (maybe) a WebRTC peer.

Once ``start`` is accepted, three tasks run in one ``asyncio.TaskGroup``:

- *reader*: client messages through the core; performs its actions (audio resampled into the
  session, ``flush``/``stop``, WebRTC signalling);
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
import json
import logging
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from speechpipe.errors import AdmissionError, SpeechpipeError
from speechpipe.stages.channels import Channel, ChannelClosed
from speechpipe.stages.frames import STREAM_RATE, AudioFrame, OutputEvent, SpeechChunk, StatusEvent
from speechpipe.transport.audio_io import InputResampler, OutputResampler
from speechpipe.transport.codes import CloseCode, ErrorCode
from speechpipe.transport.connection_core import (
    AcceptStart,
    AddIce,
    Claims,
    ConnectionCore,
    Fail,
    FlushInput,
    OpenPeer,
    PushAudio,
    ReportPlayout,
    SendError,
    StartPlan,
    StopInput,
    fail,
    listener_too_slow,
    room_redirect,
    room_refusal,
    session_refused,
    too_many_joins,
)
from speechpipe.transport.echo_guard import EchoGuard
from speechpipe.transport.frame_guard import (
    GuardedConnection,
    Violation,
)
from speechpipe.transport.gate import AccessGate, Admission
from speechpipe.transport.limits import ServerLimits
from speechpipe.transport.peer_link import PeerLink
from speechpipe.transport.privacy import describe_content
from speechpipe.transport.protocol import (
    Offer,
    ProtocolError,
    Start,
    dumps,
    encode_end,
    encode_error,
    encode_event,
    encode_started,
)
from speechpipe.transport.quotas import Expired, QuotaGuard
from speechpipe.transport.room import Member, Outgoing, Role, RoomError
from speechpipe.transport.room_access import Join
from speechpipe.transport.room_shell import (
    Presence,
    RoomHub,
    SpeakerFeeds,
    encode_outgoing,
)
from speechpipe.transport.session_api import LiveSession, SessionFactory

if TYPE_CHECKING:
    from speechpipe.transport.webrtc import WebRtcPeer

__all__ = ["ServerObserver", "CapacityGate", "ServerSide", "WsConnection", "NullObserver"]

log = logging.getLogger("speechpipe.server")


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


class _Close(Exception):
    """Ends a connection: optionally sends an error event, then closes with ``code``."""

    def __init__(self, code: int, reason: str = "", error: dict[str, Any] | None = None) -> None:
        super().__init__(code, reason)
        self.code = code
        self.reason = reason
        self.error = error


def _fatal(exc: ProtocolError, code: int | None = None) -> _Close:
    return _raise(fail(exc, code))


def _raise(action: Fail) -> _Close:
    """The core's ``Fail`` as the exception that ends the connection's tasks."""
    return _Close(action.code, action.reason, action.error)


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


class WsConnection:
    """One WebSocket client: its session, its tasks and (maybe) its WebRTC peer."""

    def __init__(self, server: ServerSide, ws: ServerConnection) -> None:
        self.server = server
        self.ws = ws
        self.limits = server.limits
        self.observer = server.observer
        self.id = secrets.token_hex(4)
        self.core = ConnectionCore(max_message_bytes=self.limits.max_message_bytes,
                                   max_lead_s=self.limits.max_lead_s, webrtc=server.webrtc,
                                   max_sdp_bytes=self.limits.quotas.max_sdp_bytes)
        self.link = PeerLink(connect_timeout_s=self.limits.webrtc_connect_timeout_s)
        self.last_pts = 0
        self.outgoing: Channel[list[str | bytes]] = Channel(
            self.limits.outgoing_capacity, name="outgoing"
        )
        self.tasks: list[asyncio.Task[Any]] = []
        self.resampler = InputResampler(16_000)
        self.quota = QuotaGuard(self.limits.quotas, count_messages=False)  # frames: below
        self.admission: Admission | None = None
        self.presence: Presence | None = None  # rooms: this member
        self.feeds: SpeakerFeeds | None = None  # rooms: a speaking member's pipelines
        self.listening = False  # a room listener (not a session: no pipeline, no slot)
        self.sent = 0  # room messages sent to this listener (its activity)

    @property
    def peer(self) -> WebRtcPeer | None:
        """The active WebRTC peer (``transport.peer_link``), if any."""
        return self.link.peer

    @property
    def session_open(self) -> bool:
        """A session runs on this connection."""
        return self.core.session_open

    @property
    def session_started(self) -> bool:
        """A session ran on this connection (it may have ended)."""
        return self.core.started

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
            if self.session_open and not self.listening:
                self.core.closed()
                self.observer.session_closed(time.monotonic() - opened, self._close_cause(close)[0])
            self.core.closed()
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
                    for action in self.core.receive(await self._recv(), time.monotonic()):
                        if isinstance(action, SendError):
                            await self._send_error(ProtocolError(action.code, action.message))
                        elif isinstance(action, Fail):
                            raise _raise(action)
                        elif isinstance(action, AcceptStart):
                            self._check_token(action.start)
                            return action.start
        except TimeoutError:
            raise _raise(self.core.start_timed_out()) from None

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
        while True:
            try:
                return await self.quota.recv(
                    self.ws.recv, stopping=self.core.stopping,
                    activity=lambda: self.link.frames_in,
                )
            except ProtocolError as exc:
                # a listener sends nothing: its liveness is the ping/pong, not input
                if not (exc.code == ErrorCode.IDLE_TIMEOUT and self.listening):
                    failure = exc
                    break
                if not await self._client_reads():
                    failure = ProtocolError(ErrorCode.NOT_READING, "the listener did not "
                                            "answer a ping", close_code=CloseCode.NOT_READING)
                    break
                self.quota.timers.touch(time.monotonic())
        if failure.code == ErrorCode.TOO_SLOW and not await self._client_reads():
            raise _fatal(ProtocolError(
                ErrorCode.NOT_READING,
                "the client stopped reading: it did not answer a ping within "
                f"{self.limits.read_check_s:g} s",
            ), CloseCode.NOT_READING) from None
        raise _fatal(failure) from None

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

    def _extra_slot(
        self, start: Start,
    ) -> Callable[[], contextlib.AbstractAsyncContextManager[Any]] | None:
        """A capacity slot for one more pipeline of this room speaker (another listening
        language): taken when free, never waited for (a listener never queues behind
        speakers): refused, the listener gets the captions and a ``status`` saying why."""
        capacity = self.server.capacity
        if capacity is None:
            return None
        gate = capacity
        ip = getattr(self.admission, "ip", None)
        client = start.request.client_id or ip or self.id
        identity = getattr(self.admission, "identity", None)
        token = (identity.key or "") if identity is not None else ""

        async def refuse(event: StatusEvent) -> None:  # queued: give the place up at once
            raise AdmissionError("the server has no free capacity for a pipeline in another "
                                 "language now", retry_after_s=0.0)

        return lambda: gate.slot(client, refuse, token=token)

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

    def _claims(self) -> Claims:
        """What this connection's verified token claims (nothing without a token)."""
        identity = getattr(self.admission, "identity", None)
        return Claims(getattr(identity, "key", None), getattr(identity, "room", None),
                      getattr(identity, "role", None))

    async def _session(self, start: Start) -> _Close | None:
        plan = self.core.plan_start(start, self._claims(),
                                    tokens_required=self.server.gate.tokens_required)
        if isinstance(plan, Fail):
            return _raise(plan)
        if plan.listener:
            return await self._listen(plan)
        async with contextlib.AsyncExitStack() as stack:
            if plan.entry is not None:
                entered = await self._enter_room(plan)
                if isinstance(entered, Fail):
                    return _raise(entered)
                self.presence = entered
                stack.callback(self.server.rooms.leave, self.presence)
            try:
                await self._hold_capacity(stack, start)
                session = await stack.enter_async_context(self.server.factory(plan.request))
            except SpeechpipeError as exc:  # refused: the close code by the code table
                return _raise(session_refused(exc))
            self.core.session_opened(start)
            self.observer.session_opened()
            self.quota.begin_session()
            out_rate = start.request.output_sample_rate
            presence = self.presence
            if presence is not None:
                presence.output_sample_rate = out_rate
                rooms = self.limits.rooms
                presence.echo = EchoGuard(tail_s=rooms.echo_tail_s,
                                          report_tail_s=rooms.echo_report_tail_s,
                                          max_lag_s=rooms.echo_max_lag_s)
                self.feeds = SpeakerFeeds(self.server.rooms, presence.room, presence.member.id,
                                          plan.request, self.server.factory, session, out_rate,
                                          slot=self._extra_slot(start))
            await self.ws.send(dumps(encode_started(
                self.id, start, output_sample_rate=out_rate,
                room=presence.room.id if presence is not None else None,
                invite=presence.room.invite if presence is not None else None)))
            log.info(
                "session %s started: rate=%d out_rate=%d mode=%s",
                self.id, start.sample_rate, out_rate, start.request.mode,
            )
            stack.push_async_callback(self.link.close)
            self.link.attach(self._send_answer, self._reply_error, self.id)
            try:
                async with asyncio.TaskGroup() as tg:
                    self.tasks = [
                        tg.create_task(self._reader(session, start, tg), name=f"{self.id}:reader"),
                        tg.create_task(self._pump(session, out_rate), name=f"{self.id}:pump"),
                        tg.create_task(self._sender(), name=f"{self.id}:sender"),
                    ]
                    if presence is not None and self.feeds is not None:
                        self.tasks.append(tg.create_task(self.feeds.run(tg),
                                                         name=f"{self.id}:feeds"))
                        self.server.rooms.speaking(presence, self.feeds)
                        if presence.member.role.listens:
                            self.tasks += [
                                tg.create_task(self.server.rooms.attacher(presence),
                                               name=f"{self.id}:attach"),
                                tg.create_task(self._room_forward(presence),
                                               name=f"{self.id}:room"),
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
        """Client messages through the core; its actions performed here."""
        self.resampler = InputResampler(start.sample_rate)
        while True:
            message = await self._recv()
            for action in self.core.receive(message, time.monotonic(),
                                            peer=self.peer is not None):
                if isinstance(action, SendError):
                    await self._reply_error(action.code, action.message)
                elif isinstance(action, Fail):
                    raise _raise(action)
                elif isinstance(action, PushAudio):
                    self.quota.audio(action.seconds)
                    for frame in self.resampler.feed(action.samples):
                        await self._push(session, frame)
                elif isinstance(action, FlushInput):
                    if self.feeds is not None:
                        self.feeds.flush()
                    else:
                        session.flush()
                elif isinstance(action, StopInput):
                    await self._stop(session)
                elif isinstance(action, OpenPeer):
                    await self._offer(action.offer, session, start.sample_rate, tg)
                elif isinstance(action, ReportPlayout):
                    await self._playout(action.played_s)
                elif isinstance(action, AddIce):
                    await self.link.add_ice(action.ice)

    async def _playout(self, played_s: object) -> None:
        """The client's playout clock (``playout``) for the echo guard; a bad value is a
        recoverable ``bad_message``. Where no guard runs (not a participant) it is ignored."""
        presence = self.presence
        if presence is None or not presence.member.role.listens:
            return
        try:
            presence.echo.report(played_s, time.monotonic())
        except ValueError as exc:
            await self._reply_error(ErrorCode.BAD_MESSAGE, str(exc))

    async def _stop(self, session: LiveSession) -> None:
        """No more input: after ``stop``, or when the session reached its maximum length."""
        if self.core.stop():
            if self.peer is None:
                for frame in self.resampler.finish():
                    await self._push(session, frame)
            else:
                self.peer.stop_input()
            await session.finish()
            if self.feeds is not None:
                await self.feeds.finish()

    async def _push(self, session: LiveSession, frame: AudioFrame) -> None:
        """Client audio into the session (a room speaker's: into all its pipelines). The
        echo guard: while speech the room sent to a participant plays (and a tail after),
        its input is held (silence of the same length: the stream stays contiguous)."""
        presence = self.presence
        if (presence is not None and self.limits.rooms.echo_guard
                and presence.hears_itself(time.monotonic())):
            frame = AudioFrame(np.zeros_like(frame.samples), frame.pts)
        if self.feeds is not None:
            await self.feeds.push(frame)
        else:
            await session.push(frame)

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
                if self.feeds is not None:
                    await self._publish(event, resampler)
                    continue
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

    async def _publish(self, event: OutputEvent, resampler: OutputResampler) -> None:
        """A room speaker's event: encoded once, published to the room; the speaker gets it
        too (a participant: its own captions only, never its own voice)."""
        feeds = self.feeds
        assert feeds is not None and self.presence is not None
        item = encode_outgoing(event, self.id, resampler, time.monotonic())
        self.server.rooms.publish(feeds.room, feeds.key(feeds.base_target), item, event)
        if self.presence.member.role is Role.SPEAKER:
            if item.kind == "audio" and self.peer is not None:
                self.peer.play(event)  # type: ignore[arg-type]
                header = encode_event(event)
                header["via"] = "webrtc"
                await self.outgoing.put([dumps(header)])
            else:
                await self.outgoing.put(list(item.parts))
        elif item.kind in ("source", "error"):
            await self.outgoing.put(list(item.parts))

    async def _room_forward(self, presence: Presence) -> None:
        """A participant: what the room sends it, onto its outgoing channel; the speech it
        gets arms the echo guard for as long as it plays."""
        sub = presence.member.subscriber
        assert sub is not None
        while True:
            await presence.wake.wait()
            presence.wake.clear()
            if sub.outbox.overflowed:
                raise self._too_slow()
            for item in sub.outbox.take():
                if item.kind == "audio":
                    presence.echo.sent(item.speech_s, time.monotonic())
                try:
                    await self.outgoing.put(list(item.parts))
                except ChannelClosed:
                    return
                self.observer.fanout_delay(time.monotonic() - item.published)
            if sub.outbox.closed:
                return

    def _too_slow(self) -> _Close:
        return _raise(listener_too_slow())

    # -- rooms ---------------------------------------------------------------------------------
    async def _enter_room(self, plan: StartPlan) -> Presence | Fail:
        """Join (or, for a speaking role without ``room``, make) the room the core's
        ``enter`` decides; refused, or redirected in cluster mode when the room lives on
        another node."""
        hub = self.server.rooms
        room_id = plan.room_id
        if room_id is not None and room_id not in hub.registry.rooms and hub.locate:
            url = await hub.locate(room_id)
            if url is not None:  # a room lives on one node: reconnect there
                return room_redirect(url)
        entry = self.core.enter(plan, hub.registry.rooms.get(room_id)
                                if room_id is not None else None)
        if isinstance(entry, Fail):
            return entry
        try:
            if isinstance(entry, Join):
                room = hub.room_of(entry.room_id)
                if plan.listener:
                    retry = hub.joins.admit(getattr(self.admission, "ip", None), room.id,
                                            time.monotonic())
                    if retry is not None:
                        return too_many_joins(retry)
            else:
                room = hub.new_room(entry.room_id, **plan.room_options())
            return hub.join(room, Member(self.id, plan.role or Role.SPEAKER,
                                         plan.member_target))
        except RoomError as exc:
            return room_refusal(exc.code, str(exc), **exc.detail)

    async def _listen(self, plan: StartPlan) -> _Close | None:
        """A room listener: no pipeline and no capacity slot; the room's messages from its
        bounded outbox to the socket (the only writer), until it stops or overflows."""
        start = plan.start
        presence = await self._enter_room(plan)
        if isinstance(presence, Fail):
            return _raise(presence)
        self.presence = presence
        self.listening = True
        try:
            presence.output_sample_rate = start.request.output_sample_rate
            self.core.session_opened(start)
            self.quota.begin_session()
            self.quota.timers.pace = None  # a listener sends no audio
            self._bound_send_buffer()
            await self.ws.send(dumps(encode_started(
                self.id, start, output_sample_rate=start.request.output_sample_rate,
                room=presence.room.id)))
            log.info("session %s listens", self.id)
            sub = presence.member.subscriber
            assert sub is not None

            async def send_answer(text: str) -> None:
                sub.outbox.offer(Outgoing("answer", (text,), time.monotonic()))

            self.link.attach(send_answer, self._listener_error(presence), self.id)
            try:
                async with asyncio.TaskGroup() as tg:
                    self.tasks = [
                        tg.create_task(self._listen_reader(presence, tg),
                                       name=f"{self.id}:reader"),
                        tg.create_task(self.server.rooms.attacher(presence),
                                       name=f"{self.id}:attach"),
                        tg.create_task(self._listen_sender(presence), name=f"{self.id}:sender"),
                        tg.create_task(self._overflow(presence), name=f"{self.id}:overflow"),
                    ]
            except ExceptionGroup as group:
                return self._outcome(group)
            return None
        finally:
            self.server.rooms.leave(presence)
            await self.link.close()

    async def _timed_send(self, parts: tuple[str | bytes, ...]) -> float:
        """Send one room message; returns the server CPU it took (the fan-out cost). A send
        that waited for a full socket let other tasks run meanwhile, whose CPU the thread
        clock would count too: such a send is counted at the mean of those that did not."""
        yielded = False

        def mark() -> None:
            nonlocal yielded
            yielded = True

        handle = asyncio.get_running_loop().call_soon(mark)
        cpu = time.thread_time()
        for part in parts:
            await self.ws.send(part)
        cpu = time.thread_time() - cpu
        handle.cancel()
        return self.server.rooms.send_cost(None if yielded else cpu)

    def _bound_send_buffer(self) -> None:
        """A listener's kernel send buffer, bounded: what the server holds for a listener is
        its outbox plus this, and one that stops reading reaches its outbox's limit soon."""
        size = self.limits.rooms.listener_send_buffer
        sock = self.ws.transport.get_extra_info("socket") if size else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)

    async def _overflow(self, presence: Presence) -> None:
        """Close a listener whose outbox overflowed even while its sender is blocked."""
        await presence.overflow.wait()
        self.observer.error(ErrorCode.LISTENER_TOO_SLOW)
        raise self._too_slow()

    async def _listen_reader(self, presence: Presence, tg: asyncio.TaskGroup) -> None:
        sub = presence.member.subscriber
        assert sub is not None
        reply = self._listener_error(presence)
        while True:
            message = await self._recv()
            for action in self.core.receive(message, time.monotonic(),
                                            peer=self.peer is not None):
                if isinstance(action, Fail):
                    raise _raise(action)
                if isinstance(action, StopInput):
                    end = dumps(encode_end(self.last_pts))
                    sub.outbox.offer(Outgoing("end", (end,), time.monotonic()))
                    sub.outbox.close()
                    return
                if isinstance(action, SendError):
                    await reply(action.code, action.message)
                elif isinstance(action, OpenPeer):  # the room's speech plays on its track
                    await self.link.offer(action.offer, tg)  # its microphone: ignored
                elif isinstance(action, AddIce):
                    await self.link.add_ice(action.ice)

    def _listener_error(self, presence: Presence) -> Callable[[str, str], Awaitable[None]]:
        """A recoverable error for a listener: into its outbox (its sender writes it)."""
        sub = presence.member.subscriber
        assert sub is not None

        async def reply(code: str, message: str) -> None:
            self.observer.error(code)
            text = dumps(encode_error(code, message))
            sub.outbox.offer(Outgoing("error", (text,), time.monotonic()))

        return reply

    def _over_peer(self, item: Outgoing) -> tuple[str, ...] | None:
        """A room ``audio`` message for a listener with a WebRTC peer: its speech plays on
        the peer's track; the listener gets the header only, saying ``via: webrtc``."""
        peer = self.peer
        if peer is None or item.kind != "audio" or len(item.parts) != 2:
            return None
        text, data = item.parts
        if not isinstance(data, bytes):
            return None
        header = json.loads(text)
        pcm = np.frombuffer(data, "<i2").astype(np.int16)
        peer.play(SpeechChunk(pcm, int(header["sample_rate"]), int(header["utterance"]),
                              str(header.get("text", "")), 0))
        header["via"] = "webrtc"
        return (dumps(header),)

    async def _listen_sender(self, presence: Presence) -> None:
        sub = presence.member.subscriber
        assert sub is not None
        while True:
            await presence.wake.wait()
            presence.wake.clear()
            if sub.outbox.overflowed:
                return  # _overflow closes it
            for item in sub.outbox.take():
                cpu = await self._timed_send(self._over_peer(item) or item.parts)
                self.sent += 1
                if item.kind not in ("error", "end"):
                    self.observer.fanout_delay(time.monotonic() - item.published, cpu)
            if sub.outbox.closed:
                raise _Close(CloseCode.NORMAL, "stopped")

    async def _sender(self) -> None:
        async for batch in self.outgoing:
            for message in batch:
                await self.ws.send(message)
        if self.feeds is not None:
            await self.feeds.drain()  # the room's other pipelines' last events
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
    async def _send_answer(self, text: str) -> None:
        with contextlib.suppress(ChannelClosed):
            await self.outgoing.put([text])

    async def _offer(
        self, offer: Offer, session: LiveSession, rate: int, tg: asyncio.TaskGroup
    ) -> None:
        """A speaker's WebRTC offer (the core checked its preconditions): its audio then
        arrives over the peer, contiguous after the WebSocket audio so far, and WebSocket
        audio after the peer ends is contiguous after that."""

        async def prepare() -> int:  # WebSocket audio so far, then WebRTC audio after it
            for frame in self.resampler.finish():
                await self._push(session, frame)
            self.resampler = InputResampler(rate, start_pts=self.resampler.pts)
            return self.resampler.pts

        async def push(frame: AudioFrame) -> None:  # WebRTC audio keeps the pace too
            self.quota.audio(len(frame.samples) / STREAM_RATE)
            await self._push(session, frame)

        def on_end(peer: WebRtcPeer) -> None:  # WebSocket audio may follow, contiguous
            self.resampler = InputResampler(self.resampler.sample_rate, start_pts=peer.pts)

        await self.link.offer(offer, tg, push=push, prepare=prepare, on_end=on_end)
