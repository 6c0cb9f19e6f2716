"""A client of our own ``/ws`` protocol: one session, audio paced at real time.

The one client ``speechpipe bench load``, ``speechpipe bench soak`` and the tests
(``tests/helpers.py``) use (websockets' client and server share one protocol core; here the
server's codec, ``transport.protocol``, writes what this client reads). It waits through
admission (``status`` events) for ``started`` or a refusal, streams int16 PCM in frames at
real time, ends with ``stop`` (or, for robustness benches, an abort or a bare close) and
records every event and speech chunk with its arrival time on the client's stream clock.

A refusal that names a retry (a fatal ``error`` before ``started`` carrying ``retry_after_s``:
``too_many_joins``, ``over_capacity``, ...) is followed when asked (``retries``; ``speechpipe
stream`` and ``listen`` do): the same ``start`` again after ``retry_delay`` -- the rule of
``docs/protocol.md`` ("Retrying a refusal") that the demo page follows too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import numpy as np
from numpy.typing import NDArray

__all__ = ["ClientRun", "stream_session", "ListenerRun", "listen_room", "retry_delay",
           "retry_start", "follow_retries", "RETRIES"]

RETRIES = 5  # refusals naming a retry that ``speechpipe stream``/``listen`` follow, at most
RETRY_SPREAD_S = 0.1  # the retry rule's random extra: up to this ...
RETRY_SPREAD_SHARE = 0.05  # ... plus this share of the wait

Run = TypeVar("Run")


def retry_delay(retry_after_s: float, rand: Callable[[], float] = random.random) -> float:
    """How long to wait before trying again after a refusal carrying ``retry_after_s``: never
    earlier than the server said (a turn booked for this client is due then), plus a small
    random extra, up to 0.1 s + 5 % of the wait, so clients refused at the same moment do
    not come back at the same moment (docs/protocol.md, "Retrying a refusal")."""
    wait = max(0.0, float(retry_after_s))
    return wait + rand() * (RETRY_SPREAD_S + RETRY_SPREAD_SHARE * wait)


def _retry_after(value: Any) -> float | None:
    """A refusal's ``retry_after_s`` when it is a usable number, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def retry_start(start: dict[str, Any], refused: Any) -> dict[str, Any]:
    """``start`` again, with the ``turn`` the refused run was given (when it was)."""
    turn = getattr(refused, "turn", None)
    return {**start, "turn": turn} if isinstance(turn, str) and turn else dict(start)


async def follow_retries(attempt: Callable[[Run | None], Awaitable[Run]],
                         retry_after: Callable[[Run], float | None], *, retries: int,
                         on_wait: Callable[[Run, float], None] | None = None,
                         stop: asyncio.Event | None = None) -> Run:
    """Run ``attempt`` (given the refused run before it, None the first time: its ``turn``
    goes into the next ``start``, ``retry_start``) until it is not refused with a retry
    (``retry_after`` of its result is None), at most ``retries`` times more, waiting
    ``retry_delay`` between (``on_wait`` is told the refused run and the wait: "waiting to
    join"). ``stop`` ends the waiting."""
    run = await attempt(None)
    for _ in range(max(0, retries)):
        after = retry_after(run)
        if after is None or (stop is not None and stop.is_set()):
            break
        delay = retry_delay(after)
        if on_wait is not None:
            on_wait(run, delay)
        if stop is None:
            await asyncio.sleep(delay)
        else:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await stop.wait()
            if stop.is_set():
                break
        run = await attempt(run)
    return run


@dataclass
class ClientRun:
    """Everything one client saw. ``events``: every JSON event after ``started`` with its
    arrival time (seconds since the client started streaming); ``audio``: each ``audio``
    header with its PCM (empty for speech that came over WebRTC)."""

    index: int = 0
    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    audio: list[tuple[float, dict[str, Any], NDArray[np.int16]]] = field(default_factory=list)
    statuses: list[dict[str, Any]] = field(default_factory=list)
    started: bool = False
    queued: bool = False
    refused: bool = False  # over capacity (``retry_after_s`` says when to try again)
    retry_after_s: float | None = None
    turn: str | None = None  # a ``too_many_joins`` refusal's turn, for the next ``start``
    close_code: int | None = None
    waited_s: float = 0.0  # from asking to ``started`` (admission)
    error: str = ""  # the fatal error code before ``started``, or what ended the client

    def refused_with_retry(self) -> float | None:
        """The ``retry_after_s`` of a refusal before ``started``, None otherwise."""
        return None if self.started or not self.error else _retry_after(self.retry_after_s)

    def of(self, kind: str) -> list[dict[str, Any]]:
        """The events of one type, in arrival order."""
        return [e for _, e in self.events if e.get("type") == kind]

    def text(self, side: str) -> str:
        """The final text of ``side`` (``source`` or ``target``), utterances joined."""
        final: dict[int, str] = {}
        for e in self.of(side):
            final[e["utterance"]] = " ".join(p for p in (e["committed"], e["tentative"]) if p)
        return " ".join(final[k] for k in sorted(final))

    def speech_span(self) -> tuple[float, float] | None:
        """(start of the first utterance, end of the last) by the server's VAD, on the
        stream clock (audio second ``t`` was sent at ``t``: the client sends at real time);
        None without a ``vad`` start."""
        starts = [e["t"] for e in self.of("vad") if e["kind"] == "start"]
        ends = [e["t"] for e in self.of("vad") if e["kind"] == "end"]
        if not starts:
            return None
        return min(starts), max(ends) if ends else max(starts)

    def offsets(self) -> tuple[float | None, float | None]:
        """(StartOffset, EndOffset) as the client experiences them: speech arrival on its
        stream clock, chunks laid back to back, against the server's VAD speech span."""
        span = self.speech_span()
        if span is None or not self.audio:
            return None, None
        laid_end = 0.0
        for arrived, header, _ in self.audio:
            laid_end = max(arrived, laid_end) + header["samples"] / header["sample_rate"]
        return self.audio[0][0] - span[0], laid_end - span[1]


