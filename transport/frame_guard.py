"""Frame-level limits under the WebSocket library: every client frame costs, and a client that
does not read is dropped.

websockets answers a client's ping with a pong from its ``data_received`` callback, with no
flow control (``write_limit`` only makes *our* ``send`` wait): a client that sends pings and
never reads grows the transport's write buffer by one pong per ping, and the application
never sees those frames. ``GuardedConnection`` therefore checks two things where the frames
arrive, before the application is involved:

- **every frame counts** against the connection's message rate (``Quotas.messages_per_s`` /
  ``message_burst``; data, ping, pong, close and continuation frames alike, before ``start``
  too; of those, ping, pong and close frames have a budget of their own, ``control_per_s``
  / ``control_burst``, as a client needs only a few). Past it the connection is failed
  with ``rate_limited`` (an ``error`` event, close
  4008) and nothing more is read from it; its TCP connection closes once the client has
  read that, or ``linger_s`` (the close timeout) later if it does not read;
- **the write buffer is bounded** (``max_unread_bytes``): when what the client has not read
  exceeds it, the client cannot read a close frame either, so the TCP connection is
  aborted at once (``not_reading``, seen by the client as 1006).

The keepalive is websockets' own, except for what a missing pong means: the client stopped
reading (``not_reading``, close 4011), not an internal error (the library's 1011).

``violation`` tells the server's handler why the connection ended, so it can count the real
reason instead of a client leaving.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CTRL_OPCODES, Frame
from websockets.protocol import OPEN

from speechpipe.transport.codes import CloseCode, ErrorCode
from speechpipe.transport.limits import DEFAULT_MAX_UNREAD_BYTES
from speechpipe.transport.protocol import dumps, encode_error
from speechpipe.transport.quotas import TokenBucket

__all__ = ["FrameLimits", "Violation", "GuardedConnection", "guarded_connection_class"]

"""Unread server output that drops a client: far above ``write_limit`` (32 KiB, after which
our own sends wait) plus the largest audio message (seconds of 48 kHz PCM, under 1 MiB)."""


_SLICE_BYTES = 4096  # at most ~30 small frames parsed before the rate is checked again


@dataclass(frozen=True, slots=True)
class FrameLimits:
    """Per-connection WebSocket frame rate limits and the unread-output bound."""
    frames_per_s: float = 200.0
    frame_burst: int = 500
    control_per_s: float = 10.0  # of those, pings, pongs and closes: a client needs a few a
    control_burst: int = 20  # minute, and each one costs a parse and an answer
    max_unread_bytes: int = DEFAULT_MAX_UNREAD_BYTES
    linger_s: float = 10.0  # after failing a connection: time for the client to close first


@dataclass(frozen=True, slots=True)
class Violation:
    """Why the connection layer ended a connection: the close code the server sent (or, for
    ``not_reading``, 1006: nothing could be sent) and the error code it counts as."""

    code: str
    close_code: int


RATE_LIMITED = Violation(ErrorCode.RATE_LIMITED, CloseCode.RATE_LIMITED)
NOT_READING = Violation(ErrorCode.NOT_READING, CloseCode.ABNORMAL)


class GuardedConnection(ServerConnection):
    """A ``ServerConnection`` enforcing ``limits`` (set by ``guarded_connection_class``)."""

    limits: FrameLimits = FrameLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bucket = TokenBucket(self.limits.frames_per_s, self.limits.frame_burst)
        self.control_bucket = TokenBucket(self.limits.control_per_s, self.limits.control_burst)
        self.frames_in = 0
        self.violation: Violation | None = None
        self._linger: asyncio.TimerHandle | None = None

    def data_received(self, data: bytes) -> None:
        """Parse input in slices; drop a client whose unread output exceeds the limit."""
        # In slices: the library parses (and answers) every frame of what it is given before
        # any frame is counted here, and one read can hold 2,000 pings.
        for start in range(0, len(data), _SLICE_BYTES):
            if self.violation is not None:
                return  # a failed connection's input is discarded unread
            super().data_received(data[start : start + _SLICE_BYTES])
            if self.violation is None and (
                self.transport.get_write_buffer_size() > self.limits.max_unread_bytes
            ):
                self.violation = NOT_READING
                self.transport.abort()

    def process_event(self, event: Any) -> None:
        """Count each frame against the rate limits; fail the connection when one is exceeded."""
        if isinstance(event, Frame):
            if self.violation is not None:
                return
            self.frames_in += 1
            now = time.monotonic()
            if not self.bucket.take(now):
                self._fail(RATE_LIMITED, (
                    f"more than {self.limits.frames_per_s:g} frames per second "
                    f"(burst {self.limits.frame_burst})"
                ))
                return
            if event.opcode in CTRL_OPCODES and not self.control_bucket.take(now):
                self._fail(RATE_LIMITED, (
                    f"more than {self.limits.control_per_s:g} ping/pong/close frames per "
                    f"second (burst {self.limits.control_burst})"
                ))
                return
        super().process_event(event)

    def _fail(self, violation: Violation, message: str) -> None:
        """Send the fatal error and the close frame, then close the TCP connection without
        reading more (RFC 6455 7.1.7: a server failing a connection need not wait for the
        client's close frame): at once when the client has read what we sent, or
        ``linger_s`` later when it does not read."""
        self.violation = violation
        if self.protocol.state is OPEN:
            error = encode_error(violation.code, message, fatal=True)
            self.protocol.send_text(dumps(error).encode())
            self.protocol.fail(violation.close_code, violation.code)
            self.send_data()
        self.transport.close()  # stops reading; closes once the write buffer is flushed
        self._linger = self.loop.call_later(self.limits.linger_s, self.transport.abort)

    async def keepalive(self) -> None:
        """Ping every ``ping_interval``; fail a client whose pong has not come within
        ``ping_timeout`` (sending the ping included: it waits while our write buffer is
        full) with ``not_reading``, close 4011."""
        assert self.ping_interval is not None
        latency = 0.0
        try:
            while True:
                await asyncio.sleep(self.ping_interval - latency)
                try:
                    async with asyncio.timeout(self.ping_timeout):
                        pong = await self.ping()
                        latency = await pong
                except TimeoutError:
                    async with self.send_context():
                        self.protocol.fail(CloseCode.NOT_READING, ErrorCode.NOT_READING)
                    return  # send_context waited for connection_lost, which cancels this task
        except ConnectionClosed:
            pass

    def connection_lost(self, exc: Exception | None) -> None:
        """Cancel the pending forced close, then let the library clean up."""
        if self._linger is not None:
            self._linger.cancel()
        super().connection_lost(exc)


def guarded_connection_class(limits: FrameLimits) -> type[GuardedConnection]:
    """A ``GuardedConnection`` subclass bound to ``limits`` (websockets' ``create_connection``
    takes a class)."""
    return type("ConfiguredGuardedConnection", (GuardedConnection,), {"limits": limits})
