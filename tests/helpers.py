"""Shared test helpers and fakes (one module; fixtures live in ``conftest.py``).

- the sample folders: ``OWN_SAMPLES`` (the project's ``samples/``) and ``shared_clip`` etc. for
  the real recordings in ``../shared/samples`` (tests skip where that folder is absent);
- a live-server client: ``stream_websocket`` (``transport.client``, the one protocol client);
- for the auth, quota, privacy and fault tests: a scripted session (``TickSession``), clients,
  and checks that a session left nothing behind (tasks, file descriptors)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from speechpipe.stages.channels import Channel
from speechpipe.stages.frames import AudioFrame, OutputEvent, TextHypothesis, UtteranceEnd
from speechpipe.stages.request import SessionRequest
from speechpipe.transport.client import ClientRun, stream_session

# --- sample folders ----------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
SHARED_SAMPLES = ROOT.parent / "shared" / "samples"
OWN_SAMPLES = ROOT / "samples"
SPANISH_CLIP = "es_enh_12411_cv"


def shared_clip(clip_id: str) -> Path:
    """A real human recording from ../shared/samples; skips where that folder is absent."""
    path = SHARED_SAMPLES / "wav" / f"{clip_id}.wav"
    if not path.is_file():
        pytest.skip(f"needs ../shared/samples (real recordings, not in the repo): {path}")
    return path


def shared_manifest_row(clip_id: str) -> dict:
    manifest = SHARED_SAMPLES / "manifest.jsonl"
    if not manifest.is_file():
        pytest.skip("needs ../shared/samples/manifest.jsonl")
    for line in manifest.read_text().splitlines():
        row = json.loads(line)
        if row["id"] == clip_id:
            return row
    pytest.skip(f"{clip_id} not in the shared manifest")


def manifest_clip(clip_id: str) -> tuple[Path, dict[str, Any]]:
    """A clip of ``../shared/samples`` by id, or skip the test saying why."""
    manifest = SHARED_SAMPLES / "manifest.jsonl"
    if not manifest.is_file():
        pytest.skip(f"real recordings not found at {SHARED_SAMPLES} (../shared is absent)")
    for line in manifest.read_text().splitlines():
        if line.strip():
            entry = json.loads(line)
            if entry.get("id") == clip_id:
                return SHARED_SAMPLES / entry["file"], entry
    pytest.skip(f"clip {clip_id} not in {manifest}")



# --- a live-server client ----------------------------------------------------------------


LiveRun = ClientRun  # what a client saw (``speechpipe.transport.client``)


async def stream_websocket(
    url: str,
    audio: np.ndarray,
    *,
    rate: int = 16_000,
    frame_ms: int = 20,
    tail_s: float = 3.0,
    start: dict[str, Any] | None = None,
    abort_after_s: float | None = None,
) -> ClientRun:
    """Stream int16 ``audio`` at real-time pace, then ``tail_s`` of silence and ``stop``;
    collect everything until the server closes (or vanish after ``abort_after_s``). The one
    protocol client, ``transport.client.stream_session``; the session must start."""
    total_s = (len(audio) + int(tail_s * rate)) / rate
    abort = abort_after_s is not None and abort_after_s < total_s
    run = await stream_session(url, audio, start=start, rate=rate, frame_ms=frame_ms,
                               tail_s=tail_s, send_s=abort_after_s if abort else None,
                               end="abort" if abort else "stop")
    assert run.started, f"the session did not start: {run.error} (close {run.close_code})"
    return run


# --- a scripted session and guard checks ------------------------------------------------

SECRET = "test-secret-" + "x" * 40
FAKE_SOURCE = "zumbido cangrejo"  # distinctive words: a privacy check can search the logs
FAKE_TARGET = "buzzing crabapple"


class TickSession:
    """A ``LiveSession`` without models: each second of audio pushed yields one source and
    one target caption with known text; ``finish`` ends the events (unless ``hang``, which
    stands in for a pipeline that cannot finish). A background task stands in for stages."""

    def __init__(self, request: SessionRequest, *, hang: bool = False) -> None:
        self.request = request
        self.hang = hang
        self.next_pts = 0
        self.frames = 0
        self.exited = False
        self.channel: Channel[OutputEvent] = Channel(256, name="tick-events")
        self.tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> TickSession:
        self.tasks.append(asyncio.create_task(asyncio.sleep(3600), name="tick-stage"))
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.exited = True

    async def push(self, frame: AudioFrame) -> None:
        assert frame.pts == self.next_pts
        self.next_pts = frame.end
        self.frames += 1
        if self.frames % 50 == 0:
            pts = frame.end
            for side, text in (("source", FAKE_SOURCE), ("target", FAKE_TARGET)):
                await self.channel.put(TextHypothesis(
                    side, 0, self.frames, text, "", "es", pts - 16000, pts, pts,  # type: ignore[arg-type]
                ))

    def flush(self) -> None:
        pass

    async def finish(self) -> None:
        if self.hang:
            return
        await self.channel.put(UtteranceEnd(0, self.next_pts, FAKE_SOURCE, FAKE_TARGET))
        self.channel.close()

    async def events(self) -> AsyncIterator[OutputEvent]:
        async for event in self.channel:
            yield event


class TickFactory:
    def __init__(self, *, hang: bool = False) -> None:
        self.hang = hang
        self.sessions: list[TickSession] = []

    def __call__(self, request: SessionRequest) -> TickSession:
        session = TickSession(request, hang=self.hang)
        self.sessions.append(session)
        return session


def pcm(seconds: float, rate: int = 16000) -> bytes:
    n = int(seconds * rate)
    return (np.sin(np.arange(n) / 7) * 3000).astype("<i2").tobytes()


async def recv_json(ws: ClientConnection, within: float = 5.0) -> dict[str, Any]:
    message = await asyncio.wait_for(ws.recv(), within)
    assert isinstance(message, str), "expected a JSON event"
    return json.loads(message)  # type: ignore[no-any-return]


async def read_until_closed(ws: ClientConnection, within: float = 10.0) -> list[Any]:
    """Everything the server sends until it closes (decoded JSON for text messages)."""
    seen: list[Any] = []
    async with asyncio.timeout(within):
        try:
            while True:
                message = await ws.recv()
                seen.append(json.loads(message) if isinstance(message, str) else message)
        except ConnectionClosed:
            pass
    return seen


def errors(seen: list[Any]) -> list[dict[str, Any]]:
    return [m for m in seen if isinstance(m, dict) and m.get("type") == "error"]


def server_log(records: list[logging.LogRecord]) -> str:
    """Everything the process logged except the test's own websockets *client*, whose DEBUG
    frame dumps show what the client sent and received (the server's rules do not cover it)."""
    lines = []
    for record in records:
        if record.name.startswith("websockets.client"):
            continue
        lines.append(f"{record.name} {record.levelname} {record.getMessage()}")
        if record.exc_info and record.exc_info[1] is not None:
            lines.append(repr(record.exc_info[1]))
    return "\n".join(lines)


def open_fds() -> set[tuple[str, str]]:
    """This process's file descriptors as (number, what it points to): a leaked socket that
    reuses a number closed meanwhile still shows up as new."""
    out: set[tuple[str, str]] = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add((fd, os.readlink(f"/proc/self/fd/{fd}")))
        except OSError:  # closed between listdir and readlink (or the listdir fd itself)
            pass
    return out


async def wait_for(predicate: Callable[[], bool], within: float = 5.0, what: str = "") -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, f"not reached within {within} s: {what}"
        await asyncio.sleep(0.02)


async def assert_released(
    tasks_before: set[asyncio.Task[Any]], fds_before: set[tuple[str, str]], within: float = 2.0
) -> None:
    """Every task and file descriptor that appeared since the baseline is gone in time."""
    current = asyncio.current_task()

    def new_tasks() -> list[str]:
        return sorted(t.get_name() for t in asyncio.all_tasks() - tasks_before - {current})

    def new_fds() -> list[tuple[str, str]]:
        return sorted(open_fds() - fds_before)

    deadline = time.monotonic() + within
    while new_tasks() or new_fds():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"left behind after {within} s: tasks {new_tasks()}, fds {new_fds()}"
            )
        await asyncio.sleep(0.02)


