"""The demo page in a real headless Chromium: a fake microphone fed from a real recording,
captions appear and translated speech arrives (the page counts both in ``#stats``)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import chromium_args

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest.mark.parametrize("transport", ["websocket", "webrtc"])
async def test_page_shows_captions_and_receives_speech(
    live_server: Any, fake_mic_wav: Path, transport: str, request: pytest.FixtureRequest
) -> None:
    if transport == "webrtc":
        request.getfixturevalue("local_ice")  # skips outside a private network namespace
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)")
    playwright_api = pytest.importorskip("playwright.async_api")
    async with playwright_api.async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=executable, headless=True, args=chromium_args(fake_mic_wav)
        )
        try:
            page = await browser.new_page()
            problems: list[str] = []
            page.on("pageerror", lambda exc: problems.append(str(exc)))
            await page.goto(f"http://127.0.0.1:{live_server.server.port}/")
            await page.select_option("#source-lang", "es")
            await page.select_option("#transport", transport)
            await page.click("#start")
            stats = page.locator("#stats")
            await page.wait_for_function(
                "() => Number(document.querySelector('#stats').dataset.target) > 0",
                timeout=45_000,
            )
            await page.wait_for_function(
                "() => Number(document.querySelector('#stats').dataset.audio) > 0",
                timeout=45_000,
            )
            assert await stats.get_attribute("data-state") == "listening"
            # source captions may trail the translation (under load the server sends
            # translation-only partials and commits the captions at pauses): wait for both
            await page.wait_for_function(
                "() => document.querySelector('#source').innerText.trim().length > 0"
                " && document.querySelector('#target').innerText.trim().length > 0",
                timeout=45_000,
            )
            target_text = (await page.locator("#target").inner_text()).strip()
            source_text = (await page.locator("#source").inner_text()).strip()
            assert target_text and source_text
            assert int(await stats.get_attribute("data-audio-samples") or 0) > 0
            if transport == "webrtc":  # the speech really plays on the received track
                await page.wait_for_function(
                    "() => Number(document.querySelector('#stats').dataset.remoteLoud) > 3",
                    timeout=15_000,
                )
            assert "caption lag" in await page.locator("#latency").inner_text()
            status = await page.locator("#status").inner_text()
            assert "error" not in status.lower(), status
            await page.click("#stop")
            await page.wait_for_function(
                "() => document.querySelector('#stats').dataset.state === 'closed'",
                timeout=30_000,
            )
            assert not problems, problems
        finally:
            await browser.close()
