"""Bounded channels between stages, each with a named overflow policy.

- ``BLOCK``: the producer waits while the channel is full (committed text, audio out, and
  audio in when replaying as fast as the machine goes, so every decode step is taken).
- ``COALESCE``: never blocks; when full, the oldest items are merged by a caller-supplied
  function (audio in at real-time pace: a slow model raises latency, not memory).
- ``LATEST``: never blocks; when full, the oldest item is dropped (tentative text, status).

``close()`` lets the consumer drain what is queued, then ``get`` raises ``ChannelClosed``.
Cancel-safety: ``get``/``get_batch`` either return items or raise without losing any.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Channel", "ChannelClosed", "Overflow"]

T = TypeVar("T")


class ChannelClosed(Exception):
    """The channel was closed and everything in it has been read."""


class Overflow(enum.Enum):
    """What ``put`` does when a channel is full: block, drop the oldest, or coalesce."""
    BLOCK = "block"
    COALESCE = "coalesce"
    LATEST = "latest"


class Channel(Generic[T]):
    """A bounded async queue between two stages with a named overflow policy."""

    def __init__(
        self,
        capacity: int,
        policy: Overflow = Overflow.BLOCK,
        *,
        merge: Callable[[T, T], T] | None = None,
        name: str = "",
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        if policy is Overflow.COALESCE and merge is None:
            raise ValueError("a COALESCE channel needs a merge function")
        self.capacity = capacity
        self.policy = policy
        self.name = name
        self._merge = merge
        self._items: deque[T] = deque()
        self._closed = False
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self.dropped = 0
        self.merged = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def closed(self) -> bool:
        """True once ``close`` was called."""
        return self._closed

    def _update(self) -> None:
        if self._items or self._closed:
            self._readable.set()
        else:
            self._readable.clear()
        if len(self._items) < self.capacity or self._closed:
            self._writable.set()
        else:
            self._writable.clear()

    async def put(self, item: T) -> None:
        """Queue an item under the channel's overflow policy."""
        if self._closed:
            raise ChannelClosed(self.name)
        if self.policy is Overflow.BLOCK:
            while len(self._items) >= self.capacity:
                await self._writable.wait()
                if self._closed:
                    raise ChannelClosed(self.name)
        self.put_nowait(item)

    def put_nowait(self, item: T) -> None:
        """Add without waiting; a full BLOCK channel raises ``asyncio.QueueFull``."""
        if self._closed:
            raise ChannelClosed(self.name)
        if len(self._items) >= self.capacity:
            if self.policy is Overflow.BLOCK:
                raise asyncio.QueueFull(self.name)
            if self.policy is Overflow.LATEST:
                self._items.popleft()
                self.dropped += 1
            else:
                assert self._merge is not None
                self.merged += 1
                if len(self._items) >= 2:
                    first = self._items.popleft()
                    self._items.appendleft(self._merge(first, self._items.popleft()))
                else:
                    item = self._merge(self._items.popleft(), item)
        self._items.append(item)
        self._update()

    async def get(self) -> T:
        """The next item; raises ``ChannelClosed`` once closed and drained."""
        while not self._items:
            if self._closed:
                raise ChannelClosed(self.name)
            await self._readable.wait()
        item = self._items.popleft()
        self._update()
        return item

    async def get_batch(self, limit: int | None = None) -> list[T]:
        """Wait for at least one item, then take everything queued (up to ``limit``)."""
        first = await self.get()
        batch = [first]
        while self._items and (limit is None or len(batch) < limit):
            batch.append(self._items.popleft())
        self._update()
        return batch

    def close(self) -> None:
        """No more items: readers drain what is queued, then see ``ChannelClosed``."""
        self._closed = True
        self._update()

    def __aiter__(self) -> Channel[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.get()
        except ChannelClosed:
            raise StopAsyncIteration from None
