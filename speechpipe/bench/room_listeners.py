"""Many room listeners in one thread on raw sockets: ``bench room``'s client processes.

Each listener is a non-blocking TCP socket speaking WebSocket through websockets' sans-I/O
``ClientProtocol`` (no framing here; it answers pings itself), all in one ``selectors`` loop,
following ``transport.client.listen_room``'s protocol. Each message keeps two times: when this
process read it (``time.monotonic()``, as ``listen_room`` records) and when its bytes reached
the socket (the kernel's ``SO_TIMESTAMPNS``, CLOCK_REALTIME). On a machine shared with the
server the read time adds the wait for a core; the kernel time is what a listener on its own
machine would see. The kernel stamps a read with the last (possibly coalesced) segment it
reads from, so a frame read together with later bytes gets their time: later, never earlier.
"""

from __future__ import annotations

import errno
import json
import math
import os
import selectors
import socket
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.protocol import CLOSED, OPEN
from websockets.uri import parse_uri

from speechpipe.transport.client import ListenerRun

__all__ = ["run_listeners", "kernel_time", "assembled", "record", "SO_TIMESTAMPNS"]

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; SCM_TIMESTAMPNS is the same
TIMESPEC = struct.Struct("@ll")  # struct timespec: seconds, nanoseconds (native longs)
CMSG_BYTES = socket.CMSG_SPACE(TIMESPEC.size)
RECV_BYTES = 65_536
TICK_S = 0.05  # how often the loop looks at ``stop`` and its deadlines


def kernel_time(ancdata: Sequence[tuple[int, int, bytes]]) -> float:
    """The receive time the kernel attached to one ``recvmsg`` (``SCM_TIMESTAMPNS``), in
    CLOCK_REALTIME seconds; NaN when the read carried none (never a time of our own)."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= TIMESPEC.size:
            seconds, nanoseconds = TIMESPEC.unpack_from(data)
            return float(seconds) + nanoseconds / 1e9
    return math.nan


def assembled(parts: list[Frame], frame: Frame) -> str | bytes | None:
    """The message ``frame`` completes after ``parts`` (the earlier fragments, cleared once it
    is whole): text as ``str``, binary as ``bytes``; None for a control frame or a fragment."""
    if frame.opcode not in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
        return None  # pings, pongs and the close: the protocol answers them itself
    parts.append(frame)
    if not frame.fin:
        return None
    data = b"".join(bytes(part.data) for part in parts)
    text = parts[0].opcode is Opcode.TEXT
    parts.clear()
    return data.decode() if text else data


def record(run: ListenerRun, header: dict[str, Any] | None, message: str | bytes,
           read_at: float, arrived: float) -> dict[str, Any] | None:
    """Keep one message after ``started`` as ``listen_room`` does, with its kernel receive
    time beside it; returns the ``audio`` header the next binary message belongs to.
    ``ValueError`` for PCM without a header or a text message that is not JSON."""
    if isinstance(message, bytes):
        if header is None:
            raise ValueError("binary message without an audio header")
        run.audio.append((read_at, header, message))
        run.audio_arrived.append(arrived)
        return None
    event = json.loads(message)
    run.events.append((read_at, event))
    run.arrived.append(arrived)
    return event if event.get("type") == "audio" else header


@dataclass
class _Listener:
    """One listener's socket, protocol state and what it saw so far."""

    sock: socket.socket
    protocol: ClientProtocol
    run: ListenerRun = field(default_factory=ListenerRun)
    connected: bool = False
    reported: bool = False  # ``on_joined`` has had its run
    done: bool = False
    outgoing: bytearray = field(default_factory=bytearray)
    mask: int = selectors.EVENT_WRITE  # what the selector watches (connecting: writable)
    header: dict[str, Any] | None = None  # the ``audio`` event whose PCM comes next
    parts: list[Frame] = field(default_factory=list)  # fragments of a message


