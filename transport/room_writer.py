"""One writer per room feed: the publisher hands it each message once, it writes them out.

A speaker's pipeline publishes a message by handing it to its feed's ``FeedWriter``
(``hand``: an append, O(1), never waits). The writer's task (one per feed, running while the
feed has messages to write) takes them in order; for each it remembers it in the feed (the
history a late joiner gets) and makes one pass over the feed's subscribers, yielding to the
event loop once it has held it for ``WRITE_SLICE_S`` (the speaker's pipeline runs on the
same loop). Per subscriber the pure ``room.route`` decides:

- **direct**: the listener is idle (nothing in its outbox, its sender not writing, its
  socket's write buffer below its limit): the message is written on its connection now
  (``DirectSink.write``: websockets' ``broadcast``, which never waits), with no task woken;
- **outbox**: anything else (bytes still buffered, messages already queued, a participant, a
  WebRTC listener): the bounded outbox and the listener's own sender, as before. So the order
  per listener holds, and a listener that stops reading fills its socket, then its outbox,
  which overflows during the talk (``listener_too_slow``).

Each direct write counts in the fan-out histogram (publication -> written) and its CPU in the
fan-out cost, as the senders' writes do. Without a running loop (a test of the hub alone)
the messages are delivered at once, through the outboxes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Iterator
from typing import Protocol

from websockets.frames import Frame, Opcode

from speechpipe.transport.room import Feed, FeedKey, Outgoing, Room, Route, Subscriber, route

__all__ = ["FeedWriter", "DirectSink", "WriterHost", "Frames", "frames_of", "wire_of",
           "WRITE_CHUNK", "RoomObserver", "NoRoomMetrics"]

log = logging.getLogger("speechpipe.server")

WRITE_CHUNK = 64  # listeners looked at between two looks at the clock
# a pass holds the event loop for at most about this long before other tasks run: one
# audio frame. Yielding every chunk let other tasks run 15 times in a pass over 1000
# listeners and widened its first-to-last spread (docs/benchmarks.md, "Rooms")
WRITE_SLICE_S = 0.020

Frames = tuple[tuple[bytes, bool], ...]  # a message's WebSocket frames: (payload, is text)


def frames_of(item: Outgoing) -> Frames:
    """``item``'s parts as frames, encoded once for every listener."""
    return tuple((part.encode(), True) if isinstance(part, str) else (part, False)
                 for part in item.parts)


def wire_of(frames: Frames) -> bytes:
    """``frames`` as a server puts them on the wire (RFC 6455: unmasked; the server runs
    without extensions), serialized once by websockets' own ``Frame`` for every listener: a
    direct write is then one ``transport.write`` of these bytes, not a framing per listener
    (1000 listeners: ~20 ms a pass framed per listener, measured)."""
    return b"".join(Frame(Opcode.TEXT if text else Opcode.BINARY, data).serialize(mask=False)
                    for data, text in frames)


class DirectSink(Protocol):
    """A listener's socket as a feed's writer sees it (``Subscriber.direct``)."""

    limit: int  # its write buffer's high-water mark

    def buffered(self) -> int | None:
        """Bytes in its write buffer; None when it takes no direct write now."""
        ...

    def write(self, frames: Frames, wire: bytes) -> None:
        """Write ``frames`` at once (never waits); ``wire``: the same, serialized."""
        ...


class RoomObserver(Protocol):
    """Hooks for the rooms' metrics (``ServerObserver`` has them)."""

    def rooms_changed(self, rooms: int, listeners: int) -> None:
        """There are ``rooms`` rooms with ``listeners`` listeners now."""

    def fanout_dropped(self) -> None:
        """A listener's outbox overflowed (it is closed with ``listener_too_slow``)."""

    def fanout_delay(self, seconds: float, cpu_s: float = 0.0) -> None:
        """A message reached a listener's socket ``seconds`` after it was published
        (``cpu_s``: the server's CPU time writing it)."""


class NoRoomMetrics:
    """No metrics (a hub made without an observer)."""

    def rooms_changed(self, rooms: int, listeners: int) -> None:
        pass

    def fanout_dropped(self) -> None:
        pass

    def fanout_delay(self, seconds: float, cpu_s: float = 0.0) -> None:
        pass


class WriterHost(Protocol):
    """What a writer uses of its hub (``room_shell.RoomHub``)."""

    @property
    def observer(self) -> RoomObserver: ...

    def clock(self) -> float: ...

    def send_cost(self, cpu: float | None, count: int = 1) -> float: ...

    def unheard(self, room: Room, key: FeedKey) -> None: ...


