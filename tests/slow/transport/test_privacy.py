"""Logs carry ids, sizes, timings and codes: never what was said.

A real session (real models, a recording, a session token) runs with every logger at DEBUG,
the server's and the libraries' (websockets dumps frames and headers at DEBUG; Piper logs the
text it speaks): none of the captions, the translation or the token may appear in what was
logged."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from speechpipe.transport.auth import TokenAuthority
from speechpipe.transport.codes import CloseCode
from speechpipe.transport.file_replay import read_audio
from speechpipe.transport.limits import ServerLimits
from speechpipe.transport.websocket_server import SpeechServer
from tests.helpers import (
    ROOT,
    SECRET,
    server_log,
)

live = pytest.mark.asyncio(loop_scope="session")

OWN_SAMPLES = ROOT / "samples"


def clip(clip_id: str) -> tuple[Path, dict[str, Any]]:
    for line in (OWN_SAMPLES / "manifest.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if entry["id"] == clip_id:
            return OWN_SAMPLES / entry["file"], entry
    raise LookupError(clip_id)


def distinctive_words(*texts: str) -> set[str]:
    """Words long enough not to occur in a log line by chance."""
    words: set[str] = set()
    for text in texts:
        words |= {w.lower() for w in re.findall(r"\w+", text) if len(w) >= 5}
    return words


@live
async def test_real_session_logs_no_content_at_debug(
    pipeline: Any, stream_ws: Any, caplog: pytest.LogCaptureFixture
) -> None:
    path, entry = clip("es_cafe")
    authority = TokenAuthority(SECRET)
    token = authority.issue(ttl_s=60, subject="privacy")
    caplog.set_level(logging.DEBUG)  # the root logger: every library's DEBUG too
    limits = ServerLimits(auth=authority)
    async with SpeechServer(pipeline.session, port=0, limits=limits) as srv:
        run = await stream_ws(
            f"ws://127.0.0.1:{srv.port}/ws?token={token}", read_audio(path), tail_s=2.0,
            start={"source_lang": "es", "output_sample_rate": 16000},
        )
    assert run.close_code == CloseCode.NORMAL
    source, target = run.text("source"), run.text("target")
    assert source and target and run.audio, "the session produced captions and speech"
    spoken = " ".join(h["text"] for _, h, _ in run.audio)

    logged = server_log(caplog.records)
    assert "session" in logged and len(caplog.records) > 20, "DEBUG records were captured"
    committed = [e["committed"] for e in run.of("source") + run.of("target") if e["committed"]]
    for text in committed + [spoken]:
        assert text not in logged
    leaked = {w for w in distinctive_words(source, target, spoken, entry["transcript"])
              if re.search(rf"\b{re.escape(w)}\b", logged, re.IGNORECASE)}
    assert not leaked, f"content words in the logs: {sorted(leaked)}"
    assert token not in logged and token.split(".")[2] not in logged
