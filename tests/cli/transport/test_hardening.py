"""Attacks from the second hardening round (issue 10), each on a real server on loopback with
real clients (raw sockets where a real client would not misbehave this way). Sessions are
scripted fakes: the limits do not depend on the models."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from speechpipe.transport.auth import TokenAuthority
from speechpipe.transport.codes import CloseCode
from speechpipe.transport.limits import Quotas, ServerLimits
from speechpipe.transport.websocket_server import SpeechServer
from tests.fakes import Observed, TickFactory
from tests.helpers import (
    SECRET,
    errors,
    healthz_ms,
    http_request,
    pcm,
    ping_flood,
    raw_http,
    read_until_closed,
    recv_json,
    rss_bytes,
    sample_during,
    wait_for,
)

live = pytest.mark.asyncio(loop_scope="session")

MB = 1 << 20


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
        before = sorted([await healthz_ms(srv.port) for _ in range(5)])
        base = rss_bytes()
        session = asyncio.create_task(_tick_session(url, 3.0))
        await wait_for(lambda: srv.active_sessions == 1, what="the real session started")
        flood = asyncio.gather(*(asyncio.to_thread(ping_flood, srv.port, 300 * MB, 30.0)
                                 for _ in range(2)))
        peak, latencies = await sample_during(flood, srv.port)
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
        peak, _ = await sample_during(flood, srv.port)
        [(written, seconds)] = await flood
        await wait_for(lambda: not srv.connections, what="the connection gone")
    print(f"\nunread pongs: written {written / MB:.1f} MB, dropped after {seconds:.2f} s; "
          f"RSS +{(peak - base) / MB:.1f} MB")
    assert written < 300 * MB and seconds < 30.0, "the connection was dropped"
    assert observed.errors == ["not_reading"]
    assert observed.connections == [(CloseCode.ABNORMAL, "not_reading")]
    assert peak - base < 150 * MB


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
