"""Fixtures and clients for the live-server tests (imported by ``conftest.py``).

The real pipeline is slow to load, so one ``Pipeline`` serves the whole test session
(``conftest.pipeline``) and one live server runs on it (``live_server``, port 0). Real human
recordings live in ``../shared/samples`` beside the repository; tests that need them skip
with a reason where that folder is absent (a fresh clone elsewhere).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytest_asyncio

REPO = Path(__file__).resolve().parents[1]
SHARED_SAMPLES = REPO.parent / "shared" / "samples"
SPANISH_CLIP = "es_enh_12411_cv"

__all__ = ["live_server", "spanish_clip", "stream_ws"]  # the fixtures conftest.py re-exports


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


@pytest.fixture(scope="session")
def spanish_clip() -> tuple[Path, dict[str, Any]]:
    return manifest_clip(SPANISH_CLIP)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def live_server(pipeline: Any) -> AsyncIterator[Any]:
    """``speechpipe serve`` on the shared pipeline, on a free loopback port."""
    from speechpipe.server.serve import ServerApp

    app = ServerApp("127.0.0.1", 0, pipeline=pipeline)
    await app.start()
    await app.load()  # already loaded: only warms up, then turns ready
    yield app
    await app.stop(close_pipeline=False)


@dataclass
class LiveRun:
    """What a client saw: every JSON event and PCM chunk with its arrival time (seconds since
    the client started streaming, i.e. the client's stream clock)."""

    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    audio: list[tuple[float, dict[str, Any], np.ndarray]] = field(default_factory=list)
    close_code: int | None = None

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for _, e in self.events if e["type"] == kind]

    def text(self, side: str) -> str:
        final: dict[int, str] = {}
        for e in self.of(side):
            final[e["utterance"]] = " ".join(p for p in (e["committed"], e["tentative"]) if p)
        return " ".join(final[k] for k in sorted(final))

    def offsets(self) -> tuple[float | None, float | None]:
        """(StartOffset, EndOffset) as the client experiences them: speech arrival on its
        stream clock, chunks laid back to back, against the server's VAD speech span."""
        starts = [e["t"] for e in self.of("vad") if e["kind"] == "start"]
        ends = [e["t"] for e in self.of("vad") if e["kind"] == "end"]
        if not starts or not self.audio:
            return None, None
        laid_end = 0.0
        for arrived, header, _ in self.audio:
            laid_end = max(arrived, laid_end) + header["samples"] / header["sample_rate"]
        speech_end = max(ends) if ends else max(starts)
        return self.audio[0][0] - min(starts), laid_end - speech_end


async def stream_websocket(
    url: str,
    audio: np.ndarray,
    *,
    rate: int = 16_000,
    frame_ms: int = 20,
    tail_s: float = 3.0,
    start: dict[str, Any] | None = None,
    abort_after_s: float | None = None,
) -> LiveRun:
    """Stream int16 ``audio`` at real-time pace, then ``tail_s`` of silence and ``stop``;
    collect everything until the server closes (or vanish after ``abort_after_s``)."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    run = LiveRun()
    step = rate * frame_ms // 1000
    padded = np.concatenate([audio, np.zeros(int(tail_s * rate), np.int16)]).astype("<i2")
    async with connect(url, max_size=None) as ws:
        await ws.send(json.dumps({"type": "start", "sample_rate": rate, **(start or {})}))
        started = json.loads(await ws.recv())
        assert started["type"] == "started", started
        t0 = time.monotonic()

        async def send() -> None:
            for i, offset in enumerate(range(0, len(padded), step)):
                delay = t0 + i * frame_ms / 1000 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                if abort_after_s is not None and offset / rate >= abort_after_s:
                    ws.transport.abort()
                    return
                await ws.send(padded[offset : offset + step].tobytes())
            await ws.send(json.dumps({"type": "stop"}))

        async def receive() -> None:
            header: dict[str, Any] | None = None
            try:
                async for message in ws:
                    now = time.monotonic() - t0
                    if isinstance(message, bytes):
                        assert header is not None, "binary without an audio header"
                        pcm = np.frombuffer(message, "<i2")
                        assert len(pcm) == header["samples"]
                        run.audio.append((now, header, pcm))
                        header = None
                        continue
                    event = json.loads(message)
                    run.events.append((now, event))
                    if event["type"] == "audio" and event.get("via") != "webrtc":
                        header = event
            except ConnectionClosed:
                pass

        async with asyncio.TaskGroup() as tg:
            tg.create_task(send())
            tg.create_task(receive())
        run.close_code = ws.close_code
    return run


@pytest.fixture
def stream_ws() -> Any:
    """``stream_websocket`` as a fixture, so test modules need not import this file (which
    works whether or not ``tests`` is a package)."""
    return stream_websocket
