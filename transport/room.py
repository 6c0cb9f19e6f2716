"""Rooms: one speaker heard by many listeners, and conversations (the pure core, no I/O).

A ``Room`` holds *feeds*, one per (speaking member, target language) that someone listens
to: the encoded messages of one pipeline (``Outgoing``: a JSON text, and for speech its PCM,
encoded once, the same bytes for every listener). Each listener is a ``Subscriber`` with a
bounded ``Outbox``: publishing never waits; a subscriber whose outbox is full is marked
``overflowed`` (its connection is closed with ``listener_too_slow``, 4012) and gets nothing
more, so one listener that stops reading costs the others nothing. A listener that is idle
(nothing queued, its sender not writing, its socket's write buffer below its limit) gets a
message written on its socket at once by its feed's writer instead (``route`` decides, per
listener and message; the writer is ``transport.room_writer``). Each feed keeps a bounded
history of committed captions (the last ``history_s`` seconds, at most ``history_items``) and
the current utterance's latest hypotheses, which a late joiner receives first; its live stream
then starts at the next published message, so its speech starts at a phrase (``SpeechChunk``)
boundary, never mid-word.

``RoomRegistry`` makes rooms (ids are long random capabilities), counts listeners against
the per-room and per-server limits and forgets a room when its last member leaves. The
asyncio shell (pipelines, sockets) is ``transport.room_shell``; time is a parameter here.
"""

from __future__ import annotations

import enum
import math
import secrets
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Role", "Outgoing", "Outbox", "Subscriber", "Feed", "Member", "Room", "RoomRegistry",
    "RoomError", "FULL", "SOURCE_ONLY", "new_room_id", "ROOM_ID_BYTES", "presence_of",
    "Throttle", "Route", "route",
]

ROOM_ID_BYTES = 24  # 192 random bits: a room id is a capability, unguessable


def new_room_id() -> str:
    """A fresh room id (URL-safe, 32 characters)."""
    return secrets.token_urlsafe(ROOM_ID_BYTES)


class Role(enum.StrEnum):
    """What a session does in a room."""

    SPEAKER = "speaker"  # sends audio; its pipeline's output is published to the room
    LISTENER = "listener"  # sends no audio; receives the room in its target language
    PARTICIPANT = "participant"  # both; hears every other participant, never itself

    @property
    def speaks(self) -> bool:
        return self is not Role.LISTENER

    @property
    def listens(self) -> bool:
        return self is not Role.SPEAKER


FULL = frozenset({"source", "target", "audio", "vad", "utterance_end", "status"})
"""What a subscriber of a feed in its own target language receives."""
SOURCE_ONLY = frozenset({"source", "vad"})
"""What a subscriber gets where the server has no model for its direction: the captions."""


class RoomError(Exception):
    """A room request refused: ``code`` is an ``ErrorCode`` value (``no_room``, ``room_full``)."""

    def __init__(self, code: str, message: str, **detail: Any) -> None:
        super().__init__(message)
        self.code = code
        self.detail = detail  # more fields of the error event (``retry_after_s``)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One message as every listener of a feed receives it: ``parts`` are the WebSocket
    messages (a JSON text, then the PCM for ``audio``), encoded once."""

    kind: str  # the event's ``type``
    parts: tuple[str | bytes, ...]
    published: float  # monotonic time it was published (the fan-out delay counts from here)
    utterance: int | None = None
    final: bool = False
    speech_s: float = 0.0  # seconds of speech (``audio``): the echo guard's playback time


class Outbox:
    """A subscriber's bounded queue. ``offer`` never waits: when full, the outbox is marked
    ``overflowed``, emptied and takes nothing more. ``wake`` is called after every change
    (the shell sets an event)."""

    def __init__(self, capacity: int, wake: Callable[[], None] = lambda: None) -> None:
        if capacity < 1:
            raise ValueError("an outbox holds at least one message")
        self.capacity = capacity
        self.wake = wake
        self.overflowed = False
        self.closed = False
        # its sender is writing what it took: a message written past it now would come
        # between (the shell sets it around its writes)
        self.draining = False
        self._items: deque[Outgoing] = deque()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def busy(self) -> bool:
        """Messages are queued or being written: a new one must go behind them."""
        return self.draining or bool(self._items)

    def offer(self, item: Outgoing) -> bool:
        """Queue ``item``; False when it overflowed now or before (or is closed)."""
        if self.overflowed or self.closed:
            return False
        if len(self._items) >= self.capacity:
            self.overflowed = True
            self._items.clear()
            self.wake()
            return False
        self._items.append(item)
        self.wake()
        return True

    def take(self) -> list[Outgoing]:
        """Everything queued, oldest first."""
        items = list(self._items)
        self._items.clear()
        return items

    def close(self) -> None:
        self.closed = True
        self.wake()


@dataclass(eq=False)
class Subscriber:
    """One listening member's receiving end."""

    member: str
    target_lang: str
    outbox: Outbox
    output_sample_rate: int = 16_000
    # the shell's socket a feed's writer may write to directly (``transport.room_writer``;
    # None: everything goes through the outbox, e.g. a participant)
    direct: Any = None


