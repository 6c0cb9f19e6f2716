"""Shared test helpers (fakes: ``tests/fakes.py``; fixtures: ``conftest.py``). Test modules
share code only through these modules, never by importing one another
(tests/unit/house/test_test_layout.py checks it).

- the sample folders: ``OWN_SAMPLES`` (the project's ``samples/``) and ``shared_clip`` etc. for
  the real recordings in ``../shared/samples`` (tests skip where that folder is absent);
- a live-server client: ``stream_websocket`` (``transport.client``, the one protocol client);
- raw clients and checks that a session left nothing behind (tasks, file descriptors);
- the protocol tests' client steps, real clips for the engine tests, docs/protocol.md's
  tables, the CLI in a subprocess, browser pages, a Ray cluster scenario."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from speechpipe.stages.frames import STREAM_RATE
from speechpipe.transport.client import ClientRun, stream_session

if TYPE_CHECKING:
    from speechpipe.models.whisper.engine import WhisperRequest, WhisperResult

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


# --- the fakes' caption text, the test token secret, guard checks -------------------------

SECRET = "test-secret-" + "x" * 40
FAKE_SOURCE = "zumbido cangrejo"  # distinctive words: a privacy check can search the logs
FAKE_TARGET = "buzzing crabapple"


def tiny_buffer_socket(port: int) -> socket.socket:
    """A connected, non-blocking socket to 127.0.0.1:``port`` with a 4 KB receive buffer
    (set before connecting: a small window), for a WebSocket client that stops reading."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    return sock


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


async def events_until_spoken(events: Any, text: str, within: float = 5.0) -> list[Any]:
    """Read ``events`` (a stage's output ``Channel``) until a ``SpeechChunk`` of ``text``
    arrives, at most ``within`` s (else the test fails); every event read, in order. For a
    wall-clock stage test that waits on what the stage did, not on a fixed sleep."""
    from speechpipe.stages.frames import SpeechChunk

    seen: list[Any] = []
    deadline = time.monotonic() + within
    while not (seen and isinstance(seen[-1], SpeechChunk) and seen[-1].text == text):
        left = deadline - time.monotonic()
        assert left > 0, f"no speech {text!r} within {within} s: {seen}"
        seen.append(await asyncio.wait_for(events.get(), left))
    return seen


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


async def healthz_ms(port: int) -> float:
    """One ``GET /healthz`` on a fresh connection to 127.0.0.1:``port``, in milliseconds."""
    t0 = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    await writer.drain()
    await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return (time.perf_counter() - t0) * 1000


async def sample_during(
    task: asyncio.Future[Any], port: int, at_least_s: float = 1.0
) -> tuple[int, list[float]]:
    """Peak RSS of this process and /healthz latencies while ``task`` runs (and for at least
    ``at_least_s``)."""
    peak, latencies = rss_bytes(), []
    t0 = time.monotonic()
    while not task.done() or time.monotonic() - t0 < at_least_s:
        peak = max(peak, rss_bytes())
        latencies.append(await healthz_ms(port))
        await asyncio.sleep(0.05)
    return peak, latencies


async def read_events(ws: ClientConnection, sink: list[dict[str, Any]]) -> None:
    """Append each JSON event ``ws`` receives to ``sink`` until it closes."""
    try:
        async for message in ws:
            if isinstance(message, str):
                sink.append(json.loads(message))
    except ConnectionClosed:
        pass


async def wait_for_event(sink: list[dict[str, Any]], kind: str, within: float = 10.0) -> dict:
    """The first event of type ``kind`` in ``sink`` (filled by ``read_events``)."""
    async with asyncio.timeout(within):
        while True:
            for event in sink:
                if event["type"] == kind:
                    return event
            await asyncio.sleep(0.02)


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


# --- the protocol tests' client steps (against ``tests.fakes.FakeFactory`` servers) ------

OUT_RATE = 22050


async def start(ws: ClientConnection, **fields: Any) -> dict[str, Any]:
    await ws.send(json.dumps({"type": "start", "source_lang": "es", "sample_rate": 16000,
                              "output_sample_rate": OUT_RATE, **fields}))
    started = await recv_json(ws)
    assert started["type"] == "started", started
    return started


async def expect_close(ws: ClientConnection, within: float = 5.0) -> list[Any]:
    """Read until the server closes; return what arrived."""
    seen: list[Any] = []
    async with asyncio.timeout(within):
        try:
            while True:
                seen.append(await ws.recv())
        except ConnectionClosed:
            pass
    return seen