async def stream_session(
    url: str,
    audio: NDArray[np.int16],
    *,
    start: dict[str, Any] | None = None,
    rate: int = 16_000,
    frame_ms: int = 20,
    tail_s: float = 3.0,
    send_s: float | None = None,
    end: Literal["stop", "abort", "close"] = "stop",
    junk: Sequence[str | bytes] = (),
    on_message: Callable[[str | bytes], None] | None = None,
    open_timeout_s: float = 30.0,
    drain_timeout_s: float | None = None,
    index: int = 0,
    begin: asyncio.Event | None = None,
    stop: asyncio.Event | None = None,
    live: AsyncIterable[NDArray[np.int16]] | None = None,
) -> ClientRun:
    """One session at ``url``: ``start`` (``sample_rate`` is ``rate``; ``start`` adds fields),
    then ``audio`` and ``tail_s`` of silence in ``frame_ms`` frames at real time (only the
    first ``send_s`` seconds of it when given), then ``end``: ``stop`` and wait for the
    server to close, or ``abort`` the TCP connection, or ``close`` without ``stop``. ``junk``
    is sent first (robustness benches); ``on_message`` sees every message received;
    ``begin``: the audio starts once it is set (e.g. once a room's listeners are in);
    ``stop``: once set, no more audio is sent and ``end`` follows at once (``speechpipe
    stream`` on Ctrl-C). ``live`` (a microphone) replaces ``audio``: its blocks (at ``rate``)
    are sent as they come, unpaced (a live source keeps real time itself), until it ends.
    A server that closes mid-stream ends the sending; the run holds its close code. Failing
    to connect raises; bound the whole call with ``asyncio.timeout``."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    run = ClientRun(index)
    step = rate * frame_ms // 1000
    padded = np.concatenate([audio, np.zeros(int(tail_s * rate), np.int16)]).astype("<i2")
    cut = len(padded) if send_s is None else min(len(padded), int(send_s * rate))
    asked = time.monotonic()
    async with connect(url, max_size=None, open_timeout=open_timeout_s) as ws:
        await ws.send(json.dumps({"type": "start", "sample_rate": rate, **(start or {})}))
        while True:  # admission: status events until started, or a refusal
            first = await ws.recv()
            if on_message is not None:
                on_message(first)
            message = json.loads(first)
            if message["type"] == "started":
                run.started = True
                break
            if message["type"] == "status":
                run.statuses.append(message)
                run.queued = run.queued or message.get("status") == "queued"
                continue
            if message["type"] == "error" and message.get("fatal"):
                run.refused = message.get("code") == "over_capacity"
                run.retry_after_s = message.get("retry_after_s")
                run.turn = message.get("turn") if isinstance(message.get("turn"), str) else None
                run.error = message.get("code", "")
                with contextlib.suppress(ConnectionClosed):
                    await ws.recv()
                run.close_code = ws.close_code
                return run
        run.waited_s = time.monotonic() - asked
        t0 = time.monotonic()

        async def send() -> None:
            nonlocal t0
            for item in junk:
                with contextlib.suppress(ConnectionClosed):
                    await ws.send(item)
            if begin is not None:
                await begin.wait()
                t0 = time.monotonic()
            try:
                if live is not None:
                    async for block in live:
                        if stop is not None and stop.is_set():
                            break
                        await ws.send(block.astype("<i2").tobytes())
                for i, offset in enumerate(range(0, cut if live is None else 0, step)):
                    if stop is not None and stop.is_set():
                        break
                    delay = t0 + i * frame_ms / 1000 - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    await ws.send(padded[offset : offset + step].tobytes())
                if end == "abort":
                    ws.transport.abort()
                elif end == "close":
                    await ws.close()
                else:
                    await ws.send(json.dumps({"type": "stop"}))
            except ConnectionClosed:  # the server ended the session: its close code says why
                pass

        async def receive() -> None:
            header: dict[str, Any] | None = None
            with contextlib.suppress(ConnectionClosed):
                async for message in ws:
                    now = time.monotonic() - t0
                    if on_message is not None:
                        on_message(message)
                    if isinstance(message, bytes):
                        if header is None:
                            raise ValueError("binary message without an audio header")
                        pcm = np.frombuffer(message, "<i2")
                        if len(pcm) != header["samples"]:
                            raise ValueError("audio header and PCM disagree in length")
                        run.audio.append((now, header, pcm))
                        header = None
                        continue
                    event = json.loads(message)
                    run.events.append((now, event))
                    if event["type"] == "status":
                        run.statuses.append(event)
                    elif event["type"] == "audio":
                        if event.get("via") == "webrtc":
                            run.audio.append((now, event, np.zeros(0, np.int16)))
                        else:
                            header = event

        receiver = asyncio.create_task(receive())
        try:
            await send()
            async with asyncio.timeout(drain_timeout_s):
                await receiver
        finally:
            receiver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await receiver
        run.close_code = ws.close_code
    return run


@dataclass
class ListenerRun:
    """Everything one room listener saw: ``events`` (arrival on the monotonic clock, the
    event), ``audio`` (arrival, header, the PCM bytes exactly as received). ``arrived`` and
    ``audio_arrived``, one per event and per chunk when the client records them
    (``speechpipe.bench.room_listeners``; empty from ``listen_room``): when its bytes reached
    the socket by the kernel's receive timestamp, CLOCK_REALTIME seconds (NaN: none given)."""

    started: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    audio: list[tuple[float, dict[str, Any], bytes]] = field(default_factory=list)
    close_code: int | None = None
    error: str = ""
    retry_after_s: float | None = None  # a refusal's, when it named one
    turn: str | None = None  # ... and the turn it booked, for the next ``start``
    arrived: list[float] = field(default_factory=list)
    audio_arrived: list[float] = field(default_factory=list)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for _, e in self.events if e.get("type") == kind]

    def committed(self, side: str) -> dict[tuple[str, int], str]:
        """The final committed text per (speaker, utterance) of ``side``."""
        return {(e.get("speaker", ""), e["utterance"]): e["committed"]
                for e in self.of(side) if e.get("final")}

    def refused_with_retry(self) -> float | None:
        """The ``retry_after_s`` of a refusal before ``started``, None otherwise."""
        return None if self.started or not self.error else _retry_after(self.retry_after_s)