class _Shell:
    """The I/O around the protocols: one selector, every listener's socket, the join reports."""

    def __init__(self, start: str, on_joined: Callable[[ListenerRun], None]) -> None:
        self.selector = selectors.DefaultSelector()
        self.start = start.encode()
        self.on_joined = on_joined
        self.live = 0

    def open(self, protocol: ClientProtocol, family: int, address: Any) -> _Listener:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.setblocking(False)
        listener = _Listener(sock, protocol)
        self.live += 1
        self.selector.register(sock, listener.mask, listener)
        failed = sock.connect_ex(address)
        if failed not in (0, errno.EINPROGRESS):
            self.fail(listener, f"connect: {os.strerror(failed)}")
        return listener

    def service(self, listener: _Listener, mask: int) -> None:
        if not listener.connected:  # only writable is watched until the connect completes
            failed = listener.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if failed:
                self.fail(listener, f"connect: {os.strerror(failed)}")
                return
            listener.connected = True
            listener.protocol.send_request(listener.protocol.connect())
            self.flush(listener)
            return
        if mask & selectors.EVENT_WRITE:
            self.write(listener)
        if mask & selectors.EVENT_READ and not listener.done:
            self.read(listener)

    def read(self, listener: _Listener) -> None:
        """One ``recvmsg``: its bytes to the protocol, each message it completes kept with
        this read's time and the kernel's, the protocol's answers (pongs, the close) sent."""
        try:
            data, ancdata, _, _ = listener.sock.recvmsg(RECV_BYTES, CMSG_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            listener.run.error = listener.run.error or f"read: {exc}"
            data, ancdata = b"", []
        read_at = time.monotonic()
        protocol = listener.protocol
        if data:
            protocol.receive_data(data)
        else:
            protocol.receive_eof()
        arrived = kernel_time(ancdata)
        for event in protocol.events_received():
            self.handle(listener, event, read_at, arrived)
            if listener.done:
                return
        self.flush(listener)
        if protocol.handshake_exc is not None:
            self.fail(listener, f"handshake: {protocol.handshake_exc}")
        elif not data:
            self.finish(listener)

    def handle(self, listener: _Listener, event: object, read_at: float,
               arrived: float) -> None:
        if isinstance(event, Response):
            if listener.protocol.handshake_exc is None:
                listener.protocol.send_text(self.start)
            return
        message = assembled(listener.parts, event) if isinstance(event, Frame) else None
        if message is None:
            return
        run = listener.run
        if not listener.reported:  # the answer to ``start``: ``started`` or a refusal
            first = json.loads(message)
            if first.get("type") == "started":
                run.started = first
            else:
                run.error = first.get("code", first.get("type", ""))
            self.report(listener)
        elif run.started:  # a refused listener only waits for the close
            try:
                listener.header = record(run, listener.header, message, read_at, arrived)
            except ValueError as exc:
                self.fail(listener, str(exc))

    def stop(self, listener: _Listener) -> None:
        """Ask the server to end this listener (``stop``) or drop one not in yet."""
        if listener.done:
            return
        if listener.run.started and listener.protocol.state is OPEN:
            listener.protocol.send_text(json.dumps({"type": "stop"}).encode())
            self.flush(listener)
        elif not listener.reported:
            self.fail(listener, "stopped before it joined")

    def flush(self, listener: _Listener) -> None:
        for data in listener.protocol.data_to_send():
            # b"" (half-close) comes only after the server's EOF or a failed handshake, and
            # the listener is finished (its socket closed) right after either
            listener.outgoing += data
        self.write(listener)

    def write(self, listener: _Listener) -> None:
        if listener.done:
            return
        if listener.outgoing:
            try:
                sent = listener.sock.send(listener.outgoing)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self.fail(listener, f"write: {exc}")
                return
            del listener.outgoing[:sent]
        mask = selectors.EVENT_READ | (selectors.EVENT_WRITE if listener.outgoing else 0)
        if mask != listener.mask:
            self.selector.modify(listener.sock, mask, listener)
            listener.mask = mask

    def report(self, listener: _Listener) -> None:
        if not listener.reported:
            listener.reported = True
            self.on_joined(listener.run)

    def fail(self, listener: _Listener, error: str) -> None:
        listener.run.error = listener.run.error or error
        self.finish(listener)

    def finish(self, listener: _Listener) -> None:
        if listener.done:
            return
        listener.done = True
        self.live -= 1
        self.selector.unregister(listener.sock)
        listener.sock.close()
        listener.run.close_code = (listener.protocol.close_code
                                   if listener.protocol.state is CLOSED else None)
        if not listener.reported:
            listener.run.error = listener.run.error or "closed before it joined"
        self.report(listener)


def run_listeners(url: str, room: str, count: int, *, stop: Callable[[], bool],
                  on_joined: Callable[[ListenerRun], None] = lambda _: None,
                  limit_s: float = 600.0, open_timeout_s: float = 120.0,
                  close_timeout_s: float = 10.0) -> list[ListenerRun]:
    """``count`` listeners of ``room`` at ``url`` (``ws://`` only) in this thread, as
    ``listen_room`` listens. ``on_joined`` gets each listener's run once it is in (``started``)
    or is not (refused, failed, not in after ``open_timeout_s``, or stopped first). Once
    ``stop()`` is true or ``limit_s`` has passed, each sends ``stop``; the server's close is
    awaited at most ``close_timeout_s``. Returns the runs (kernel receive times included)."""
    uri = parse_uri(url)
    if uri.secure:
        raise ValueError(f"the lean listeners speak ws:// only (got {url})")
    family, _, _, _, address = socket.getaddrinfo(uri.host, uri.port,
                                                  type=socket.SOCK_STREAM)[0]
    shell = _Shell(json.dumps({"type": "start", "role": "listener", "room": room}), on_joined)
    listeners = [shell.open(ClientProtocol(uri, max_size=None), family, address)
                 for _ in range(count)]
    t0 = time.monotonic()
    closing_by, next_tick = math.inf, 0.0
    try:
        while shell.live:
            now = time.monotonic()
            if now >= next_tick:  # the stop, the deadlines: every TICK_S, not every read
                next_tick = now + TICK_S
                if now >= closing_by:
                    break
                if closing_by == math.inf and (stop() or now - t0 >= limit_s):
                    closing_by = now + close_timeout_s
                    for listener in listeners:
                        shell.stop(listener)
                if now - t0 >= open_timeout_s:
                    for listener in listeners:
                        if not listener.reported:
                            shell.fail(listener, f"not in after {open_timeout_s:g} s")
            for key, mask in shell.selector.select(TICK_S):
                if not key.data.done:
                    shell.service(key.data, mask)
    finally:
        for listener in listeners:
            if not listener.done:
                shell.fail(listener, f"no close from the server within {close_timeout_s:g} s")
        shell.selector.close()
    return [listener.run for listener in listeners]