# --- real clips for the engine tests (models loaded by the ``slow`` tests only) ----------

CLIPS = ("es_enh_11375_cv", "es_enh_12411_cv", "es_enh_2692_cv", "es_enh_9756_cv",
         "es_enh_12478_cv", "es_enh_4109_cv")


def load_16k(clip_id: str) -> np.ndarray:
    import soundfile as sf
    import soxr

    audio, rate = sf.read(shared_clip(clip_id), dtype="float32")
    if audio.ndim > 1:
        audio = audio.mean(axis=1)
    if rate != STREAM_RATE:
        audio = soxr.resample(audio, rate, STREAM_RATE)
    return np.ascontiguousarray(audio, dtype=np.float32)


# committed text of an earlier window, as <|startofprev|> context (bounded windows)
CONTEXTS = (("", ""), ("", ""), ("", ""),
            ("La ley reconoce a los autores varios derechos sobre sus obras.",
             "The law gives authors several rights over their works."),
            ("", ""),
            ("El parlamento europeo aprobó ayer la propuesta de la comisión sobre los "
             "derechos de los consumidores en toda la unión y dijo que la",
             "The European Parliament yesterday approved the Commission's proposal on "
             "consumer rights throughout the Union and said that the"))


def real_requests() -> list[WhisperRequest]:
    """Six real clips cut to 2.2-5.5 s: four share an encode bucket, two are alone; prefixes
    of different lengths, contexts of different lengths (none, 8 and 16+ tokens), one
    language left to detection, one beam-2, partial and final, window-capped partials."""
    from speechpipe.models.whisper.engine import DecodeTask, WhisperRequest

    cuts = (3.1, 3.4, 3.9, 3.2, 5.5, 2.2)
    prefixes = ("", "Autobuses", "", "En", "", "la")
    requests = []
    for i, (clip, cut, prefix) in enumerate(zip(CLIPS, cuts, prefixes, strict=True)):
        audio = load_16k(clip)[: int(cut * STREAM_RATE)]
        source_context, target_context = CONTEXTS[i]
        requests.append(WhisperRequest(
            audio=audio,
            language=None if i == 2 else "es",
            tasks=(DecodeTask("transcribe", prefix, source_context),
                   DecodeTask("translate", "The" if i % 2 else "", target_context)),
            cap_by_window=bool(i % 2),
            beam_size=2 if i == 5 else 1,
            max_new_tokens=16 if i % 2 else None,
            partial=bool(i % 2),
        ))
    return requests


def same(a: WhisperResult, b: WhisperResult) -> bool:
    def key(r: WhisperResult):  # everything but timings
        return (r.language, [(d.task, d.continuation, d.glued, d.avg_logprob, d.no_speech_prob,
                              d.suppressed, d.cut, d.truncated) for d in r.decodes])
    return key(a) == key(b)


# --- docs/protocol.md's tables -----------------------------------------------------------

PROTOCOL_DOC = ROOT / "docs" / "protocol.md"


def table(section: str, text: str | None = None) -> list[list[str]]:
    """The rows (cells stripped) of the first table under ``## section``."""
    text = PROTOCOL_DOC.read_text(encoding="utf-8") if text is None else text
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def close_rows(text: str | None = None) -> dict[int, str]:
    return {int(code): meaning for code, meaning in table("Close codes", text)}


def error_rows(text: str | None = None) -> list[tuple[set[str], str, str]]:
    return [(set(re.findall(r"`([a-z_]+)`", codes)), fatal, close)
            for codes, fatal, close, _ in table("Error codes", text)]


# --- the CLI in a subprocess -------------------------------------------------------------

def speechpipe(*args: str, tmp_path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "speechpipe", *args],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )


