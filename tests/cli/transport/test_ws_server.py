"""The live server on loopback with a real ``websockets`` client: HTTP endpoints, the session
protocol, and one test per bad-input case. Sessions are scripted fakes (see ``ScriptedSession``);
the real pipeline runs in ``test_ws_e2e.py``."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from speechpipe.transport.codes import CloseCode
from speechpipe.transport.limits import ServerLimits
from speechpipe.transport.protocol import MAX_MESSAGE_BYTES
from speechpipe.transport.websocket_server import SpeechServer
from tests.fakes import FakeFactory
from tests.helpers import OUT_RATE, expect_close, pcm, recv_json, start

pytestmark = pytest.mark.asyncio(loop_scope="session")  # the loop the fixtures run in


@pytest.fixture
async def server() -> AsyncIterator[tuple[SpeechServer, FakeFactory]]:
    factory = FakeFactory()
    ready = {"value": True}
    srv = SpeechServer(
        factory,
        port=0,
        is_ready=lambda: ready["value"],
        metrics_text=lambda: b"# HELP x\nspeechpipe_sessions_active 0\n",
        limits=ServerLimits(start_timeout_s=2.0, max_lead_s=3.0, webrtc_connect_timeout_s=2.0),
    )
    srv.ready = ready  # type: ignore[attr-defined]
    async with srv:
        yield srv, factory


async def http_get(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def url(srv: SpeechServer) -> str:
    return f"ws://127.0.0.1:{srv.port}/ws"


# --------------------------------------------------------------------------- HTTP


async def test_health_ready_metrics_and_page(server: tuple[SpeechServer, FakeFactory]) -> None:
    srv, _ = server
    status, _, body = await http_get(srv.port, "/healthz")
    assert (status, body) == (200, b"ok\n")
    assert (await http_get(srv.port, "/readyz"))[0] == 200
    status, headers, body = await http_get(srv.port, "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    assert b"speechpipe_sessions_active" in body
    status, headers, body = await http_get(srv.port, "/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert b"<html" in body.lower() and b"app.js" in body
    status, headers, _ = await http_get(srv.port, "/app.js")
    assert status == 200 and "javascript" in headers["content-type"]
    assert (await http_get(srv.port, "/worklet.js"))[0] == 200
    assert (await http_get(srv.port, "/nope"))[0] == 404


async def test_not_ready_until_loaded(server: tuple[SpeechServer, FakeFactory]) -> None:
    srv, _ = server
    srv.ready["value"] = False  # type: ignore[attr-defined]
    assert (await http_get(srv.port, "/readyz"))[0] == 503
    assert (await http_get(srv.port, "/healthz"))[0] == 200
    with pytest.raises(InvalidStatus) as info:
        async with connect(url(srv)):
            pass
    assert info.value.response.status_code == 503
    srv.ready["value"] = True  # type: ignore[attr-defined]
    assert (await http_get(srv.port, "/readyz"))[0] == 200


# --------------------------------------------------------------------------- the protocol


async def test_session_happy_path(server: tuple[SpeechServer, FakeFactory]) -> None:
    srv, factory = server
    async with connect(url(srv)) as ws:
        started = await start(ws, sample_rate=48000)
        assert started["protocol"] == 1 and started["output_sample_rate"] == OUT_RATE
        audio = pcm(2.0, 48000)
        for i in range(0, len(audio), 1920):  # 20 ms messages
            await ws.send(audio[i : i + 1920])
        await ws.send(json.dumps({"type": "flush"}))
        await ws.send(json.dumps({"type": "stop"}))
        seen = await expect_close(ws)
        assert ws.close_code == CloseCode.NORMAL
    kinds = [json.loads(m)["type"] if isinstance(m, str) else "binary" for m in seen]
    assert kinds.count("source") == kinds.count("target") == 2
    assert kinds.count("utterance_end") == 2 and kinds[-1] == "end"
    for i, kind in enumerate(kinds):  # each audio header is followed by its PCM
        if kind == "audio":
            header = json.loads(seen[i])
            assert kinds[i + 1] == "binary"
            assert len(seen[i + 1]) == 2 * header["samples"]
            assert header["sample_rate"] == OUT_RATE and header["via"] == "websocket"
    assert kinds.count("audio") == kinds.count("binary") == 2
    session = factory.sessions[0]
    assert session.finished and session.exited
    assert session.next_pts == pytest.approx(32000, abs=320)  # 2 s at 48 kHz -> 16 kHz


async def test_binary_before_start(server: tuple[SpeechServer, FakeFactory]) -> None:
    srv, _ = server
    async with connect(url(srv)) as ws:
        await ws.send(pcm(0.02))
        error = await recv_json(ws)
        assert (error["type"], error["code"], error["fatal"]) == ("error", "not_started", False)
        await start(ws)  # the connection is still usable


async def test_malformed_json(server: tuple[SpeechServer, FakeFactory]) -> None:
    srv, _ = server
    async with connect(url(srv)) as ws:
        await ws.send("{this is not json")
        assert (await recv_json(ws))["code"] == "bad_json"
        await start(ws)
        await ws.send('{"type": "flush"')
        assert (await recv_json(ws))["code"] == "bad_json"
        await ws.send(pcm(0.1))  # the session goes on
        await ws.send(json.dumps({"type": "stop"}))
        await expect_close(ws)
        assert ws.close_code == CloseCode.NORMAL


async def test_unknown_type(server: tuple[SpeechServer, FakeFactory]) -> None:
    srv, _ = server
    async with connect(url(srv)) as ws:
        await ws.send(json.dumps({"type": "launch"}))
        error = await recv_json(ws)
        assert error["code"] == "unknown_type" and not error["fatal"]
        await start(ws)
        await ws.send(json.dumps({"type": "launch"}))
        assert (await recv_json(ws))["code"] == "unknown_type"
        await ws.send(json.dumps({"type": "start"}))
        assert (await recv_json(ws))["code"] == "bad_start"  # a second start is refused


@pytest.mark.parametrize(
    ("fields", "code", "close"),
    [
        ({"sample_rate": 96000}, "unsupported_rate", CloseCode.UNSUPPORTED_RATE),
        ({"sample_rate": 4000}, "unsupported_rate", CloseCode.UNSUPPORTED_RATE),
        ({"format": "opus"}, "unsupported_format", CloseCode.UNSUPPORTED_FORMAT),
        ({"mode": "warp"}, "bad_start", CloseCode.BAD_START),
        ({"source_lang": "xx"}, "unsupported_language", CloseCode.UNSUPPORTED_REQUEST),
        ({"source_lang": "bsy"}, "over_capacity", CloseCode.TRY_AGAIN),
    ],
)
async def test_refused_start(
    server: tuple[SpeechServer, FakeFactory], fields: dict[str, Any], code: str, close: int
) -> None:
    srv, factory = server
    async with connect(url(srv)) as ws:
        await ws.send(json.dumps({"type": "start", **fields}))
        seen = await expect_close(ws)
        assert ws.close_code == close
    error = json.loads(seen[0])
    assert (error["code"], error["fatal"]) == (code, True)
    if code == "over_capacity":
        assert error["retry_after_s"] == 2.0
    assert not any(s.tasks and not s.exited for s in factory.sessions)


async def test_odd_length_frame(server: tuple[SpeechServer, FakeFactory]) -> None:
    srv, factory = server
    async with connect(url(srv)) as ws:
        await start(ws)
        await ws.send(pcm(0.02) + b"\x01")
        error = await recv_json(ws)
        assert (error["code"], error["fatal"]) == ("bad_frame", False)
        await ws.send(pcm(0.04))  # later frames still count
        await ws.send(json.dumps({"type": "stop"}))
        await expect_close(ws)
    assert factory.sessions[0].next_pts == 640


async def test_oversized_message_closes_1009(server: tuple[SpeechServer, FakeFactory]) -> None:
    srv, factory = server
    async with connect(url(srv), max_size=None) as ws:
        await start(ws)
        await ws.send(b"\x00" * (MAX_MESSAGE_BYTES + 2))
        await expect_close(ws)
        assert ws.close_code == CloseCode.TOO_BIG
    await wait_for(lambda: factory.sessions[0].exited)


async def test_audio_far_faster_than_real_time(server: tuple[SpeechServer, FakeFactory]) -> None:
    srv, factory = server
    async with connect(url(srv)) as ws:
        await start(ws)
        audio = pcm(10.0)
        for i in range(0, len(audio), 32000):  # 10 s of audio in a few milliseconds
            try:
                await ws.send(audio[i : i + 32000])
            except ConnectionClosed:
                break
        seen = await expect_close(ws)
        assert ws.close_code == CloseCode.POLICY
    errors = [json.loads(m) for m in seen if isinstance(m, str) and '"error"' in m]
    assert errors and errors[-1]["code"] == "too_fast" and errors[-1]["fatal"]
    await wait_for(lambda: factory.sessions[0].exited)


async def test_garbage_sdp(server: tuple[SpeechServer, FakeFactory]) -> None:
    srv, factory = server
    async with connect(url(srv)) as ws:
        await start(ws)
        for sdp in ("this is not sdp", "v=0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\n", "\x00" * 50):
            await ws.send(json.dumps({"type": "offer", "sdp": sdp}))
            error = await recv_json(ws)
            assert (error["code"], error["fatal"]) == ("bad_sdp", False)
        await ws.send(json.dumps({"type": "ice", "candidate": "candidate:garbage"}))
        assert (await recv_json(ws))["code"] == "bad_message"
        await ws.send(pcm(1.0))  # the WebSocket session is unaffected
        assert (await recv_json(ws))["type"] == "vad"
        await ws.send(json.dumps({"type": "stop"}))
        await expect_close(ws)
        assert ws.close_code == CloseCode.NORMAL
    assert all(conn.peer is None for conn in srv.connections)


async def test_start_timeout() -> None:
    # its own server: the shared fixture's 2 s start timeout would be waited out in full
    srv = SpeechServer(FakeFactory(), port=0, limits=ServerLimits(start_timeout_s=0.3))
    async with srv, connect(url(srv)) as ws:
        seen = await expect_close(ws, within=5)
        assert ws.close_code == CloseCode.START_TIMEOUT
    assert json.loads(seen[0])["code"] == "start_timeout"


async def test_token_required() -> None:
    srv = SpeechServer(FakeFactory(), port=0, limits=ServerLimits(token="s3cret"))
    async with srv:
        async with connect(url(srv)) as ws:
            await ws.send(json.dumps({"type": "start", "token": "guess"}))
            await expect_close(ws)
            assert ws.close_code == CloseCode.UNAUTHORIZED
        async with connect(url(srv)) as ws:
            await start(ws, token="s3cret")


async def wait_for(predicate: Any, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


async def test_disconnect_mid_utterance_frees_the_session(
    server: tuple[SpeechServer, FakeFactory],
) -> None:
    srv, factory = server
    before = set(asyncio.all_tasks())
    ws = await connect(url(srv))
    await start(ws)
    for _ in range(60):  # 1.2 s: the fake is mid-utterance, events are in flight
        await ws.send(pcm(0.02))
    await recv_json(ws)
    assert srv.active_sessions == 1
    ws.transport.abort()  # vanish without a closing handshake
    await wait_for(lambda: srv.active_sessions == 0 and not srv.connections)
    session = factory.sessions[0]
    await wait_for(lambda: session.exited)
    assert all(task.done() for task in session.tasks)
    await wait_for(lambda: set(asyncio.all_tasks()) - before <= {asyncio.current_task()})
    assert (await http_get(srv.port, "/healthz"))[0] == 200


async def test_one_clients_garbage_does_not_hurt_another(
    server: tuple[SpeechServer, FakeFactory],
) -> None:
    srv, _ = server

    async def vandal() -> None:
        async with connect(url(srv), max_size=None) as ws:
            await ws.send(b"\xff" * 3)
            await ws.send("][")
            await ws.send(json.dumps({"type": "start", "sample_rate": -1}))
            await expect_close(ws)

    async def good() -> list[Any]:
        async with connect(url(srv)) as ws:
            await start(ws)
            for _ in range(55):
                await ws.send(pcm(0.02))
                await asyncio.sleep(0.005)
            await ws.send(json.dumps({"type": "stop"}))
            return await expect_close(ws)

    *_, seen = await asyncio.gather(*[vandal() for _ in range(3)], good())
    assert any(isinstance(m, bytes) for m in seen)