class FeedWriter:
    """The writer of one feed (see the module docs)."""

    def __init__(self, host: WriterHost, room: Room, feed: Feed) -> None:
        self.host = host
        self.room = room
        self.feed = feed
        # (message, to whom: None for the feed's subscribers of its kind, after remembering
        # it; a list for exactly those, e.g. ``speaker_left`` to a feed that ended)
        self.queue: deque[tuple[Outgoing, list[Subscriber] | None]] = deque()
        self.task: asyncio.Task[None] | None = None

    def hand(self, item: Outgoing, to: list[Subscriber] | None = None) -> None:
        """Queue ``item`` for the feed's listeners (never waits)."""
        self.queue.append((item, to))
        if self.task is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop: a test of the hub alone
            while self.queue:
                for _ in self._deliver(self._take()):
                    pass
            return
        self.task = loop.create_task(self._run(), name=f"room-feed:{self.feed.key[1]}")

    def _take(self) -> list[tuple[Outgoing, list[Subscriber] | None]]:
        """Every message queued now: one pass writes them together."""
        batch = list(self.queue)
        self.queue.clear()
        return batch

    async def _run(self) -> None:
        try:
            while self.queue:
                for _ in self._deliver(self._take()):
                    await asyncio.sleep(0)  # the speaker's pipeline runs between chunks
        except Exception:  # a bug here must not go unseen, nor stop the next messages
            log.exception("room feed writer failed")
        finally:
            self.task = None

    def _deliver(self, batch: list[tuple[Outgoing, list[Subscriber] | None]]) -> Iterator[None]:
        """One pass over the recipients of the messages queued together (the captions and
        the translation of one decode come as two), a chunk at a time (yields between): an
        idle listener gets all of them in one write, in order; each message still goes its
        own way (``route``), so once one went to a listener's outbox, the rest follow it."""
        now = self.host.clock()
        items = [item for item, _ in batch]
        # admitted in order: the history a late joiner gets is the messages' order
        members = [{id(sub): sub for sub in (self.feed.admit(item, now) if to is None else to)}
                   for item, to in batch]
        recipients = list({key: sub for m in members for key, sub in m.items()}.values())
        encoded: dict[int, tuple[Frames, bytes]] = {}
        dropped: dict[int, Subscriber] = {}
        slice_began = time.perf_counter()
        for start in range(0, len(recipients), WRITE_CHUNK):
            if start and time.perf_counter() - slice_began >= WRITE_SLICE_S:
                yield
                slice_began = time.perf_counter()
            writes: list[tuple[DirectSink, list[int]]] = []
            for sub in recipients[start:start + WRITE_CHUNK]:
                sink: DirectSink | None = sub.direct
                # nothing is written before the chunk ends: one look at the socket serves
                # every message of the batch
                buffered = None if sink is None else sink.buffered()
                limit = 0 if sink is None else sink.limit
                direct: list[int] = []
                for k, item in enumerate(items):
                    if id(sub) not in members[k]:
                        continue
                    way = route(sub.outbox, buffered, limit)
                    if way is Route.DIRECT:
                        direct.append(k)
                    elif (way is Route.OUTBOX and not sub.outbox.offer(item)
                          and sub.outbox.overflowed):
                        dropped[id(sub)] = sub
                if direct:
                    for k in direct:
                        if k not in encoded:
                            frames = frames_of(items[k])
                            encoded[k] = (frames, wire_of(frames))
                    writes.append((sink, direct))  # type: ignore[arg-type]
            if writes:
                self._write(items, encoded, writes)
        for sub in dropped.values():
            self.feed.leave(sub)
            self.host.observer.fanout_dropped()
        if dropped and not self.feed.subscribers:
            self.host.unheard(self.room, self.feed.key)

    def _write(self, items: list[Outgoing], encoded: dict[int, tuple[Frames, bytes]],
               writes: list[tuple[DirectSink, list[int]]]) -> None:
        """Each sink its messages' frames in one write, nothing else between them (no
        await); the delay since each message's publication and the CPU per delivery to the
        fan-out metrics."""
        cpu = time.thread_time()
        for sink, ks in writes:
            if len(ks) == 1:
                sink.write(*encoded[ks[0]])
            else:
                sink.write(tuple(f for k in ks for f in encoded[k][0]),
                           b"".join(encoded[k][1] for k in ks))
        deliveries = sum(len(ks) for _, ks in writes)
        each = self.host.send_cost(time.thread_time() - cpu, deliveries)
        written = time.monotonic()
        observe = self.host.observer.fanout_delay
        for _, ks in writes:
            for k in ks:
                observe(written - items[k].published, each)
