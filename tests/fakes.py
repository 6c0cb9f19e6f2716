"""Test fakes and stand-ins, in one module (helpers: ``tests/helpers.py``; fixtures:
``conftest.py``). None loads a model, starts a process or opens a network connection.

- live sessions without models: ``TickSession``/``TickFactory`` (known caption text, for the
  auth, quota, privacy and fault tests) and ``ScriptedSession``/``FakeFactory`` (VAD events,
  hypotheses and speech per second of audio, for the protocol tests);
- ``ScriptedPipeline``: a whole pipeline without models for a server (sessions that say
  "second N" and a tone per second of audio), for the cluster, tracing and bench tests;
  ``tests/scripted_serve.py`` serves it from a subprocess;
- ``ScriptedEngine``: a Whisper engine stand-in for the batcher (records calls, can hold the
  worker), with ``req`` and ``hold_worker``;
- ``InProcessLedger`` (the real ledger behind a Ray actor handle's call shape) and ``Heard``
  (records a node's status events);
- ``Observed``: a ``ServerObserver`` that records closes and errors;
- ``WavTrack``: a WebRTC microphone stand-in paced from a recording;
- ``FakeHub``: the Hugging Face hub on loopback, for ``speechpipe models pull``.

Fakes that must be modules of their own: ``tests/support/scripted_tts.py`` (a TTS engine,
registered by import path: the seam's example) and ``tests/support/fake_sounddevice`` (an importable
``sounddevice``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fractions
import hashlib
import json
import socket
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import av
import numpy as np
import soxr
from aiortc import MediaStreamTrack, RTCPeerConnection
from aiortc.mediastreams import MediaStreamError

from speechpipe.cluster.ledger import LedgerService
from speechpipe.cluster.ledger_core import LedgerOptions
from speechpipe.errors import AdmissionError, LanguageError
from speechpipe.models.whisper.engine import DecodeResult, DecodeTask, WhisperRequest, WhisperResult
from speechpipe.models.workers.batching import AsrBatcher
from speechpipe.stages.channels import Channel
from speechpipe.stages.frames import (
    STREAM_RATE,
    AudioFrame,
    OutputEvent,
    SpeechChunk,
    StatusEvent,
    TextHypothesis,
    UtteranceEnd,
    VadEvent,
)
from speechpipe.stages.request import SessionRequest
from tests.helpers import FAKE_SOURCE, FAKE_TARGET, OUT_RATE


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



class ScriptedSession:
    """A ``LiveSession`` that needs no models: protocol mechanics (framing, validation, flow
    control, teardown) do not depend on what the models say, and a fake makes these tests
    fast and deterministic. Per second of audio pushed it emits a VAD start, a source and a
    target hypothesis and 0.2 s of speech; ``flush``/``finish`` end the utterance. A
    background task stands in for the pipeline's stages, so teardown can be checked."""

    def __init__(self, request: SessionRequest, registry: list[ScriptedSession]) -> None:
        self.request = request
        self.next_pts = 0
        self.pushed = 0
        self.utterance = 0
        self.finished = False
        self.exited = False
        self.channel: Channel[OutputEvent] = Channel(256, name="fake-events")
        self.tasks: list[asyncio.Task[None]] = []
        registry.append(self)

    async def __aenter__(self) -> ScriptedSession:
        self.tasks.append(asyncio.create_task(asyncio.sleep(3600), name="fake-stage"))
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.exited = True

    async def push(self, frame: AudioFrame) -> None:
        assert frame.pts == self.next_pts, "frames must be contiguous"
        assert len(frame.samples) == 320
        self.next_pts = frame.end
        self.pushed += 1
        if self.pushed % 50 == 1:
            await self.channel.put(VadEvent("start", self.utterance, frame.pts, frame.pts))
        if self.pushed % 50 == 0:
            pts = frame.end
            for side in ("source", "target"):
                await self.channel.put(
                    TextHypothesis(side, self.utterance, self.pushed, "uno", "dos", "es",
                                   pts - 16000, pts, pts)  # type: ignore[arg-type]
                )
            tone = (np.sin(np.arange(OUT_RATE // 5) / 3) * 8000).astype(np.int16)
            await self.channel.put(SpeechChunk(tone, OUT_RATE, self.utterance, "one", pts))

    def flush(self) -> None:
        self.channel.put_nowait(UtteranceEnd(self.utterance, self.next_pts, "uno", "one"))
        self.utterance += 1

    async def finish(self) -> None:
        self.finished = True
        await self.channel.put(UtteranceEnd(self.utterance, self.next_pts, "uno", "one"))
        self.channel.close()

    async def events(self) -> AsyncIterator[OutputEvent]:
        async for event in self.channel:
            yield event


class FakeFactory:
    def __init__(self) -> None:
        self.sessions: list[ScriptedSession] = []

    def __call__(self, request: SessionRequest) -> ScriptedSession:
        if request.source_lang == "xx":
            raise LanguageError("unknown source language 'xx'")
        if request.source_lang == "bsy":  # a well-formed code (start validation) no model has
            raise AdmissionError("all workers busy", retry_after_s=2.0)
        return ScriptedSession(request, self.sessions)



class SecondsSession:
    """A session of ``ScriptedPipeline``: per second of audio received, one ``target``
    hypothesis ("second N") and a short tone; ``finish`` ends its events."""

    def __init__(self) -> None:
        self._events: asyncio.Queue[OutputEvent | None] = asyncio.Queue(maxsize=256)
        self._received = 0
        self._said = 0

    async def push(self, frame: AudioFrame) -> None:
        self._received = frame.end
        while self._received >= (self._said + 1) * STREAM_RATE:
            self._said += 1
            pts = self._said * STREAM_RATE
            await self._events.put(TextHypothesis(
                "target", 0, self._said, f"second {self._said}", "", "en",
                0, pts, pts))
            tone = (3000 * np.sin(np.arange(1600) * 0.2)).astype(np.int16)
            await self._events.put(SpeechChunk(tone, STREAM_RATE, 0, "tone", pts))

    def flush(self) -> None:
        pass

    async def finish(self) -> None:
        await self._events.put(None)

    async def events(self) -> AsyncIterator[OutputEvent]:
        while (event := await self._events.get()) is not None:
            yield event


class ScriptedPipeline:
    """Stands in for ``speechpipe.session.Pipeline`` in ``ServerApp``, without any model, so
    a test can run several server nodes on a 2-core machine and look only at admission,
    routing and failure handling. In a subprocess: ``tests/scripted_serve.py`` (``speechpipe
    serve`` on this pipeline); in-process: ``SpeechServer(ScriptedPipeline().session)``."""

    def __init__(self) -> None:
        self.whisper = SimpleNamespace(observer=None)
        self.live_sessions: set[SecondsSession] = set()

    def warm_up(self) -> None:
        """Nothing to warm up."""

    def close(self) -> None:
        """Nothing to close."""

    def stop_workers(self) -> None:
        """No worker threads to join."""

    def worker_health(self) -> list[object]:
        """No shared model workers (``/readyz`` and the worker metrics read this)."""
        return []

    async def aclose(self) -> None:
        """Nothing to close (the server's shutdown path calls it)."""

    @contextlib.asynccontextmanager
    async def session(self, request: SessionRequest) -> AsyncIterator[SecondsSession]:
        """A scripted session, tracked in ``live_sessions`` while open."""
        del request
        session = SecondsSession()
        self.live_sessions.add(session)
        try:
            yield session
        finally:
            self.live_sessions.discard(session)


class ScriptedEngine:
    """Records every engine call; ``gate`` holds the worker inside a call until set, so a test
    can arrange the queue behind it. Buckets are whole seconds of audio, as in the real one."""

    native_threads: frozenset[int] = frozenset()  # no model threads of its own

    def __init__(self, *, fail: set[int] | None = None, call_s: float = 0.0) -> None:
        self.calls: list[list[WhisperRequest]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.fail = fail or set()  # ids of requests that raise
        self.call_s = call_s

    def encode_samples(self, n: int) -> int:
        return (n // STREAM_RATE + 2) * STREAM_RATE

    def run_batch(self, requests):
        self.calls.append(list(requests))
        self.entered.set()
        self.gate.wait(10)
        if self.call_s:
            time.sleep(self.call_s)
        out = []
        for request in requests:
            if id(request) in self.fail:
                out.append(RuntimeError("scripted failure"))
                continue
            words = "uno dos tres cuatro cinco seis siete ocho".split()
            heard = words[: int(len(request.audio) / STREAM_RATE / 0.5)]
            decodes = []
            for task in request.tasks:
                done = len(task.prefix.split())
                text = heard[done:] if task.task == "transcribe" else [w.upper()
                                                                      for w in heard[done:]]
                decodes.append(DecodeResult(task.task, " ".join(text), -0.2, 0.01))
            out.append(WhisperResult("es", 1.0, tuple(decodes), 0.0, 0.0))
        return out


def req(seconds: float = 1.0, *, partial: bool = True) -> WhisperRequest:
    return WhisperRequest(audio=np.zeros(int(seconds * STREAM_RATE), np.float32),
                          language="es", tasks=(DecodeTask("transcribe"),), partial=partial)


def hold_worker(engine: ScriptedEngine, batcher: AsrBatcher):
    """Put a blocker in the worker, so what is submitted next waits in the queue."""
    engine.gate.clear()
    blocker = batcher.submit(req(9.0, partial=False))
    assert engine.entered.wait(5)
    return blocker



class InProcessLedger:
    """The real ``LedgerService`` behind the call shape of a Ray actor handle."""

    def __init__(self) -> None:
        self.service = LedgerService(LedgerOptions(max_queue=2, max_wait_s=1000.0))
        self.down = False

    def __getattr__(self, name: str) -> Any:
        def remote(*args: Any) -> Any:
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            if self.down:
                future.set_exception(ConnectionError("the ledger actor is unavailable"))
            else:
                future.set_result(getattr(self.service, name)(*args))
            return SimpleNamespace(future=lambda: future)

        return SimpleNamespace(remote=remote)


class Heard:
    def __init__(self) -> None:
        self.events: list[StatusEvent] = []

    async def __call__(self, event: StatusEvent) -> None:
        self.events.append(event)



class Observed:
    """A ``ServerObserver`` that records closes and errors (what the metrics would count)."""

    def __init__(self) -> None:
        self.closes: list[int | None] = []
        self.errors: list[str] = []
        self.connections: list[tuple[int | None, str]] = []
        self.refused: list[tuple[int, str | None]] = []

    def session_opened(self) -> None:
        pass

    def session_closed(self, seconds: float, close_code: int | None) -> None:
        self.closes.append(close_code)

    def output_event(self, event: Any) -> None:
        pass

    def error(self, code: str) -> None:
        self.errors.append(code)

    def upgrade_refused(self, status: int, reason: str | None = None) -> None:
        self.refused.append((status, reason))

    def connection_closed(self, code: int | None, reason: str, *, session: bool) -> None:
        self.connections.append((code, reason))



WEBRTC_RATE = 48_000
WEBRTC_FRAME = 960  # 20 ms


class WavTrack(MediaStreamTrack):
    """A microphone stand-in: a recording at 48 kHz paced in 20 ms frames, then silence.

    The recording starts once the peer connection is up (silence before), as a speaker
    would start talking after the call connects: nothing spoken is lost to ICE/DTLS setup.
    ``t0`` is when its first sample went out: the client's stream clock.
    """

    kind = "audio"

    def __init__(self, audio16k: np.ndarray, pc: RTCPeerConnection | None = None) -> None:
        super().__init__()
        self.audio = np.asarray(soxr.resample(audio16k, 16000, WEBRTC_RATE), dtype=np.int16)
        self.pc = pc
        self.ticks = 0
        self.sent = 0
        self.clock0: float | None = None
        self.t0: float | None = None
        self.done = asyncio.Event()

    @property
    def finished(self) -> bool:
        return self.sent >= len(self.audio)

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self.clock0 is None:
            self.clock0 = time.monotonic()
        delay = self.clock0 + self.ticks * WEBRTC_FRAME / WEBRTC_RATE - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        chunk = np.zeros(WEBRTC_FRAME, np.int16)
        if self.pc is None or self.pc.connectionState == "connected":
            if self.t0 is None:
                self.t0 = time.monotonic()
            part = self.audio[self.sent : self.sent + WEBRTC_FRAME]
            chunk[: len(part)] = part
            self.sent += WEBRTC_FRAME
            if self.finished:
                self.done.set()
        frame = av.AudioFrame.from_ndarray(chunk.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = WEBRTC_RATE
        frame.pts = self.ticks * WEBRTC_FRAME
        frame.time_base = fractions.Fraction(1, WEBRTC_RATE)
        self.ticks += 1
        return frame


# --- a model hub on loopback ----------------------------------------------------------------
# A local stand-in for the Hugging Face hub on loopback, speaking the part of its protocol
# that ``huggingface_hub`` downloads use: ``GET /api/models/REPO/revision/REV`` (the file list
# and commit) and ``HEAD``/``GET /REPO/resolve/REV/FILE`` (``X-Repo-Commit``, ``ETag`` = the
# file's SHA-256 as for large files, ``Content-Length``, ``Range`` resumes).
#
# Faults for the tests: ``cut_once`` (the first GET of a file sends half of it, then the
# connection drops), ``corrupt`` (the bytes differ from the SHA-256 announced), and a hostile
# hub's answers: ``etags`` (a file's ``ETag`` replaced), ``commit`` (the commit id it names),
# ``status`` (every request answered with this HTTP status).

HUB_COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, dict[str, bytes]] = {}
        self.cut_once: set[str] = set()
        self.corrupt: set[str] = set()
        self.etags: dict[str, str] = {}
        self.commit = HUB_COMMIT
        self.status: int | None = None
        self.requests: list[tuple[str, str, str | None]] = []  # method, path, Range
        self._server: ThreadingHTTPServer | None = None

    def add_folder(self, repo: str, folder: Path, prefix: str = "") -> None:
        files = self.repos.setdefault(repo, {})
        for path in sorted(Path(folder).rglob("*")):
            if path.is_file():
                files[prefix + path.relative_to(folder).as_posix()] = path.read_bytes()

    def add_file(self, repo: str, name: str, data: bytes) -> None:
        self.repos.setdefault(repo, {})[name] = data

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeHub:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                self._serve(body=False)

            def do_GET(self) -> None:
                self._serve(body=True)

            def _json(self, status: int, data: object, error: str | None = None) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                if error:
                    self.send_header("X-Error-Code", error)
                self.end_headers()
                if self.command == "GET":
                    self.wfile.write(raw)

            def _serve(self, body: bool) -> None:
                path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
                hub.requests.append((self.command, path, self.headers.get("Range")))
                if hub.status is not None:
                    return self._json(hub.status, {"error": "the hub is failing"})
                if path.startswith("/api/models/"):
                    repo = path[len("/api/models/"):].split("/revision/")[0]
                    if repo not in hub.repos:
                        return self._json(404, {"error": "Repository not found"}, "RepoNotFound")
                    return self._json(200, {
                        "id": repo, "modelId": repo, "sha": hub.commit, "private": False,
                        "siblings": [{"rfilename": f} for f in sorted(hub.repos[repo])]})
                parts = path.lstrip("/").split("/")
                if len(parts) < 5 or parts[2] != "resolve":
                    return self._json(404, {"error": "not found"})
                repo, name = "/".join(parts[:2]), "/".join(parts[4:])
                if repo not in hub.repos:
                    return self._json(404, {"error": "Repository not found"}, "RepoNotFound")
                if name not in hub.repos[repo]:
                    return self._json(404, {"error": "Entry not found"}, "EntryNotFound")
                data = hub.repos[repo][name]
                etag = hub.etags.get(name, hashlib.sha256(data).hexdigest())
                if name in hub.corrupt:
                    data = bytes(b ^ 0xFF for b in data[:64]) + data[64:]
                start = 0
                ranged = self.headers.get("Range")
                if body and ranged and ranged.startswith("bytes="):
                    start = int(ranged[6:].split("-")[0] or 0)
                self.send_response(206 if start else 200)
                self.send_header("X-Repo-Commit", hub.commit)
                self.send_header("ETag", f'"{etag}"')
                self.send_header("Content-Length", str(len(data) - start))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()
                if not body:
                    return
                if name in hub.cut_once:
                    hub.cut_once.discard(name)
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(data[start:])

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
