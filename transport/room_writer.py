"""One writer per room feed: the publisher hands it each message once, it writes them out.

A speaker's pipeline publishes a message by handing it to its feed's ``FeedWriter``
(``hand``: an append, O(1), never waits). The writer's task (one per feed, running while the
feed has messages to write) takes them in order; for each it remembers it in the feed (the
history a late joiner gets) and makes one pass over the feed's subscribers, in chunks of
``WRITE_CHUNK`` with a yield to the event loop between chunks, since the speaker's pipeline
runs on the same loop. Per subscriber the pure ``room.route`` decides:

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

from speechpipe.transport.room import Feed, FeedKey, Outgoing, Room, Route, Subscriber, route

__all__ = ["FeedWriter", "DirectSink", "WriterHost", "Frames", "frames_of", "WRITE_CHUNK"]

log = logging.getLogger("speechpipe.server")

WRITE_CHUNK = 64  # listeners per step of a pass; the loop runs other tasks between steps

Frames = tuple[tuple[bytes, bool], ...]  # a message's WebSocket frames: (payload, is text)


def frames_of(item: Outgoing) -> Frames:
    """``item``'s parts as frames, encoded once for every listener."""
    return tuple((part.encode(), True) if isinstance(part, str) else (part, False)
                 for part in item.parts)


class DirectSink(Protocol):
    """A listener's socket as a feed's writer sees it (``Subscriber.direct``)."""

    limit: int  # its write buffer's high-water mark

    def buffered(self) -> int | None:
        """Bytes in its write buffer; None when it takes no direct write now."""
        ...

    def write(self, frames: Frames) -> None:
        """Write ``frames`` at once (never waits)."""
        ...


class _Observer(Protocol):
    def fanout_dropped(self) -> None: ...

    def fanout_delay(self, seconds: float, cpu_s: float = 0.0) -> None: ...


class WriterHost(Protocol):
    """What a writer uses of its hub (``room_shell.RoomHub``)."""

    @property
    def observer(self) -> _Observer: ...

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
                for _ in self._deliver(*self.queue.popleft()):
                    pass
            return
        self.task = loop.create_task(self._run(), name=f"room-feed:{self.feed.key[1]}")

    async def _run(self) -> None:
        try:
            while self.queue:
                for _ in self._deliver(*self.queue.popleft()):
                    await asyncio.sleep(0)  # the speaker's pipeline runs between chunks
        except Exception:  # a bug here must not go unseen, nor stop the next messages
            log.exception("room feed writer failed")
        finally:
            self.task = None

    def _deliver(self, item: Outgoing, to: list[Subscriber] | None) -> Iterator[None]:
        """One pass: ``item`` to each recipient, a chunk at a time (yields between)."""
        recipients = self.feed.admit(item, self.host.clock()) if to is None else to
        frames: Frames | None = None
        dropped: list[Subscriber] = []
        for start in range(0, len(recipients), WRITE_CHUNK):
            if start:
                yield
            direct: list[DirectSink] = []
            for sub in recipients[start:start + WRITE_CHUNK]:
                sink: DirectSink | None = sub.direct
                way = route(sub.outbox, None if sink is None else sink.buffered(),
                            0 if sink is None else sink.limit)
                if way is Route.DIRECT:
                    direct.append(sink)  # type: ignore[arg-type]
                elif (way is Route.OUTBOX and not sub.outbox.offer(item)
                      and sub.outbox.overflowed):
                    dropped.append(sub)
            if direct:
                frames = frames or frames_of(item)
                self._write(item, frames, direct)
        for sub in dropped:
            self.feed.leave(sub)
            self.host.observer.fanout_dropped()
        if dropped and not self.feed.subscribers:
            self.host.unheard(self.room, self.feed.key)

    def _write(self, item: Outgoing, frames: Frames, sinks: list[DirectSink]) -> None:
        """``frames`` to each sink, nothing else between them (no await); the delay since
        publication and the CPU per listener to the fan-out metrics."""
        cpu = time.thread_time()
        for sink in sinks:
            sink.write(frames)
        each = self.host.send_cost(time.thread_time() - cpu, len(sinks))
        delay = time.monotonic() - item.published
        observe = self.host.observer.fanout_delay
        for _ in sinks:
            observe(delay, each)
