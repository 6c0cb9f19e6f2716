"""The caption overlay (``/captions``) in a real headless Chromium: a speaker streams a real
Spanish recording into a room (a real WebSocket client, the real models); the overlay opened
as ``/captions#room=ID&lang=en&token=...`` shows the room's English captions on a transparent
background, and after the server restarts (same port, the speaker back in the same room) it
reconnects by itself and shows the captions again. The listener link downloads the captions
so far as WebVTT."""

from __future__ import annotations

import asyncio
import base64
import io
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import webvtt

from speechpipe.transport.auth import TokenAuthority
from speechpipe.transport.file_replay import read_audio
from speechpipe.transport.limits import ServerLimits
from speechpipe.transport.room import new_room_id
from tests.helpers import SECRET, chromium_args, stream_websocket, wait_for

pytestmark = pytest.mark.asyncio(loop_scope="session")

AUTH = TokenAuthority(SECRET)

# the share of the page's pixels that are fully transparent, from a screenshot taken without
# the default white backdrop (decoded in the page's own canvas: no image library needed)
TRANSPARENT_SHARE = """async (png) => {
  const img = new Image();
  img.src = "data:image/png;base64," + png;
  await img.decode();
  const canvas = document.createElement("canvas");
  canvas.width = img.width; canvas.height = img.height;
  const ctx = canvas.getContext("2d");
  ctx.drawImage(img, 0, 0);
  const data = ctx.getImageData(0, 0, img.width, img.height).data;
  let clear = 0;
  for (let i = 3; i < data.length; i += 4) if (data[i] === 0) clear++;
  return clear / (data.length / 4);
}"""


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[\w']+", text.lower())}


async def server_on(pipeline: Any, port: int) -> Any:
    from speechpipe.server.serve import ServerApp

    app = ServerApp("127.0.0.1", port, pipeline=pipeline, limits=ServerLimits(auth=AUTH))
    await app.start()
    await app.load()  # the shared models: only warms up, then turns ready
    return app


async def test_the_overlay_shows_a_rooms_captions_and_comes_back_after_a_restart(
    pipeline: Any, spanish_clip: tuple[Any, dict[str, Any]],
) -> None:
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)")
    playwright_api = pytest.importorskip("playwright.async_api")
    audio = read_audio(spanish_clip[0])
    room = new_room_id()
    speaker = {"type": "start", "role": "speaker", "source_lang": "es", "target_lang": "en",
               "token": AUTH.issue(ttl_s=600, role="speaker", room=room)}
    listener_token = AUTH.issue(ttl_s=600, role="listener", room=room)
    app = await server_on(pipeline, 0)
    port = app.server.port
    speaking: asyncio.Task[Any] | None = None
    try:
        async with playwright_api.async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=executable, headless=True,
                                               args=chromium_args(spanish_clip[0]))
            try:
                url = f"ws://127.0.0.1:{port}/ws"
                speaking = asyncio.create_task(stream_websocket(url, audio, tail_s=6.0,
                                                                start=speaker))
                await wait_for(lambda: room in app.server.rooms.registry.rooms, 10.0, "room")
                page = await browser.new_page(viewport={"width": 1280, "height": 200})
                problems: list[str] = []
                page.on("pageerror", lambda exc: problems.append(str(exc)))
                await page.goto(f"http://127.0.0.1:{port}/captions#room={room}&lang=en"
                                f"&token={listener_token}")
                await page.wait_for_function(
                    "() => document.querySelector('#captions .committed')"
                    " && document.querySelector('#captions').innerText.trim().length > 0",
                    timeout=60_000)
                assert await page.locator("#overlay").get_attribute("data-state") == "live"
                for selector in ("html", "body"):
                    color = await page.eval_on_selector(
                        selector, "el => getComputedStyle(el).backgroundColor")
                    assert color == "rgba(0, 0, 0, 0)", (selector, color)
                png = await page.screenshot(omit_background=True)
                share = await page.evaluate(TRANSPARENT_SHARE, base64.b64encode(png).decode())
                assert share > 0.8, f"only {share:.0%} of the overlay is transparent"
                size = await page.eval_on_selector(
                    "#captions", "el => parseFloat(getComputedStyle(el).fontSize)")
                assert size >= 32  # large enough to read on a stream
                run = await speaking
                said = words(" ".join(f"{e['committed']} {e['tentative']}"
                                      for e in run.of("target")))
                spanish = words(" ".join(f"{e['committed']} {e['tentative']}"
                                         for e in run.of("source")))
                shown = words(await page.locator("#captions").inner_text())
                assert shown and shown <= said, (shown, said)  # the room's English captions
                assert shown - spanish, "the English translation, not the Spanish captions"
                # the listener link downloads the captions so far (the overlay keeps the room)
                listen = await browser.new_page()
                listen.on("pageerror", lambda exc: problems.append(str(exc)))
                await listen.goto(f"http://127.0.0.1:{port}/#room={room}&role=listener"
                                  f"&token={listener_token}")
                async with listen.expect_download() as download_info:
                    await listen.click("#captions-download")
                download = await download_info.value
                saved = await download.path()
                text = await asyncio.to_thread(Path(saved).read_text, encoding="utf-8")
                vtt = webvtt.from_buffer(io.StringIO(text))
                kept = words(" ".join(c.text for c in vtt))
                assert kept and kept <= said, (kept, said)
                assert [c.start_in_seconds for c in vtt] == sorted(
                    c.start_in_seconds for c in vtt)
                await listen.close()
                before = int(await page.locator("#overlay").get_attribute("data-captions") or 0)

                await app.stop(close_pipeline=False)  # the server restarts, on the same port
                await page.wait_for_function(
                    "() => document.querySelector('#overlay').dataset.state !== 'live'",
                    timeout=15_000)
                app = await server_on(pipeline, port)
                speaking = asyncio.create_task(stream_websocket(url, audio, tail_s=6.0,
                                                                start=speaker))
                await page.wait_for_function(
                    "(before) => document.querySelector('#overlay').dataset.state === 'live'"
                    " && Number(document.querySelector('#overlay').dataset.captions) > before",
                    arg=before, timeout=60_000)
                await speaking
                speaking = None
                assert not problems, problems
            finally:
                await browser.close()
    finally:
        if speaking is not None:
            speaking.cancel()
            await asyncio.gather(speaking, return_exceptions=True)
        await app.stop(close_pipeline=False)
