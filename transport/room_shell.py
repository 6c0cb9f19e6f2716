"""Rooms, the asyncio shell around the pure core (``transport.room``).

``RoomHub`` (one per server) holds the ``RoomRegistry`` and wires members: when a listening
member (listener or participant) joins, it is attached to every speaking member; when a
speaking member joins, every listening member is attached to it. Attaching asks the speaker's
``SpeakerFeeds`` for the feed in the listener's target language: the speaker's own pipeline
when it is that language, else one more pipeline on the same audio (one per (speaker, target
language) that someone listens to, started on first demand). Where the server has no model for
that direction (the factory refuses the request), the listener gets the source captions of the
speaker's own pipeline and a ``status`` ``translation_unavailable`` saying why.

A listener costs fan-out, not inference: a pipeline's events are encoded once
(``Outgoing``) and handed once to their feed's writer (``transport.room_writer``), which
writes the same bytes to every idle listener's socket in one pass and offers them to the
bounded outbox of every other subscriber.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from speechpipe.errors import SpeechpipeError
from speechpipe.stages.frames import AudioFrame, OutputEvent, SpeechChunk, TextHypothesis
from speechpipe.transport.audio_io import OutputResampler
from speechpipe.transport.echo_guard import EchoGuard
from speechpipe.transport.protocol import dumps, encode_event
from speechpipe.transport.room import (
    FULL,
    SOURCE_ONLY,
    Feed,
    FeedKey,
    Member,
    Outbox,
    Outgoing,
    Role,
    Room,
    RoomRegistry,
    Subscriber,
    presence_of,
)
from speechpipe.transport.room_access import JoinLimiter
from speechpipe.transport.room_captions import RoomCaptions
from speechpipe.transport.room_writer import FeedWriter, NoRoomMetrics, RoomObserver
from speechpipe.transport.session_api import LiveSession, SessionFactory

__all__ = ["RoomHub", "SpeakerFeeds", "Presence", "encode_outgoing", "RoomObserver",
           "RoomRedirect"]

log = logging.getLogger("speechpipe.server")

DRAIN_S = 30.0  # after the speaker's ``stop``: how long its extra pipelines get to finish
PENDING_PIPELINE_REQUESTS = 256  # queued asks for a further pipeline per speaker (a bound)


def encode_outgoing(event: OutputEvent, speaker: str, resampler: OutputResampler,
                    now: float) -> Outgoing:
    """One pipeline event as the message every listener gets (encoded once)."""
    if isinstance(event, SpeechChunk):
        header, pcm = resampler.encode(event)
        header["speaker"] = speaker
        return Outgoing("audio", (dumps(header), pcm), now, event.utterance,
                        speech_s=header["samples"] / resampler.sample_rate)
    data = encode_event(event)
    data["speaker"] = speaker
    final = isinstance(event, TextHypothesis) and event.final
    return Outgoing(str(data["type"]), (dumps(data),), now, data.get("utterance"), final)


def status_outgoing(status: str, message: str, speaker: str, **detail: Any) -> Outgoing:
    data = {"type": "status", "status": status, "message": message, "speaker": speaker,
            "detail": detail}
    return Outgoing("status", (dumps(data),), time.monotonic())


class RoomRedirect(Exception):
    """Cluster mode: the room lives on another node, at ``url``."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.url = url


@dataclasses.dataclass(eq=False)
class _Extra:
    session: LiveSession
    pts_base: int
    pump: asyncio.Task[Any] | None = None  # the task serving it