async def listen_room(
    url: str,
    room: str,
    *,
    start: dict[str, Any] | None = None,
    stop: asyncio.Event | None = None,
    open_timeout_s: float = 30.0,
    on_started: Callable[[dict[str, Any]], None] | None = None,
    stall: bool = False,
    on_message: Callable[[str | bytes], None] | None = None,
) -> ListenerRun:
    """Listen to ``room`` at ``url`` (``start`` adds fields, e.g. ``target_lang``) until the
    server closes, or ``stop`` is set (then ``stop`` is sent and the close awaited). With
    ``stall`` it stops reading after ``started`` (a small socket buffer, one queued message)
    until ``stop`` is set, then reads what is left: a listener that does not read.
    ``on_message`` sees every message received (``started`` and a refusal included). Bound
    the call with ``asyncio.timeout``."""
    import socket
    from urllib.parse import urlsplit

    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    run = ListenerRun()
    options: dict[str, Any] = {}
    if stall:
        parts = urlsplit(url)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (parts.hostname, parts.port))
        options = {"sock": sock, "max_queue": 1}
    async with connect(url, max_size=None, open_timeout=open_timeout_s, **options) as ws:
        await ws.send(json.dumps({"type": "start", "role": "listener", "room": room,
                                  **(start or {})}))
        raw = await ws.recv()
        if on_message is not None:
            on_message(raw)
        first = json.loads(raw)
        if first.get("type") != "started":
            run.error = first.get("code", first.get("type", ""))
            run.retry_after_s = first.get("retry_after_s") if first.get("fatal") else None
            run.turn = first.get("turn") if isinstance(first.get("turn"), str) else None
            with contextlib.suppress(ConnectionClosed):
                await ws.recv()
            run.close_code = ws.close_code
            return run
        run.started = first
        if on_started is not None:
            on_started(first)

        async def stopper() -> None:
            if stop is not None:
                await stop.wait()
                with contextlib.suppress(ConnectionClosed):
                    await ws.send(json.dumps({"type": "stop"}))

        if stall and stop is not None:
            await stop.wait()
        task = asyncio.create_task(stopper())
        header: dict[str, Any] | None = None
        try:
            with contextlib.suppress(ConnectionClosed):
                async for message in ws:
                    now = time.monotonic()
                    if on_message is not None:
                        on_message(message)
                    if isinstance(message, bytes):
                        if header is None:
                            raise ValueError("binary message without an audio header")
                        run.audio.append((now, header, message))
                        header = None
                        continue
                    event = json.loads(message)
                    run.events.append((now, event))
                    if event["type"] == "audio":
                        header = event
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        run.close_code = ws.close_code
    return run
