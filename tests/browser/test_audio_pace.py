"""The audio pace rule (``transport.quotas.AudioPace``, close 4010) against real clients: a
Python client at real-time pace and the demo page in headless Chromium over WebSocket and
WebRTC stream for longer than one window under the default rule and are never closed by it.
Prints how evenly their audio reached the server (the figures the default was chosen by)."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from websockets.asyncio.client import connect

from speechpipe.transport.file_replay import read_audio
from speechpipe.transport.limits import Quotas
from speechpipe.transport.websocket_server import SpeechServer
from tests.fakes import TickFactory
from tests.helpers import chromium_args, pcm, read_until_closed

pytestmark = pytest.mark.asyncio(loop_scope="session")

SECONDS = 26.0  # longer than one 20 s window
SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "wav"


class RecordingFactory(TickFactory):
    """Fake sessions that note when each frame reached the server (monotonic s, audio s)."""

    def __init__(self) -> None:
        super().__init__()
        self.arrivals: list[list[tuple[float, float]]] = []
        self.opened: list[float] = []

    def __call__(self, request: Any) -> Any:
        session = super().__call__(request)
        arrivals: list[tuple[float, float]] = []
        self.arrivals.append(arrivals)
        self.opened.append(time.monotonic())
        push = session.push

        async def recorded(frame: Any) -> None:
            arrivals.append((time.monotonic(), frame.end / 16000))
            await push(frame)

        session.push = recorded  # type: ignore[method-assign]
        return session


class Closes:
    def __init__(self) -> None:
        self.codes: list[int | None] = []

    def session_opened(self) -> None:
        pass

    def session_closed(self, seconds: float, close_code: int | None) -> None:
        self.codes.append(close_code)

    def output_event(self, event: Any) -> None:
        pass

    def error(self, code: str) -> None:
        pass


def min_window_ratio(opened: float, arrivals: list[tuple[float, float]], window: float) -> float:
    times = np.array([t for t, _ in arrivals]) - opened
    audio = np.array([a for _, a in arrivals])
    ratios = []
    for t in np.arange(window, times[-1], 0.1):
        lo, hi = np.searchsorted(times, [t - window, t], side="right")
        before = audio[lo - 1] if lo > 0 else 0.0
        ratios.append(((audio[hi - 1] if hi > 0 else 0.0) - before) / window)
    return float(min(ratios))


async def python_client(url: str) -> None:
    async with connect(url) as ws:
        await ws.send(json.dumps({"type": "start"}))
        await ws.recv()
        t0 = time.monotonic()
        for i in range(int(SECONDS / 0.02)):
            await asyncio.sleep(max(0.0, t0 + i * 0.02 - time.monotonic()))
            await ws.send(pcm(0.02))
        await ws.send(json.dumps({"type": "stop"}))
        await read_until_closed(ws)


async def page_client(port: int, transport: str, wav: Path, executable: str) -> None:
    playwright_api = pytest.importorskip("playwright.async_api")
    async with playwright_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=executable, headless=True,
                                           args=chromium_args(wav))
        try:
            page = await browser.new_page()
            await page.goto(f"http://127.0.0.1:{port}/")
            await page.select_option("#transport", transport)
            await page.click("#start")
            await asyncio.sleep(SECONDS)
            assert await page.locator("#stats").get_attribute("data-state") == "listening"
            await page.click("#stop")
            await page.wait_for_function(
                "() => document.querySelector('#stats').dataset.state === 'closed'",
                timeout=30_000,
            )
        finally:
            await browser.close()


async def test_real_clients_keep_the_default_audio_pace(tmp_path: Path) -> None:
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)")
    wav = tmp_path / "mic.wav"
    sf.write(wav, read_audio(SAMPLES / "es_hermano.wav"), 16000, subtype="PCM_16")
    factory, closes = RecordingFactory(), Closes()
    window = Quotas().audio_window_s
    assert window is not None and window < SECONDS
    async with SpeechServer(factory, port=0, observer=closes) as srv:
        url = f"ws://127.0.0.1:{srv.port}/ws"
        await asyncio.gather(python_client(url),
                             page_client(srv.port, "websocket", wav, executable),
                             page_client(srv.port, "webrtc", wav, executable))
    assert len(factory.arrivals) == 3
    for opened, arrivals in zip(factory.opened, factory.arrivals, strict=True):
        first = arrivals[0][0] - opened
        gap = max(b[0] - a[0] for a, b in zip(arrivals, arrivals[1:], strict=False))
        ratios = {w: min_window_ratio(opened, arrivals, w) for w in (5.0, 10.0, window)}
        print(f"\nsession: first audio {first:.2f} s after it opened, largest gap {gap:.2f} s, "
              "least audio per second over any window: "
              + ", ".join(f"{w:g} s: {r:.3f}" for w, r in ratios.items()))
    assert closes.codes == [1000, 1000, 1000], closes.codes  # none was closed for its pace