class Route(enum.Enum):
    """How one message reaches one subscriber."""

    DIRECT = "direct"  # written on its socket now, by the feed's writer
    OUTBOX = "outbox"  # queued in its outbox, behind what it has pending (its sender writes)
    NONE = "none"  # closed or overflowed: nothing more


def route(outbox: Outbox, buffered: int | None, limit: int) -> Route:
    """Where a message for a subscriber goes: ``buffered`` is what its socket's write buffer
    holds (None: no direct path now: none, not open, a WebRTC peer), ``limit`` its high-water
    mark. Directly only when nothing is ahead of it (the outbox is not ``busy``) and the
    socket takes it (below the limit): so the order per listener holds, and a listener that
    stops reading fills its socket, then its outbox, which overflows as before."""
    if outbox.closed or outbox.overflowed:
        return Route.NONE
    if buffered is not None and buffered < limit and not outbox.busy:
        return Route.DIRECT
    return Route.OUTBOX


FeedKey = tuple[str, str]  # (speaking member id, target language)


@dataclass(eq=False)
class Feed:
    """The published output of one pipeline: (speaker, target language)."""

    key: FeedKey
    history_s: float = 60.0
    history_items: int = 256
    history: deque[Outgoing] = field(default_factory=deque)
    current: dict[str, Outgoing] = field(default_factory=dict)  # side -> latest non-final
    # speech still playing for the listeners (each chunk back to back after the previous one
    # ends): (the item, when its playback ends); a late joiner starts with these
    playing: deque[tuple[Outgoing, float]] = field(default_factory=deque)
    play_end: float = 0.0
    subscribers: dict[int, tuple[Subscriber, frozenset[str]]] = field(default_factory=dict)
    writer: Any = None  # the shell's writer for this feed (``transport.room_writer``)

    def admit(self, item: Outgoing, now: float) -> list[Subscriber]:
        """Remember ``item`` (history, current state, speech playing) and return the
        subscribers that take its kind now: who joins later gets it in its backlog if at all,
        never twice."""
        self._remember(item, now)
        return [sub for sub, kinds in self.subscribers.values() if item.kind in kinds]

    def publish(self, item: Outgoing, now: float) -> list[Subscriber]:
        """Offer ``item`` to every subscriber's outbox that takes its kind; returns those
        that overflowed now (the shell closes them)."""
        dropped: list[Subscriber] = []
        for sub in self.admit(item, now):
            if not sub.outbox.offer(item) and sub.outbox.overflowed:
                dropped.append(sub)
                self.subscribers.pop(id(sub), None)
        return dropped

    def _remember(self, item: Outgoing, now: float) -> None:
        if item.kind == "audio":
            self.play_end = max(item.published, self.play_end) + item.speech_s
            self.playing.append((item, self.play_end))
            self._trim(now)
            return
        if item.kind not in ("source", "target"):
            return
        if item.final:
            self.history.append(item)
            current = self.current.get(item.kind)
            if current is not None and (current.utterance or 0) <= (item.utterance or 0):
                del self.current[item.kind]
        else:
            self.current[item.kind] = item
        self._trim(now)

    def _trim(self, now: float) -> None:
        while self.playing and self.playing[0][1] <= now:
            self.playing.popleft()
        while self.history and (len(self.history) > self.history_items
                                or now - self.history[0].published > self.history_s):
            self.history.popleft()

    def join(self, sub: Subscriber, kinds: frozenset[str], now: float, *,
             history: bool = True) -> list[Outgoing]:
        """Subscribe ``sub``; returns what it gets first: the committed captions of the last
        ``history_s`` seconds (unless not ``history``), the current utterance's latest
        state, then the speech the others are still hearing, from the start of the phrase
        playing now (never mid-word; of its kinds)."""
        self._trim(now)
        self.subscribers[id(sub)] = (sub, kinds)
        backlog = [item for item in self.history if item.kind in kinds] if history else []
        current = sorted(self.current.values(), key=lambda item: item.published)
        speech = [item for item, _ in self.playing]
        return [item for item in backlog + current + speech if item.kind in kinds]

    def leave(self, sub: Subscriber) -> None:
        self.subscribers.pop(id(sub), None)


@dataclass(eq=False)
class Member:
    """A session in a room."""

    id: str
    role: Role
    target_lang: str
    subscriber: Subscriber | None = None  # members that listen
    handle: object = None  # the shell's object for a speaking member (its pipelines)


PRESENCE_EVERY_S = 0.5  # a room's participants get at most one ``presence`` event this often


