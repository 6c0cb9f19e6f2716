"""One WebSocket client's connection, the asyncio layer: one pump that performs the decisions
of the connection core (``transport.connection_core``: the protocol's rules, without I/O).

It admits the connection (``transport.gate``), reads client messages under the quotas until
the core accepts a ``start``, checks its token, and asks the core what the start becomes
(``plan_start``): a room listener takes ``transport.listener_path`` (fan-out, pings,
liveness); a solo session, a room speaker and a participant take ``transport.speaker_path``
(audio in, events out); a room entry (join, open, or a cluster redirect) is made here for
both. Each path runs its tasks in one ``asyncio.TaskGroup``, whose single sender is the only
writer to the socket. Whichever task ends the connection raises ``transport.closing.Close``;
the group cancels the rest, the session's own ``async with`` cancels its stages, and the
close is sent. A client's garbage ends at most its own connection: every failure is caught
per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from typing import TYPE_CHECKING

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from speechpipe.transport.closing import (
    Close,
    close_cause,
    close_of,
    internal_error,
    outcome,
    send_close,
    violation,
)
from speechpipe.transport.codes import ErrorCode
from speechpipe.transport.connection_core import (
    AcceptStart,
    Claims,
    ConnectionCore,
    Fail,
    SendError,
    StartPlan,
    fail,
    room_redirect,
    room_refusal,
    too_many_joins,
)
from speechpipe.transport.gate import Admission
from speechpipe.transport.listener_path import ListenerPath
from speechpipe.transport.peer_link import PeerLink
from speechpipe.transport.protocol import ProtocolError, Start, dumps, encode_error
from speechpipe.transport.quotas import Expired, QuotaGuard
from speechpipe.transport.room import Member, Role, RoomError
from speechpipe.transport.room_access import Join
from speechpipe.transport.room_shell import Presence
from speechpipe.transport.server_side import (
    CapacityGate,
    NullObserver,
    ServerObserver,
    ServerSide,
)
from speechpipe.transport.speaker_path import SpeakerPath

if TYPE_CHECKING:
    from speechpipe.transport.webrtc import WebRtcPeer

# the seams to the application live in ``transport.server_side``; named here as before
__all__ = ["ServerObserver", "CapacityGate", "ServerSide", "WsConnection", "NullObserver"]

log = logging.getLogger("speechpipe.server")


class WsConnection:
    """One WebSocket client: its admission, its start, and the path its session takes."""

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
        self.quota = QuotaGuard(self.limits.quotas, count_messages=False)  # frames: the guard
        self.admission: Admission | None = None

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
        close: Close | None = None
        try:
            self._admit()
            start = await self._await_start()
            close = await self._run_session(start)
        except Close as exc:
            close = exc
        except ConnectionClosed:
            pass
        except Exception:
            log.exception("session %s: unexpected server error", self.id)
            close = internal_error()
        finally:
            self.server.gate.release(self.admission)
            found = violation(self.ws)
            if found is not None:
                self.observer.error(found.code)
            if self.core.pipeline_open:  # a listener is no session for the metrics
                self.core.closed()
                self.observer.session_closed(time.monotonic() - opened,
                                             close_cause(self.ws, close)[0])
            self.core.closed()
        if close is not None:
            await send_close(self.ws, self.observer, close)
        code, reason = close_cause(self.ws, close)
        if close is None and reason == ErrorCode.NOT_READING and violation(self.ws) is None:
            self.observer.error(reason)  # the keepalive found the client not reading
        self.observer.connection_closed(code, reason, session=self.session_started)
        log.info("session %s closed: code=%s reason=%s", self.id, code, reason)

    # -- before the session ------------------------------------------------------------------
    def _admit(self) -> None:
        try:
            self.admission = self.server.gate.admit(self.ws.remote_address, self.ws.request)
        except ProtocolError as exc:
            raise close_of(fail(exc)) from None

    async def _await_start(self) -> Start:
        try:
            async with asyncio.timeout(self.limits.start_timeout_s):
                while True:
                    for action in self.core.receive(await self.recv(), time.monotonic()):
                        if isinstance(action, SendError):  # idle: send directly
                            self.observer.error(action.code)
                            await self.ws.send(dumps(encode_error(action.code, action.message)))
                        elif isinstance(action, Fail):
                            raise close_of(action)
                        elif isinstance(action, AcceptStart):
                            self._check_token(action.start)
                            return action.start
        except TimeoutError:
            raise close_of(self.core.start_timed_out()) from None

    def _check_token(self, start: Start) -> None:
        assert self.admission is not None, "connection not admitted"
        try:
            self.server.gate.authorize(self.admission, start.token)
        except ProtocolError as exc:
            raise close_of(fail(exc)) from None

    # -- receiving, under the quotas ---------------------------------------------------------
    async def recv(self) -> str | bytes | Expired:
        """The next client message under the quotas (rate, idle, session length); what a
        quota's failure means is the core's (``quota_failure``): a fatal one raises
        ``Close``, a check pings the client first."""
        while True:
            try:
                return await self.quota.recv(
                    self.ws.recv, stopping=self.core.stopping,
                    activity=lambda: self.link.frames_in,
                )
            except ProtocolError as exc:
                decision = self.core.quota_failure(exc, self.limits.read_check_s)
            if isinstance(decision, Fail):
                raise close_of(decision)
            if not await self._client_reads():
                raise close_of(decision.otherwise)
            if decision.then is not None:
                raise close_of(decision.then)
            self.quota.timers.touch(time.monotonic())

    async def _client_reads(self) -> bool:
        """Whether the client still reads what the server sends: it answers a ping within
        ``read_check_s`` (its pong comes after everything sent before the ping)."""
        try:
            async with asyncio.timeout(self.limits.read_check_s):
                pong = await self.ws.ping()  # waits while our write buffer is full
                await pong
        except TimeoutError:
            return False
        except ConnectionClosed:
            return True  # gone: the close says why, not this check
        return True

    # -- the session -------------------------------------------------------------------------
    async def _run_session(self, start: Start) -> Close | None:
        try:
            return await self._session(start)
        except ExceptionGroup as group:  # e.g. the client left while the session was set up:
            return outcome(group, self.id)  # ConnectionClosed through the session's TaskGroup

    async def _session(self, start: Start) -> Close | None:
        claims = Claims.of(self.admission.identity if self.admission is not None else None)
        plan = self.core.plan_start(start, claims,
                                    tokens_required=self.server.gate.tokens_required)
        if isinstance(plan, Fail):
            return close_of(plan)
        if plan.listener:
            listener = await self._enter_room(plan, start.turn)
            if isinstance(listener, Fail):
                return close_of(listener)
            self.server.gate.seat_listener(self.admission)
            return await ListenerPath(self, listener).run(start)
        async with contextlib.AsyncExitStack() as stack:
            presence: Presence | None = None
            if plan.entry is not None:
                entered = await self._enter_room(plan)
                if isinstance(entered, Fail):
                    return close_of(entered)
                presence = entered
                stack.callback(self.server.rooms.leave, presence)
            return await SpeakerPath(self, plan, presence).run(stack)

    async def _enter_room(self, plan: StartPlan, turn: str | None = None) -> Presence | Fail:
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
                if plan.join_limited:
                    wait = hub.joins.join(getattr(self.admission, "ip", None), room.id,
                                          time.monotonic(), turn)
                    if wait is not None:
                        return too_many_joins(wait.wait_s, wait.turn)
            else:
                room = hub.new_room(entry.room_id, **plan.room_options())
            return hub.join(room, Member(self.id, plan.role or Role.SPEAKER,
                                         plan.member_target))
        except RoomError as exc:
            return room_refusal(exc.code, str(exc), **exc.detail)
