"""A session's connection: the client's audio into its pipeline, the pipeline's events out.

A solo session, a room speaker and a participant take this path (a listener takes
``transport.listener_path``). It holds a capacity slot (waiting in line with ``status``
events), opens the session, sends ``started``, then runs its tasks in one task group:

- *reader*: client messages through the core; performs its actions (audio resampled into the
  session, ``flush``/``stop``, the echo guard's ``playout``, WebRTC signalling);
- *pump*: session events -> encoded messages on the bounded outgoing channel (a room
  speaker's are published to the room once, and it gets its own);
- *sender*: the only task that writes to the socket, so an ``audio`` header and its binary
  PCM are never split by another message (only a fatal ``rate_limited`` from
  ``transport.frame_guard``, the last message, can come between); after the last event it
  sends ``end`` and closes as the core says (``finished``: 1000, or 4006 at the maximum length);
- in a room, *feeds* (the speaker's further pipelines, ``transport.room_shell``), and for a
  participant *attach* and *room* (what the room sends it, which arms the echo guard).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from speechpipe.errors import AdmissionError, SpeechpipeError
from speechpipe.stages.channels import Channel, ChannelClosed
from speechpipe.stages.frames import STREAM_RATE, AudioFrame, OutputEvent, SpeechChunk, StatusEvent
from speechpipe.transport.audio_io import InputResampler, OutputResampler
from speechpipe.transport.closing import Close, close_of, outcome
from speechpipe.transport.codes import ErrorCode
from speechpipe.transport.connection_core import (
    AddIce,
    Fail,
    FlushInput,
    OpenPeer,
    PushAudio,
    ReportPlayout,
    SendError,
    StartPlan,
    StopInput,
    listener_too_slow,
    session_refused,
)
from speechpipe.transport.echo_guard import EchoGuard
from speechpipe.transport.privacy import describe_content
from speechpipe.transport.protocol import (
    Offer,
    dumps,
    encode_end,
    encode_error,
    encode_event,
    encode_started,
)
from speechpipe.transport.room_shell import Presence, SpeakerFeeds, encode_outgoing
from speechpipe.transport.server_side import ConnectionShell
from speechpipe.transport.session_api import LiveSession

if TYPE_CHECKING:
    from speechpipe.transport.webrtc import WebRtcPeer

__all__ = ["SpeakerPath"]

log = logging.getLogger("speechpipe.server")


class SpeakerPath:
    """One session on a connection (``presence``: its room membership, if any)."""

    def __init__(self, conn: ConnectionShell, plan: StartPlan, presence: Presence | None) -> None:
        self.conn = conn
        self.plan = plan
        self.start = plan.start
        self.presence = presence
        self.feeds: SpeakerFeeds | None = None  # rooms: a speaking member's pipelines
        self.outgoing: Channel[list[str | bytes]] = Channel(
            conn.limits.outgoing_capacity, name="outgoing"
        )
        self.resampler = InputResampler(plan.start.sample_rate)
        self.last_pts = 0

    # -- the session -------------------------------------------------------------------------
    async def run(self, stack: contextlib.AsyncExitStack) -> Close | None:
        """Slot, session, ``started``, then the tasks until the session ends; what ``stack``
        holds (the slot, the session, the room membership) closes with the caller's stack."""
        conn, start, presence = self.conn, self.start, self.presence
        try:
            await self._hold_capacity(stack)
            session = await stack.enter_async_context(conn.server.factory(self.plan.request))
        except SpeechpipeError as exc:  # refused: the close code by the code table
            return close_of(session_refused(exc))
        conn.core.session_opened(start)
        conn.observer.session_opened()
        conn.quota.begin_session()
        out_rate = start.request.output_sample_rate
        if presence is not None:
            presence.output_sample_rate = out_rate
            rooms = conn.limits.rooms
            presence.echo = EchoGuard(tail_s=rooms.echo_tail_s,
                                      report_tail_s=rooms.echo_report_tail_s,
                                      max_lag_s=rooms.echo_max_lag_s)
            self.feeds = SpeakerFeeds(conn.server.rooms, presence.room, presence.member.id,
                                      self.plan.request, conn.server.factory, session, out_rate,
                                      slot=self._extra_slot())
        await conn.ws.send(dumps(encode_started(
            conn.id, start, output_sample_rate=out_rate,
            room=presence.room.id if presence is not None else None,
            invite=presence.room.invite if presence is not None else None,
            engines=getattr(session, "engines", None))))
        log.info(
            "session %s started: rate=%d out_rate=%d mode=%s",
            conn.id, start.sample_rate, out_rate, start.request.mode,
        )
        stack.push_async_callback(conn.link.close)
        conn.link.attach(self._send_answer, self._reply_error, conn.id)
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._reader(session, tg), name=f"{conn.id}:reader")
                tg.create_task(self._pump(session, out_rate), name=f"{conn.id}:pump")
                tg.create_task(self._sender(), name=f"{conn.id}:sender")
                if presence is not None and self.feeds is not None:
                    tg.create_task(self.feeds.run(tg), name=f"{conn.id}:feeds")
                    conn.server.rooms.speaking(presence, self.feeds)
                    if presence.member.role.listens:
                        tg.create_task(conn.server.rooms.attacher(presence),
                                       name=f"{conn.id}:attach")
                        tg.create_task(self._room_forward(presence), name=f"{conn.id}:room")
        except ExceptionGroup as group:
            return outcome(group, conn.id)
        return None

    def _slot_owner(self) -> tuple[str, str]:
        """(the client a capacity slot counts for, its token's key): the core's rule."""
        return self.plan.slot_owner(getattr(self.conn.admission, "ip", None), self.conn.id)

    async def _hold_capacity(self, stack: contextlib.AsyncExitStack) -> None:
        """A capacity slot for this session (waiting in line with ``status`` events)."""
        capacity = self.conn.server.capacity
        if capacity is None:
            return
        client, token = self._slot_owner()

        async def notify(event: StatusEvent) -> None:  # the connection is idle: send directly
            await self.conn.ws.send(dumps(encode_event(event)))

        held = await stack.enter_async_context(capacity.slot(
            client, notify, token=token,
            ticket=self.start.ticket or "", resume=self.start.resume or "",
        ))
        if isinstance(held, str) and held:
            self.conn.id = held

    def _extra_slot(self) -> Callable[[], contextlib.AbstractAsyncContextManager[Any]] | None:
        """A capacity slot for one more pipeline of this room speaker (another listening
        language): taken when free, never waited for (a listener never queues behind
        speakers): refused, the listener gets the captions and a ``status`` saying why."""
        gate = self.conn.server.capacity
        if gate is None:
            return None
        client, token = self._slot_owner()

        async def refuse(event: StatusEvent) -> None:  # queued: give the place up at once
            raise AdmissionError("the server has no free capacity for a pipeline in another "
                                 "language now", retry_after_s=0.0)

        return lambda: gate.slot(client, refuse, token=token)

    # -- audio in ----------------------------------------------------------------------------
    async def _reader(self, session: LiveSession, tg: asyncio.TaskGroup) -> None:
        """Client messages through the core; its actions performed here."""
        conn = self.conn
        while True:
            message = await conn.recv()
            for action in conn.core.receive(message, time.monotonic(),
                                            peer=conn.link.peer is not None):
                if isinstance(action, SendError):
                    await self._reply_error(action.code, action.message)
                elif isinstance(action, Fail):
                    raise close_of(action)
                elif isinstance(action, PushAudio):
                    conn.quota.audio(action.seconds)
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
                    await self._offer(action.offer, session, tg)
                elif isinstance(action, ReportPlayout):
                    await self._playout(action.played_s)
                elif isinstance(action, AddIce):
                    await conn.link.add_ice(action.ice)

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
        if self.conn.core.stop():
            peer = self.conn.link.peer
            if peer is None:
                for frame in self.resampler.finish():
                    await self._push(session, frame)
            else:
                peer.stop_input()
            await session.finish()
            if self.feeds is not None:
                await self.feeds.finish()

    async def _push(self, session: LiveSession, frame: AudioFrame) -> None:
        """Client audio into the session (a room speaker's: into all its pipelines). The
        echo guard: while speech the room sent to a participant plays (and a tail after),
        its input is held (silence of the same length: the stream stays contiguous)."""
        presence = self.presence
        if (presence is not None and self.conn.limits.rooms.echo_guard
                and presence.hears_itself(time.monotonic())):
            frame = AudioFrame(np.zeros_like(frame.samples), frame.pts)
        if self.feeds is not None:
            await self.feeds.push(frame)
        else:
            await session.push(frame)

    async def _offer(self, offer: Offer, session: LiveSession, tg: asyncio.TaskGroup) -> None:
        """A speaker's WebRTC offer (the core checked its preconditions): its audio then
        arrives over the peer, contiguous after the WebSocket audio so far, and WebSocket
        audio after the peer ends is contiguous after that."""
        rate = self.start.sample_rate

        async def prepare() -> int:  # WebSocket audio so far, then WebRTC audio after it
            for frame in self.resampler.finish():
                await self._push(session, frame)
            self.resampler = InputResampler(rate, start_pts=self.resampler.pts)
            return self.resampler.pts

        async def push(frame: AudioFrame) -> None:  # WebRTC audio keeps the pace too
            self.conn.quota.audio(len(frame.samples) / STREAM_RATE)
            await self._push(session, frame)

        def on_end(peer: WebRtcPeer) -> None:  # WebSocket audio may follow, contiguous
            self.resampler = InputResampler(self.resampler.sample_rate, start_pts=peer.pts)

        await self.conn.link.offer(offer, tg, push=push, prepare=prepare, on_end=on_end)

    # -- events out --------------------------------------------------------------------------
    async def _pump(self, session: LiveSession, out_rate: int) -> None:
        conn = self.conn
        resampler = OutputResampler(out_rate)
        try:
            async for event in session.events():
                conn.observer.output_event(event)
                if conn.limits.log_content:  # an operator's debug switch; off by default
                    log.debug("session %s content: %s", conn.id, describe_content(event))
                pts = getattr(event, "stream_pts", None)
                if isinstance(pts, int):
                    self.last_pts = max(self.last_pts, pts)
                if self.feeds is not None:
                    await self._publish(event, resampler)
                elif isinstance(event, SpeechChunk):
                    await self._speech(event, resampler)
                else:
                    await self.outgoing.put([dumps(encode_event(event))])
        finally:
            self.outgoing.close()

    async def _speech(self, event: SpeechChunk, resampler: OutputResampler) -> None:
        """Translated speech: over the WebRTC peer when one is active (the client gets the
        header only, ``via: webrtc``), else the header and its PCM."""
        peer = self.conn.link.peer
        if peer is not None:
            peer.play(event)
            header = encode_event(event)
            header["via"] = "webrtc"
            await self.outgoing.put([dumps(header)])
        else:
            header, pcm = resampler.encode(event)
            await self.outgoing.put([dumps(header), pcm])

    async def _publish(self, event: OutputEvent, resampler: OutputResampler) -> None:
        """A room speaker's event: encoded once, published to the room; the speaker gets it
        too (a participant: its own captions only, never its own voice)."""
        feeds, presence = self.feeds, self.presence
        assert feeds is not None and presence is not None
        item = encode_outgoing(event, self.conn.id, resampler, time.monotonic())
        self.conn.server.rooms.publish(feeds.room, feeds.key(feeds.base_target), item, event)
        if not self.conn.core.hears_own(item.kind):
            return
        if isinstance(event, SpeechChunk) and self.conn.link.peer is not None:
            await self._speech(event, resampler)  # over WebRTC: the header only
        else:
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
                raise close_of(listener_too_slow())
            for item in sub.outbox.take():
                if item.kind == "audio":
                    presence.echo.sent(item.speech_s, time.monotonic())
                try:
                    await self.outgoing.put(list(item.parts))
                except ChannelClosed:
                    return
                self.conn.observer.fanout_delay(time.monotonic() - item.published)
            if sub.outbox.closed:
                return

    async def _sender(self) -> None:
        conn = self.conn
        async for batch in self.outgoing:
            for message in batch:
                await conn.ws.send(message)
        if self.feeds is not None:
            await self.feeds.drain()  # the room's other pipelines' last events
        # The session's events have ended: only after ``stop`` (or the session ending itself).
        if conn.link.peer is not None:
            await conn.link.peer.drain()  # the last translated speech plays out over WebRTC
        await conn.ws.send(dumps(encode_end(self.last_pts)))
        raise close_of(conn.core.finished(expired=conn.quota.expired))

    async def _reply_error(self, code: str, message: str) -> None:
        self.conn.observer.error(code)
        with contextlib.suppress(ChannelClosed):
            await self.outgoing.put([dumps(encode_error(code, message))])

    async def _send_answer(self, text: str) -> None:
        with contextlib.suppress(ChannelClosed):
            await self.outgoing.put([text])
