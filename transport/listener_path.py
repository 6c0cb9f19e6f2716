"""A room listener's connection: no pipeline and no capacity slot, only fan-out.

The room's messages are encoded once for every listener. While the listener is idle (nothing
queued, its socket's write buffer below its limit), its feed's writer
(``transport.room_writer``) writes each one on the socket directly (``ListenerSocket``), in
one pass over the feed's listeners that wakes no task of this connection; otherwise they
arrive in the member's bounded outbox (``transport.room_shell``) and the *sender* writes
them, as it writes this connection's own messages (``error``, ``answer``, ``end``); while it
writes (``Outbox.draining``) no direct write comes between. Liveness: a listener sends
nothing, so its idle timer only pings (the connection core's ``quota_failure``), and a
listener that does not read fills its (bounded) kernel buffer, then its outbox, and is
closed with ``listener_too_slow`` (4012) even while its sender is blocked (*overflow*). A
listener with a WebRTC peer hears the speech on the peer's track: its ``audio`` messages
carry the header only, ``via: webrtc`` (it takes no direct writes). Four tasks in one task
group: *reader* (client messages through the core), *attach* (the room's feeds), *sender*,
*overflow*.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import time

import numpy as np
from websockets.asyncio.server import ServerConnection, broadcast
from websockets.protocol import OPEN

from speechpipe.stages.frames import SpeechChunk
from speechpipe.transport.closing import Close, close_of, outcome
from speechpipe.transport.codes import ErrorCode
from speechpipe.transport.connection_core import (
    AddIce,
    Fail,
    OpenPeer,
    SendError,
    StopInput,
    listener_too_slow,
)
from speechpipe.transport.protocol import Start, dumps, encode_end, encode_error, encode_started
from speechpipe.transport.room import Outgoing
from speechpipe.transport.room_shell import Presence
from speechpipe.transport.room_writer import Frames
from speechpipe.transport.server_side import ConnectionShell

__all__ = ["ListenerPath", "ListenerSocket"]

log = logging.getLogger("speechpipe.server")


class ListenerSocket:
    """A listener's connection as its feeds' writers see it (``room_writer.DirectSink``):
    what its write buffer holds, and a write that never waits (websockets' ``broadcast``).
    No direct write while a WebRTC peer plays the speech (its ``audio`` differs) or once
    the connection is not open."""

    def __init__(self, conn: ConnectionShell) -> None:
        self.conn = conn
        self.ws: ServerConnection = conn.ws
        self.limit = self.ws.transport.get_write_buffer_limits()[1]

    def buffered(self) -> int | None:
        ws = self.ws
        if self.conn.link.peer is not None or ws.protocol.state is not OPEN:
            return None
        transport = ws.transport
        return None if transport.is_closing() else transport.get_write_buffer_size()

    def write(self, frames: Frames, wire: bytes) -> None:
        ws = self.ws
        if not ws.protocol.extensions and ws.send_in_progress is None:
            # the frames the protocol would write, serialized once for every listener; the
            # state was checked (``buffered``) in the same step, with no await between
            ws.transport.write(wire)
            return
        try:
            for data, text in frames:
                broadcast((ws,), data, text=text, raise_exceptions=True)
        except ExceptionGroup as group:  # its connection failed: its own tasks see it
            log.debug("session %s: direct write failed: %s", self.conn.id, group.exceptions)


class ListenerPath:
    """One room listener, from ``started`` until it stops, overflows or leaves."""

    def __init__(self, conn: ConnectionShell, presence: Presence) -> None:
        self.conn = conn
        self.presence = presence
        sub = presence.member.subscriber
        assert sub is not None, "a listener is a subscriber"
        self.outbox = sub.outbox
        self.sent = 0  # room messages its sender wrote (direct writes are the writer's)

    async def run(self, start: Start) -> Close | None:
        """``started``, then the room's messages to the socket until the listener stops
        (``end``, 1000) or fails; it leaves the room and its peer closes in any case."""
        conn, presence = self.conn, self.presence
        try:
            presence.output_sample_rate = start.request.output_sample_rate
            conn.core.session_opened(start)
            conn.quota.begin_session()
            conn.quota.timers.pace = None  # a listener sends no audio
            self._bound_send_buffer()
            await conn.ws.send(dumps(encode_started(
                conn.id, start, output_sample_rate=start.request.output_sample_rate,
                room=presence.room.id)))
            log.info("session %s listens", conn.id)
            presence.member.subscriber.direct = ListenerSocket(conn)  # type: ignore[union-attr]
            conn.link.attach(self._send_answer, self._reply, conn.id)
            try:
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(self._reader(tg), name=f"{conn.id}:reader")
                    tg.create_task(conn.server.rooms.attacher(presence),
                                   name=f"{conn.id}:attach")
                    tg.create_task(self._sender(), name=f"{conn.id}:sender")
                    tg.create_task(self._overflow(), name=f"{conn.id}:overflow")
            except ExceptionGroup as group:
                return outcome(group, conn.id)
            return None
        finally:
            conn.server.rooms.leave(presence)  # no direct write after this
            await conn.link.close()

    def _offer(self, kind: str, text: str) -> None:
        self.outbox.offer(Outgoing(kind, (text,), time.monotonic()))

    async def _send_answer(self, text: str) -> None:
        self._offer("answer", text)

    async def _reply(self, code: str, message: str) -> None:
        """A recoverable error for a listener: into its outbox (its sender writes it)."""
        self.conn.observer.error(code)
        self._offer("error", dumps(encode_error(code, message)))

    def _bound_send_buffer(self) -> None:
        """A listener's kernel send buffer, bounded: what the server holds for a listener is
        its outbox plus this, and one that stops reading reaches its outbox's limit soon."""
        size = self.conn.limits.rooms.listener_send_buffer
        sock = self.conn.ws.transport.get_extra_info("socket") if size else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)

    async def _overflow(self) -> None:
        """Close a listener whose outbox overflowed even while its sender is blocked."""
        await self.presence.overflow.wait()
        self.conn.observer.error(ErrorCode.LISTENER_TOO_SLOW)
        raise close_of(listener_too_slow())

    async def _reader(self, tg: asyncio.TaskGroup) -> None:
        conn = self.conn
        while True:
            message = await conn.recv()
            for action in conn.core.receive(message, time.monotonic(),
                                            peer=conn.link.peer is not None):
                if isinstance(action, Fail):
                    raise close_of(action)
                if isinstance(action, StopInput):  # a listener's own stream has no audio
                    self._offer("end", dumps(encode_end(0)))
                    self.outbox.close()
                    return
                if isinstance(action, SendError):
                    await self._reply(action.code, action.message)
                elif isinstance(action, OpenPeer):  # the room's speech plays on its track
                    await conn.link.offer(action.offer, tg)  # its microphone: ignored
                elif isinstance(action, AddIce):
                    await conn.link.add_ice(action.ice)

    def _over_peer(self, item: Outgoing) -> tuple[str, ...] | None:
        """A room ``audio`` message for a listener with a WebRTC peer: its speech plays on
        the peer's track; the listener gets the header only, saying ``via: webrtc``."""
        peer = self.conn.link.peer
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
            await self.conn.ws.send(part)
        cpu = time.thread_time() - cpu
        handle.cancel()
        return self.conn.server.rooms.send_cost(None if yielded else cpu)

    async def _sender(self) -> None:
        presence, outbox = self.presence, self.outbox
        while True:
            await presence.wake.wait()
            presence.wake.clear()
            if outbox.overflowed:
                return  # _overflow closes it
            items = outbox.take()
            outbox.draining = True  # the feeds' writers queue behind these meanwhile
            try:
                for item in items:
                    cpu = await self._timed_send(self._over_peer(item) or item.parts)
                    self.sent += 1
                    if item.kind not in ("error", "end"):
                        self.conn.observer.fanout_delay(time.monotonic() - item.published, cpu)
            finally:
                outbox.draining = False
            if outbox.closed:
                raise close_of(self.conn.core.finished())