# --------------------------------------------------------------------------- raw clients
# Attacks a real websockets client would not make (ping floods that never read the pongs,
# malformed or duplicate headers) need a plain socket.


def rss_bytes(pid: int | str = "self") -> int:
    """Resident set size of a process (this one by default), from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc status")


def raw_upgrade(port: int, *, path: str = "/ws", extra: str = "") -> socket.socket:
    """A TCP connection that has completed the WebSocket handshake (the 101 is read, nothing
    after it)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        f"{extra}\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        byte = sock.recv(1)  # byte by byte: nothing past the handshake is read
        assert byte, f"closed during the handshake: {head!r}"
        head += byte
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def masked_frame(opcode: int, payload: bytes) -> bytes:
    """One client frame (FIN set, masked, payload under 126 bytes)."""
    assert len(payload) < 126
    mask = os.urandom(4)
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + body


def ping_flood(port: int, total_bytes: int, seconds: float) -> tuple[int, float]:
    """Connect, then write 125-byte pings without ever reading the pongs: until
    ``total_bytes`` are written, ``seconds`` pass, or the server drops the connection.
    Blocking (run it in a thread). Returns (bytes written, seconds until the server dropped
    the connection, or the whole duration if it did not)."""
    sock = raw_upgrade(port)
    chunk = masked_frame(0x9, b"p" * 125) * 512  # 67 KB per write
    sock.settimeout(0.5)
    sent, t0 = 0, time.monotonic()
    try:
        while sent < total_bytes and time.monotonic() - t0 < seconds:
            try:
                sock.sendall(chunk)
                sent += len(chunk)
            except TimeoutError:  # the server stopped reading: keep trying until it drops us
                continue
            except OSError:  # reset or broken pipe: the server dropped the connection
                break
    finally:
        elapsed = time.monotonic() - t0
        sock.close()
    return sent, elapsed


