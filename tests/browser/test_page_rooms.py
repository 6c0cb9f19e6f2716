"""The demo page's room view in a real headless Chromium: one context gives a talk through the
fake microphone (a real recording), two listener contexts open the listener link it shows,
display the translation and receive the translated speech."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import chromium_args, open_page, open_room

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_a_talk_reaches_two_listener_pages(live_server: Any, fake_mic_wav: Path) -> None:
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)")
    playwright_api = pytest.importorskip("playwright.async_api")
    async with playwright_api.async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=executable, headless=True, args=chromium_args(fake_mic_wav)
        )
        try:
            problems: list[str] = []
            speaker = await open_page(await browser.new_context(),
                                      f"http://127.0.0.1:{live_server.server.port}/", problems)
            link = await open_room(speaker, "speaker", "listener", "es")
            listeners = []
            for _ in range(2):
                page = await open_page(await browser.new_context(), link, problems)
                assert await page.locator("#start").inner_text() == "Listen"
                await page.click("#start")
                listeners.append(page)
            for page in listeners:
                await page.wait_for_function(
                    "() => Number(document.querySelector('#stats').dataset.target) > 0"
                    " && Number(document.querySelector('#stats').dataset.audio) > 0",
                    timeout=90_000)
                assert (await page.locator("#target").inner_text()).strip()
                assert int(await page.locator("#stats").get_attribute(
                    "data-audio-samples") or 0) > 0
                assert "listener" in await page.locator("#room-role").inner_text()
                status = await page.locator("#status").inner_text()
                assert "error" not in status.lower(), status
            for page in [*listeners, speaker]:
                await page.click("#stop")
                await page.wait_for_function(
                    "() => document.querySelector('#stats').dataset.state === 'closed'",
                    timeout=30_000)
            assert not problems, problems
        finally:
            await browser.close()


async def test_a_two_party_conversation_in_two_browsers(
    live_server: Any, fake_mic_wav: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Spanish speaker (fake mic: a real Spanish recording) opens a conversation; an English
    speaker (another browser, a real English recording) joins by its link. Each page shows its
    own words on the left and the other's on the right; the English side hears the Spanish
    side in English. (A server with no en->es engine: the Spanish side reads the English
    captions; with Apertium and espeak-ng: tests/browser/test_conversation_real_engines.py.)"""
    import numpy as np
    import soundfile as sf

    from speechpipe.transport.file_replay import read_audio
    from tests.helpers import english_only, manifest_clip

    english_only(monkeypatch, tmp_path)

    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)")
    playwright_api = pytest.importorskip("playwright.async_api")
    english = tmp_path / "english-mic.wav"
    sf.write(english, np.concatenate([read_audio(manifest_clip("en_enh_890_epst")[0]),
                                      np.zeros(16000 * 4, np.int16)]), 16000, subtype="PCM_16")
    async with playwright_api.async_playwright() as pw:
        spanish_browser = await pw.chromium.launch(
            executable_path=executable, headless=True, args=chromium_args(fake_mic_wav))
        english_browser = await pw.chromium.launch(
            executable_path=executable, headless=True, args=chromium_args(english))
        try:
            problems: list[str] = []
            es = await open_page(spanish_browser,
                                 f"http://127.0.0.1:{live_server.server.port}/", problems)
            link = await open_room(es, "participant", "participant", "es", target_lang="es")
            en = await open_page(english_browser, link, problems)
            await en.select_option("#source-lang", "en")
            await en.select_option("#target-lang", "en")
            await en.click("#start")
            # the English side: the Spanish speaker's words in English, and the speech
            await en.wait_for_function(
                "() => document.querySelector('#target').innerText.trim().length > 0"
                " && Number(document.querySelector('#stats').dataset.audio) > 0",
                timeout=90_000)
            # the Spanish side: its own words left, the English speaker's captions right
            await es.wait_for_function(
                "() => document.querySelector('#source').innerText.trim().length > 0"
                " && document.querySelector('#target').innerText.trim().length > 0",
                timeout=90_000)
            assert await es.locator("#stats").get_attribute("data-audio") == "0", (
                "no en->es model here: captions, never invented speech")
            assert "participant" in await en.locator("#room-role").inner_text()
            # the English page reports its playout clock (the echo guard follows it), and the
            # server took every report (a refused one is a bad_message error on the page)
            await en.wait_for_function(
                "() => window.speechpipeState.playout.reported > 0", timeout=30_000)
            assert await en.locator("#stats").get_attribute("data-errors") in (None, "0")
            for page in (en, es):
                await page.click("#stop")
                await page.wait_for_function(
                    "() => document.querySelector('#stats').dataset.state === 'closed'",
                    timeout=30_000)
            assert not problems, problems
        finally:
            await spanish_browser.close()
            await english_browser.close()
