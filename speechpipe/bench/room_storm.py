"""``speechpipe bench room --join-storm RATE``: does a storm of listener joins reach the speaker?

Against one live server (the bench's own ``speechpipe serve`` on 127.0.0.1, real models), a
room ``speaker`` plays one real clip at real time twice in the same run:

1. **baseline**: the talk alone;
2. **storm**: the same talk while listeners join the room at ``RATE`` per second (from a
   separate client process, spread over ``--storm-addresses`` loopback source addresses
   127.0.0.2... as a crowd comes from many addresses), at most ``--storm-listeners`` of them;
   joined listeners stay until the talk ends.

Each phase prints ``/healthz`` latency p50/p99 (a fresh HTTP connection every 20 ms from a
thread of the bench), the speaker's caption lag p50/p95 (each ``source``/``target`` event's
arrival after the audio it covers was sent), and for the storm the joins admitted and refused
(``too_many_joins`` 4016 and others). The server keeps its default join limits unless
``--server-arg`` changes them. Bounded in count (``MAX_STORM``) and in time (``PHASE_LIMIT_S``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from speechpipe.bench.server_process import endpoint, loopback_opener
from speechpipe.bench.stats import percentile, percentile_ms

__all__ = ["StormPhase", "run_storm_phase", "run_storm_bench", "caption_lags", "MAX_STORM",
           "MAX_RATE"]

MAX_STORM = 2000  # listeners one storm may open
MAX_RATE = 2000.0  # joins per second
PHASE_LIMIT_S = 600.0
LEAD_S = 1.0  # silence before the clip (the storm starts with it)
TAIL_S = 3.0
HEALTH_EVERY_S = 0.02


@dataclass
class StormPhase:
    """What one phase saw."""

    health_s: list[float] = field(default_factory=list)  # /healthz round trips
    health_failed: int = 0
    lags_s: list[float] = field(default_factory=list)  # the speaker's caption lags
    speaker_close: int | None = None
    joins: Counter[str] = field(default_factory=Counter)  # "ok", or the refusal's close code

    def line(self, name: str) -> str:
        p = percentile_ms
        text = (f"  {name:<9} /healthz p50 {p(self.health_s, 50):.1f} ms, p99 "
                f"{p(self.health_s, 99):.1f} ms ({len(self.health_s)} probes"
                f"{f', {self.health_failed} failed' if self.health_failed else ''}); speaker's "
                f"caption lag p50 {p(self.lags_s, 50) / 1000:.2f} s, p95 "
                f"{p(self.lags_s, 95) / 1000:.2f} s ({len(self.lags_s)} captions; close "
                f"{self.speaker_close})")
        if self.joins:
            refused = ", ".join(f"{n} closed {code}" for code, n in sorted(self.joins.items())
                                if code != "ok")
            text += f"\n            joins: {self.joins['ok']} admitted" + (
                f", {refused}" if refused else "")
        return text


def caption_lags(events: list[tuple[float, dict[str, Any]]], t0: float) -> list[float]:
    """Each caption's arrival (monotonic) after the end of the audio it covers was sent
    (audio sample ``s`` at ``t0 + s / 16000``: the speaker sends at real time from ``t0``)."""
    lags = []
    for arrived, event in events:
        end = event.get("audio_end")
        if event.get("type") in ("source", "target") and isinstance(end, int | float):
            lags.append(arrived - (t0 + float(end)))
    return lags


def _probe_health(url: str, stop: threading.Event, phase: StormPhase) -> None:
    http = endpoint(url, "/healthz")
    opener = loopback_opener()
    deadline = time.monotonic() + PHASE_LIMIT_S
    while not stop.is_set() and time.monotonic() < deadline:
        t = time.monotonic()
        try:
            with opener.open(http, timeout=10) as response:
                response.read()
            phase.health_s.append(time.monotonic() - t)
        except OSError:
            phase.health_failed += 1
        stop.wait(HEALTH_EVERY_S)


async def _speaker(url: str, audio: np.ndarray, source_lang: str, room: asyncio.Future[str],
                   ready: asyncio.Event, phase: StormPhase) -> None:
    from websockets.asyncio.client import connect

    padded = np.concatenate([np.zeros(int(LEAD_S * 16000), np.int16), audio,
                             np.zeros(int(TAIL_S * 16000), np.int16)]).astype("<i2")
    events: list[tuple[float, dict[str, Any]]] = []
    async with connect(url, max_size=None, open_timeout=60) as ws:
        await ws.send(json.dumps({"type": "start", "sample_rate": 16000, "role": "speaker",
                                  "source_lang": source_lang}))
        started = json.loads(await ws.recv())
        if started.get("type") != "started":
            raise RuntimeError(f"the speaker was refused: {started}")
        room.set_result(started["room"])

        async def read() -> None:
            with contextlib.suppress(Exception):
                async for message in ws:
                    if isinstance(message, str):
                        events.append((time.monotonic(), json.loads(message)))

        reader = asyncio.create_task(read())
        await ready.wait()  # the storm's client process is up
        t0 = time.monotonic()
        for i, offset in enumerate(range(0, len(padded), 320)):
            delay = t0 + i * 0.02 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await ws.send(padded[offset: offset + 320].tobytes())
        await ws.send(json.dumps({"type": "stop"}))
        await reader
    phase.speaker_close = ws.close_code
    phase.lags_s = caption_lags(events, t0)


def _storm_worker(url: str, room: str, rate: float, count: int, addresses: int,
                  ready: Any, stop: Any, out: Any) -> None:
    """A client process: ``count`` listeners join ``room`` at ``rate`` per second from
    ``addresses`` loopback source addresses, stay until ``stop``; puts a Counter of outcomes."""
    from websockets.asyncio.client import connect

    async def main() -> None:
        outcomes: Counter[str] = Counter()
        done = asyncio.Event()

        async def one(i: int) -> None:
            local = (f"127.0.0.{2 + i % addresses}", 0) if addresses > 1 else None
            try:
                async with connect(url, open_timeout=30, local_addr=local,
                                   max_size=None) as ws:
                    await ws.send(json.dumps({"type": "start", "role": "listener",
                                              "room": room}))
                    first = json.loads(await asyncio.wait_for(ws.recv(), 30))
                    if first.get("type") != "started":
                        with contextlib.suppress(Exception):
                            await asyncio.wait_for(ws.wait_closed(), 10)
                        outcomes[str(ws.close_code)] += 1
                        return
                    outcomes["ok"] += 1
                    reader = asyncio.create_task(_drain(ws))
                    await done.wait()
                    reader.cancel()
            except Exception as exc:  # refused at the handshake, reset, timed out
                outcomes[type(exc).__name__] += 1

        tasks = []
        ready.set()
        t0 = time.monotonic()
        for i in range(count):
            delay = t0 + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if stop.is_set():
                break
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.get_running_loop().run_in_executor(None, stop.wait, PHASE_LIMIT_S)
        done.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        out.put(dict(outcomes))

    asyncio.run(main())


async def _drain(ws: Any) -> None:
    with contextlib.suppress(Exception):
        async for _ in ws:
            pass


async def run_storm_phase(url: str, audio: np.ndarray, source_lang: str, *, rate: float = 0.0,
                          count: int = 0, addresses: int = 1) -> StormPhase:
    """One phase: the talk, with a storm of ``count`` joins at ``rate``/s when ``rate``."""
    import multiprocessing

    phase = StormPhase()
    loop = asyncio.get_running_loop()
    room: asyncio.Future[str] = loop.create_future()
    probing, ready = threading.Event(), asyncio.Event()
    speaker = asyncio.create_task(_speaker(url, audio, source_lang, room, ready, phase))
    room_id = await room
    prober = threading.Thread(target=_probe_health, args=(url, probing, phase), daemon=True)
    prober.start()
    ctx = multiprocessing.get_context("spawn")
    stop_all, up, out = ctx.Event(), ctx.Event(), ctx.Queue()
    worker = None
    if rate > 0 and count > 0:
        worker = ctx.Process(target=_storm_worker, daemon=True,
                             args=(url, room_id, rate, count, addresses, up, stop_all, out))
        worker.start()
    try:
        if worker is not None and not await loop.run_in_executor(None, up.wait, 120):
            raise RuntimeError("the storm's client process did not start in time")
        ready.set()
        await speaker
    finally:
        if not speaker.done():
            speaker.cancel()
        probing.set()
        stop_all.set()
        await loop.run_in_executor(None, prober.join, 30)
        if worker is not None:
            with contextlib.suppress(Exception):
                phase.joins.update(await loop.run_in_executor(None, out.get, True, 120))
            worker.join(10)
            if worker.is_alive():
                worker.terminate()
    return phase


def run_storm_bench(rate: float, count: int, addresses: int, audio: np.ndarray, clip_name: str,
                    source_lang: str, server_args: list[str], port: int = 0) -> int:
    """Baseline, then the storm, against one server the bench starts; prints both. 0 when
    both talks ended normally (the figures are for reading, not a pass/fail), else 1."""
    from speechpipe.bench.server_process import ServerProcess

    extra = ["--max-sessions-per-ip", "0", "--max-listeners", "0",
             "--max-listeners-per-room", "0", *server_args]  # the join limits stay
    with ServerProcess(extra, port=port) as server:
        base = asyncio.run(asyncio.wait_for(run_storm_phase(server.url, audio, source_lang),
                                            PHASE_LIMIT_S))
        storm = asyncio.run(asyncio.wait_for(run_storm_phase(
            server.url, audio, source_lang, rate=rate, count=count, addresses=addresses),
            PHASE_LIMIT_S))
    print(f"speechpipe bench room --join-storm {rate:g}: clip {clip_name} "
          f"({len(audio) / 16000:.1f} s) from a room speaker at real time; storm: up to {count} "
          f"listeners at {rate:g}/s from {addresses} loopback address(es)")
    print(base.line("baseline"))
    print(storm.line("storm"))
    p = percentile  # nan for no values
    health, lag = p(storm.health_s, 99), p(storm.lags_s, 95) - p(base.lags_s, 95)
    print(f"  target:   storm /healthz p99 {health * 1000:.1f} ms <= 50 ms: "
          f"{'yes' if health <= 0.05 else 'NO'}; caption lag p95 {lag:+.2f} s vs baseline "
          f"<= +0.10 s: {'yes' if lag <= 0.1 else 'NO'}")
    from speechpipe.bench.record import note

    note({"rate": rate, "count": count, "addresses": addresses, "clip": clip_name,
          "baseline": base.line("baseline").strip(), "storm": storm.line("storm").strip(),
          "health_p99_s": health, "caption_lag_p95_rise_s": lag})  # --record
    return 0 if base.speaker_close == storm.speaker_close == 1000 else 1