def raw_http(port: int, request: bytes, within: float = 5.0) -> tuple[int, bytes]:
    """Send raw request bytes; return the status code and the response (for a 101, its
    head only: the connection is then closed without a word)."""
    with socket.create_connection(("127.0.0.1", port), timeout=within) as sock:
        sock.sendall(request)
        data = b""
        while True:
            try:
                part = sock.recv(65536)
            except ConnectionResetError:
                break
            if not part:
                break
            data += part
            if data.startswith(b"HTTP/1.1 101") and b"\r\n\r\n" in data:
                break
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0
    return status, data


def http_request(path: str, headers: list[tuple[str, str]]) -> bytes:
    """A GET with exactly these headers (repeats and malformed values included); for
    ``/ws`` the WebSocket upgrade headers are added."""
    lines = [f"GET {path} HTTP/1.1", *(f"{k}: {v}" for k, v in headers)]
    if path.startswith("/ws"):
        key = base64.b64encode(os.urandom(16)).decode()
        lines += ["Upgrade: websocket", "Connection: Upgrade", f"Sec-WebSocket-Key: {key}",
                  "Sec-WebSocket-Version: 13"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def says_gato_in_english(text: str) -> bool:
    """Whether ``text`` carries es_gato.wav's translation ("The cat sleeps in the house because
    it is very cold."). Whisper base's first words of it vary with the CPU's arithmetic (an
    Intel Xeon with MKL: "And I'm going to sleep in the house because it's very cold."; an AMD
    EPYC with oneDNN: "The cat is sleeping in the house ..."), so this asks for the words
    every CPU measured gives, in English: the Spanish transcript has neither."""
    lowered = text.lower()
    return "house" in lowered and "cold" in lowered