def assert_one_line_error(result, *needles: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


EVAL_GOOD_ROW = {"file": "es_gato.wav", "lang": "es", "transcript": "El gato duerme en la casa.",
                 "translation_en": "The cat sleeps in the house."}


def eval_manifest(tmp_path: Path, *lines: bytes | dict[str, object]) -> Path:
    shutil.copy(OWN_SAMPLES / "wav" / "es_gato.wav", tmp_path / "es_gato.wav")
    path = tmp_path / "manifest.jsonl"
    path.write_bytes(b"".join(
        (line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n"
        for line in lines))
    return path


# --- the page in headless Chromium (``browser`` tests) -----------------------------------

def chromium_args(wav: Path) -> list[str]:
    return [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--use-fake-device-for-media-stream",
        "--use-fake-ui-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}",
        "--autoplay-policy=no-user-gesture-required",
        # In the tests' network namespace (scripts/netns-pytest) the only ICE address,
        # 198.18.0.1, is on the loopback interface, which Chromium's WebRTC skips by default.
        "--allow-loopback-in-peer-connection",
    ]


async def open_page(opener: Any, url: str, problems: list[str]) -> Any:
    """A new page (of a browser or a context) at ``url``, its script errors into ``problems``."""
    page = await opener.new_page()
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    await page.goto(url)
    return page


async def open_room(page: Any, mode: str, role: str, source_lang: str,
                    target_lang: str | None = None) -> str:
    """Start a room of ``mode`` on the page and return the link it shows for ``role``."""
    await page.select_option("#source-lang", source_lang)
    await page.select_option("#room-mode", mode)  # first: in a room every target is choosable
    if target_lang is not None:
        await page.select_option("#target-lang", target_lang)
    await page.click("#start")
    await page.wait_for_function(
        f"() => document.querySelector('#{role}-link').href.includes('#room=')",
        timeout=30_000)
    link = await page.locator(f"#{role}-link").get_attribute("href")
    assert link is not None and f"role={role}" in link
    return str(link)


# --- a Ray cluster scenario in a private network namespace (``cluster`` tests) -----------

def namespace_available() -> str | None:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare/ip not installed"
    probe = subprocess.run(["unshare", "-n", "--", "true"], capture_output=True, timeout=10)
    return None if probe.returncode == 0 else "cannot create a network namespace (needs root)"


def run_scenario(factory: pytest.TempPathFactory, *flags: str,
                 script: Path | None = None) -> dict[str, Any]:
    pytest.importorskip("ray", reason="needs the cluster extra: pip install 'speechpipe[cluster]'")
    why = namespace_available()
    if why:
        pytest.skip(why)
    out = factory.mktemp("cluster") / "scenario.json"
    script = script or ROOT / "tests" / "support" / "cluster.py"
    argv = " ".join(f'"{part}"' for part in (sys.executable, script, out, *flags))
    proc = subprocess.Popen(
        ["unshare", "-n", "--", "sh", "-c", f"ip link set lo up && exec {argv}"],
        cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        _, err = proc.communicate(timeout=700)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert out.is_file(), f"the scenario wrote nothing: {err.decode(errors='replace')[-3000:]}"
    result: dict[str, Any] = json.loads(out.read_text())
    if result.get("error"):
        logs = "\n".join(f"--- {k}\n{v}" for k, v in result.get("logs", {}).items())
        pytest.fail(f"scenario failed: {result['error']}\n{logs}")
    return result


def native_or_skip(*, needs: str = "PrefillDecoder") -> Any:
    """The compiled native decoders (``models/native``), or skip the test where they were not
    built (no C++ compiler); ``.ci/run`` sets ``SPEECHPIPE_REQUIRE_NATIVE=1``, and then a
    missing build fails instead. ``needs``: a class the test uses."""
    from speechpipe.models.whisper.prefill import native_prefill

    module = native_prefill()
    if module is None or not hasattr(module, needs):
        if os.environ.get("SPEECHPIPE_REQUIRE_NATIVE"):
            pytest.fail("the native prefill decoder was not built (see setup.py)")
        pytest.skip("the native prefill decoder is not built here (no C++ compiler?)")
    return module


def english_only(monkeypatch: Any, tmp_path: Path) -> None:
    """This process as a machine with no engine for other languages: no Apertium pair
    (``SPEECHPIPE_APERTIUM_MODES`` an empty folder) and no voice without files (espeak-ng's
    catalogue off). For tests of what a server does for a direction it cannot serve."""
    import dataclasses

    from speechpipe.voices.engines import ENGINES

    empty = tmp_path / "no-apertium-modes"
    empty.mkdir(exist_ok=True)
    monkeypatch.setenv("SPEECHPIPE_APERTIUM_MODES", str(empty))
    for name, engine in list(ENGINES.items()):
        monkeypatch.setitem(ENGINES, name, dataclasses.replace(engine, catalogue=""))