class SpeakerFeeds:
    """A speaking member's pipelines: its own (``base``) and one per further target language
    a listener asked for. Audio pushed here goes to all of them; events go to the room."""

    def __init__(self, hub: RoomHub, room: Room, member: str, request: Any,
                 factory: SessionFactory, base: LiveSession, base_rate: int,
                 slot: Callable[[], AbstractAsyncContextManager[Any]] | None = None) -> None:
        self.hub = hub
        self.room = room
        self.member = member
        self.request = request  # the base pipeline's SessionRequest
        self.factory = factory
        self.slot = slot  # a capacity slot for each further pipeline (never waits in line)
        self.base = base
        self.base_target = request.target_lang
        self.base_rate = base_rate
        self.extras: dict[str, _Extra] = {}
        self.refused: dict[str, str] = {}  # target -> why the server cannot serve it
        self.mute: dict[str, str] = {}  # target -> why its pipeline makes captions only
        self.next_pts = 0
        self.finished = False
        # listeners asking for a language not served yet; a join beyond the bound waits to
        # ask (each asker awaits its answer, so this only bounds a burst of joins)
        self._requests: asyncio.Queue[tuple[str, int, asyncio.Future[tuple[FeedKey, bool]]]] = (
            asyncio.Queue(maxsize=PENDING_PIPELINE_REQUESTS))
        self._tg: asyncio.TaskGroup | None = None

    def key(self, target: str) -> FeedKey:
        return (self.member, target)

    def engines(self, target: str) -> dict[str, str] | None:
        """What translates this speaker into ``target`` and speaks it, or None."""
        extra = self.extras.get(target)
        return getattr(extra.session if extra else self.base if target == self.base_target
                       else None, "engines", None)

    async def ensure(self, target: str, rate: int) -> tuple[FeedKey, bool]:
        """The feed for ``target``: (its key, True), or (the base feed, False) when the
        server has no model for that direction (``refused[target]`` says why)."""
        if target == self.base_target or target in self.extras:
            return self.key(target), True
        if target in self.refused or self.finished:
            return self.key(self.base_target), False
        future: asyncio.Future[tuple[FeedKey, bool]] = asyncio.get_running_loop().create_future()
        await self._requests.put((target, rate, future))
        return await future

    async def run(self, tg: asyncio.TaskGroup) -> None:
        """Start the pipelines asked for, one at a time, each in its own task (which owns its
        capacity slot and session, and publishes its events)."""
        self._tg = tg
        loop = asyncio.get_running_loop()
        while True:
            target, rate, future = await self._requests.get()
            if target in self.extras or target == self.base_target:
                future.set_result((self.key(target), True))
                continue
            if target in self.refused or self.finished:
                future.set_result((self.key(self.base_target), False))
                continue
            started: asyncio.Future[tuple[FeedKey, bool]] = loop.create_future()
            tg.create_task(self._serve(target, rate, started),
                           name=f"{self.member}:room:{target}")
            future.set_result(await started)

    async def _serve(self, target: str, rate: int,
                     started: asyncio.Future[tuple[FeedKey, bool]]) -> None:
        """One extra pipeline: a slot, the session, its events to the feed, until it is
        finished (its speaker stopped) or retired (its last listener left)."""
        request = dataclasses.replace(self.request, target_lang=target, output_sample_rate=rate)
        if self.hub.mt and target != "en" and request.mt in ("whisper", "auto"):
            request = dataclasses.replace(request, mt=self.hub.mt)
        extra: _Extra | None = None
        try:
            async with contextlib.AsyncExitStack() as stack:
                try:
                    if self.slot is not None:  # a speaker pipeline counts against capacity
                        await stack.enter_async_context(self.slot())
                    try:
                        session = await stack.enter_async_context(self.factory(request))
                    except SpeechpipeError as exc:
                        if exc.code != "no_voice":
                            raise
                        # a text-MT model but no voice for that language: captions only
                        session = await stack.enter_async_context(self.factory(
                            dataclasses.replace(request, speech=False)))
                        self.mute[target] = str(exc)
                except SpeechpipeError as exc:
                    self.refused[target] = str(exc)
                    return
                extra = _Extra(session, self.next_pts, asyncio.current_task())
                self.extras[target] = extra
                started.set_result((self.key(target), True))
                resampler = OutputResampler(rate)
                async for event in session.events():
                    if self.extras.get(target) is extra:  # retired: nobody listens
                        self.hub.publish(self.room, self.key(target), encode_outgoing(
                            event, self.member, resampler, time.monotonic()), event)
        finally:
            if extra is not None and self.extras.get(target) is extra:
                del self.extras[target]
            if not started.done():
                started.set_result((self.key(self.base_target), False))

    def retire(self, target: str) -> None:
        """Nobody listens to ``target`` any more: its pipeline finishes and frees its slot
        (a later listener starts a new one)."""
        extra = self.extras.pop(target, None)
        if extra is not None and self._tg is not None:
            self._tg.create_task(extra.session.finish(), name=f"{self.member}:retire")

    async def push(self, frame: AudioFrame) -> None:
        """The speaker's audio into every pipeline (each extra on its own stream clock)."""
        await self.base.push(frame)
        self.next_pts = frame.end
        for extra in list(self.extras.values()):
            if frame.end > extra.pts_base:
                await extra.session.push(AudioFrame(frame.samples, frame.pts - extra.pts_base))

    def flush(self) -> None:
        self.base.flush()
        for extra in self.extras.values():
            extra.session.flush()

    async def finish(self) -> None:
        """No more audio (the base pipeline is finished by the connection)."""
        self.finished = True
        for extra in self.extras.values():
            await extra.session.finish()

    async def drain(self) -> None:
        """Wait (bounded) for the extra pipelines' last events."""
        pumps = [e.pump for e in self.extras.values() if e.pump is not None]
        if pumps:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(DRAIN_S):
                    await asyncio.wait(pumps)