class Throttle:
    """At most one message per ``interval_s``, carrying the latest state: ``changed`` says
    after how many seconds to send (None: a send is due already and will carry this change
    too); ``sent`` records the send."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.last = -math.inf
        self.due = False

    def changed(self, now: float) -> float | None:
        if self.due:
            return None
        self.due = True
        return max(0.0, self.last + self.interval_s - now)

    def sent(self, now: float) -> None:
        self.due = False
        self.last = now


@dataclass(eq=False)
class Room:
    """One room: its members and feeds."""

    id: str
    created: float
    members: dict[str, Member] = field(default_factory=dict)
    feeds: dict[FeedKey, Feed] = field(default_factory=dict)
    history_s: float = 60.0
    history_items: int = 256
    # the right to speak (``transport.room_access``): the capability speaking members get
    # (``started.invite``) and the token key of the member that opened the room
    invite: str = field(default_factory=new_room_id)
    opener_key: str | None = None
    conversation: bool = False  # opened by a participant
    listener_history: bool = True  # listeners get the history (a conversation: if it allows)
    presence: Throttle = field(default_factory=lambda: Throttle(PRESENCE_EVERY_S))

    @property
    def listeners(self) -> int:
        return sum(1 for m in self.members.values() if m.role is Role.LISTENER)

    def speakers(self) -> list[Member]:
        return [m for m in self.members.values() if m.role.speaks]

    def listening(self) -> list[Member]:
        return [m for m in self.members.values() if m.role.listens]

    def feed(self, key: FeedKey) -> Feed:
        """The feed of ``key`` (made on first use)."""
        feed = self.feeds.get(key)
        if feed is None:
            feed = self.feeds[key] = Feed(key, self.history_s, self.history_items)
        return feed

    def drop_feeds_of(self, member: str) -> list[Subscriber]:
        """A speaking member left: its feeds end; returns their subscribers."""
        subs: list[Subscriber] = []
        for key in [k for k in self.feeds if k[0] == member]:
            subs.extend(sub for sub, _ in self.feeds.pop(key).subscribers.values())
        return subs

    def unsubscribe(self, sub: Subscriber) -> None:
        for feed in self.feeds.values():
            feed.leave(sub)


class RoomRegistry:
    """Every room of a server, with the listener limits (``None``: no limit)."""

    def __init__(self, *, max_listeners_per_room: int | None = None,
                 max_listeners: int | None = None, history_s: float = 60.0,
                 history_items: int = 256, new_id: Callable[[], str] = new_room_id) -> None:
        self.rooms: dict[str, Room] = {}
        self.max_listeners_per_room = max_listeners_per_room
        self.max_listeners = max_listeners
        self.history_s = history_s
        self.history_items = history_items
        self._new_id = new_id

    @property
    def listeners(self) -> int:
        return sum(room.listeners for room in self.rooms.values())

    def create(self, now: float, room_id: str | None = None, *, opener_key: str | None = None,
               conversation: bool = False, listener_history: bool = True) -> Room:
        """A new room (a fresh random id unless ``room_id``: a token's room claim), opened by
        a member whose token key is ``opener_key``. A ``conversation``'s listeners get no
        history unless ``listener_history``."""
        rid = room_id or self._new_id()
        if rid in self.rooms:
            raise RoomError("room_exists", "that room exists already")
        room = Room(rid, now, history_s=self.history_s, history_items=self.history_items,
                    opener_key=opener_key, conversation=conversation,
                    listener_history=listener_history or not conversation)
        self.rooms[rid] = room
        return room

    def get(self, room_id: str) -> Room:
        room = self.rooms.get(room_id)
        if room is None:
            raise RoomError("no_room", "no such room (it ended, or the link is wrong)")
        return room

    def join(self, room: Room, member: Member) -> None:
        """Add ``member``; a listener over a limit is refused (``room_full``)."""
        if member.role is Role.LISTENER:
            if (self.max_listeners_per_room is not None
                    and room.listeners >= self.max_listeners_per_room):
                raise RoomError("room_full", f"this room has its maximum of "
                                f"{self.max_listeners_per_room} listeners")
            if self.max_listeners is not None and self.listeners >= self.max_listeners:
                raise RoomError("room_full", f"this server has its maximum of "
                                f"{self.max_listeners} listeners")
        room.members[member.id] = member

    def leave(self, room: Room, member: Member) -> list[Subscriber]:
        """Remove ``member``; returns the subscribers of the feeds that ended with it. The
        room is forgotten when its last member left."""
        room.members.pop(member.id, None)
        if member.subscriber is not None:
            room.unsubscribe(member.subscriber)
        orphans = room.drop_feeds_of(member.id) if member.role.speaks else []
        if not room.members:
            self.rooms.pop(room.id, None)
        return orphans

    def report(self) -> dict[str, dict[str, int]]:
        """Each room's counts by id (for the cluster ledger, which tells other nodes where a
        room lives; ``cluster status`` shows the counts only)."""
        return {r.id: {"speakers": sum(1 for m in r.members.values() if m.role is Role.SPEAKER),
                       "listeners": r.listeners,
                       "participants": sum(1 for m in r.members.values()
                                           if m.role is Role.PARTICIPANT)}
                for r in self.rooms.values()}


def presence_of(room: Room) -> dict[str, Any]:
    """Who is in ``room``, as its participants see it (the ``presence`` event): each speaking
    member (session id, role, listening language) in the order they joined, and how many
    listeners there are (a count: listeners stay unnamed)."""
    return {"type": "presence",
            "members": [{"session": m.id, "role": str(m.role), "target_lang": m.target_lang}
                        for m in room.members.values() if m.role.speaks],
            "listeners": room.listeners}