@dataclasses.dataclass(eq=False)
class Presence:
    """The shell's side of one member: its pending attachments (listening members) and its
    pipelines (speaking members)."""

    member: Member
    room: Room
    pending: asyncio.Queue[SpeakerFeeds] = dataclasses.field(default_factory=asyncio.Queue)
    feeds: SpeakerFeeds | None = None
    wake: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    overflow: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    output_sample_rate: int = 16_000
    # the echo guard (transport.echo_guard): when the speech sent to it ends playing
    echo: EchoGuard = dataclasses.field(default_factory=EchoGuard)

    def notify(self) -> None:
        """Its outbox changed (the outbox's ``wake``)."""
        self.wake.set()
        sub = self.member.subscriber
        if sub is not None and sub.outbox.overflowed:
            self.overflow.set()

    def hears_itself(self, now: float) -> bool:
        """Whether its microphone may now pick up speech the room sent it."""
        return self.echo.hears_itself(now)


class RoomHub:
    """Every room of one server (see the module docs)."""

    def __init__(self, registry: RoomRegistry | None = None, *, outbox_capacity: int = 256,
                 observer: RoomObserver | None = None,
                 clock: Callable[[], float] = time.monotonic, mt: str = "",
                 captions: RoomCaptions | None = None, joins: JoinLimiter | None = None) -> None:
        self.registry = registry or RoomRegistry()
        self.captions = captions or RoomCaptions(clock=clock)  # GET /rooms/ID/captions.vtt
        self.outbox_capacity = outbox_capacity
        self.mt = mt  # the text-MT model for room pipelines into languages other than English
        self.observer: RoomObserver = observer or NoRoomMetrics()
        self.clock = clock
        # cluster mode: the URL of the node where a room this node lacks lives (None: none)
        self.locate: Callable[[str], Awaitable[str | None]] | None = None
        # listener joins per client address and per room (transport.room_access)
        self.joins = joins or JoinLimiter(per_ip_s=0, ip_burst=1, per_room_s=0, room_burst=1)
        self._send_cpu = 0.0  # CPU of listener sends that did not wait (send_cost)
        self._sends = 0

    def send_cost(self, cpu: float | None, count: int = 1) -> float:
        """The CPU of one listener send (None: it waited, so its own CPU is unknown: the
        running mean of the sends that did not wait stands in for it), or each of ``count``
        direct writes that took ``cpu`` together."""
        if cpu is None:
            return self._send_cpu / self._sends if self._sends else 0.0
        self._send_cpu += cpu
        self._sends += count
        return cpu / count

    def _changed(self) -> None:
        self.observer.rooms_changed(len(self.registry.rooms), self.registry.listeners)

    # -- membership ----------------------------------------------------------------------
    def join(self, room: Room, member: Member) -> Presence:
        """Add ``member`` (``RoomError`` when refused) and queue its attachments."""
        self.registry.join(room, member)
        presence = Presence(member, room)
        member.handle = presence
        self._changed()
        if member.role.listens:
            member.subscriber = Subscriber(member.id, member.target_lang,
                                           Outbox(self.outbox_capacity, presence.notify))
            for other in room.speakers():
                other_presence = other.handle
                if (other.id != member.id and isinstance(other_presence, Presence)
                        and other_presence.feeds is not None):
                    presence.pending.put_nowait(other_presence.feeds)
        self._present(room)
        return presence

    def speaking(self, presence: Presence, feeds: SpeakerFeeds) -> None:
        """A speaking member's pipelines run: attach every listening member to them."""
        presence.feeds = feeds
        for other in presence.room.listening():
            other_presence = other.handle
            if other.id != presence.member.id and isinstance(other_presence, Presence):
                other_presence.pending.put_nowait(feeds)

    def leave(self, presence: Presence) -> None:
        room = presence.room
        member = presence.member
        sub = member.subscriber
        heard = [key for key, feed in room.feeds.items()
                 if sub is not None and id(sub) in feed.subscribers]
        ending = [feed for key, feed in room.feeds.items()
                  if member.role.speaks and key[0] == member.id]
        self.registry.leave(room, member)
        if room.id not in self.registry.rooms:
            self.joins.forget(room.id)  # the room ended
        for key in heard:
            self._retire_unheard(room, key)
        if sub is not None:
            sub.direct = None
            sub.outbox.close()
        for feed in ending:  # through its writer: after the feed's last messages
            orphans = [orphan for orphan, _ in feed.subscribers.values()]
            if orphans:
                self._writer(room, feed).hand(status_outgoing(
                    "speaker_left", "a speaker left the room", member.id), orphans)
        self._changed()
        self._present(room)

    def _present(self, room: Room) -> None:
        """Membership changed: the room's participants get a ``presence`` event (at most one
        per ``room.PRESENCE_EVERY_S``, with the state then: a join storm sends a few, not
        one per listener)."""
        if not any(m.role is Role.PARTICIPANT for m in room.members.values()):
            return
        delay = room.presence.changed(self.clock())
        if delay is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a hub used without a loop (a test of the core): at once
            delay = 0.0
        if delay <= 0:
            self._send_presence(room)
        else:
            loop.call_later(delay, self._send_presence, room)

    def _send_presence(self, room: Room) -> None:
        room.presence.sent(self.clock())
        if self.registry.rooms.get(room.id) is not room:
            return  # it ended meanwhile
        item = Outgoing("presence", (dumps(presence_of(room)),), time.monotonic())
        for member in room.members.values():
            if member.role is Role.PARTICIPANT and member.subscriber is not None:
                member.subscriber.outbox.offer(item)

    def unheard(self, room: Room, key: FeedKey) -> None:
        """A feed's writer dropped its last subscribers (``room_writer.WriterHost``)."""
        self._retire_unheard(room, key)

    def _retire_unheard(self, room: Room, key: FeedKey) -> None:
        """A further pipeline nobody listens to any more stops (the speaker's own goes on)."""
        feed = room.feeds.get(key)
        speaker = room.members.get(key[0])
        handle = speaker.handle if speaker is not None else None
        if (feed is not None and not feed.subscribers and isinstance(handle, Presence)
                and handle.feeds is not None and key[1] != handle.feeds.base_target):
            handle.feeds.retire(key[1])

    async def attach(self, presence: Presence, feeds: SpeakerFeeds) -> None:
        """Subscribe a listening member to one speaker: history first, then live."""
        member = presence.member
        sub = member.subscriber
        assert sub is not None
        key, available = await feeds.ensure(member.target_lang, presence.output_sample_rate)
        if member.id not in presence.room.members or feeds.member not in presence.room.members:
            return  # one of them left meanwhile
        if not available:
            sub.outbox.offer(status_outgoing(
                "translation_unavailable",
                f"no model for this direction on this server "
                f"({feeds.refused.get(member.target_lang, 'refused')}): "
                f"you get the speaker's captions", feeds.member,
                target_lang=member.target_lang, captions_lang=feeds.request.source_lang))
        if available and member.target_lang in feeds.mute:
            sub.outbox.offer(status_outgoing(
                "speech_unavailable",
                f"no voice for this language on this server "
                f"({feeds.mute[member.target_lang]}): you get the translated captions",
                feeds.member, target_lang=member.target_lang))
        engines = feeds.engines(member.target_lang) if available else None
        if engines:  # what the listener hears is labelled honestly, as in a session's started
            sub.outbox.offer(status_outgoing("engines", f"translated by {engines['mt']}, spoken by "
                f"{engines.get('voice', 'none')}", feeds.member, target_lang=member.target_lang,
                engines=engines))
        feed = presence.room.feed(key)
        history = member.role is not Role.LISTENER or presence.room.listener_history
        for item in feed.join(sub, FULL if available else SOURCE_ONLY, self.clock(),
                              history=history):
            sub.outbox.offer(item)

    async def attacher(self, presence: Presence) -> None:
        """A listening member's task: attach it to each speaker as they come."""
        while True:
            feeds = await presence.pending.get()
            await self.attach(presence, feeds)

    # -- publishing ----------------------------------------------------------------------
    def publish(self, room: Room, key: FeedKey, item: Outgoing,
                event: OutputEvent | None = None) -> None:
        """``item`` to the feed's listeners, handed once to the feed's writer (never waits,
        whatever the number of listeners); ``event`` (what it encodes) to the captions."""
        if event is not None:
            self.captions.observe(room, key, event)
        # made when nobody listens yet too: its writer keeps the history for late joiners
        self._writer(room, room.feed(key)).hand(item)

    def _writer(self, room: Room, feed: Feed) -> FeedWriter:
        writer = feed.writer
        if writer is None:
            writer = feed.writer = FeedWriter(self, room, feed)
        return writer

    def room_of(self, room_id: str) -> Room:
        return self.registry.get(room_id)

    def new_room(self, room_id: str | None = None, **options: Any) -> Room:
        """A new room (``options``: ``RoomRegistry.create``'s)."""
        room = self.registry.create(self.clock(), room_id, **options)
        self._changed()
        return room


SessionContext = AbstractAsyncContextManager[LiveSession]
