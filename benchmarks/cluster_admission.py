"""Cluster benchmark: Ray's overhead on a node, and admission under 1.5x the cluster's capacity.

Run it inside a private network namespace (Ray binds the machine's address otherwise)::

    unshare -n -- sh -c 'ip link set lo up && exec .venv/bin/python benchmarks/cluster_admission.py'

It starts a Ray head (loopback), a node without ``--cluster`` and two cluster nodes, all
with the test-only scripted pipeline (``tests/scripted_serve.py``: no models, so the figures are
the admission path and Ray alone, not translation), and prints:

1. connect -> ``started`` per session (p50/p95 of ``--sessions`` one after another) on the
   plain node, on a cluster node admitting locally, and through a redirect (two connections);
2. each process's resident memory, and CPU seconds over ``--idle`` seconds while idle;
3. admission at 1.5x: ``capacity x 1.5`` clients arrive at once, each holding its session for
   ``--hold`` seconds; how many started at once, were redirected, waited (and how long), were
   refused; the ledger's accounting afterwards.

Every process started is stopped (process groups) at the end; every loop is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.cluster import (  # noqa: E402  (a script beside the repo)
    HEAD_PORT,
    SCRIPTED_SPEECHPIPE,
    Client,
    Procs,
    redirect_of,
    start_head,
)

PLAIN, A, B = 8800, 8801, 8802


def url(port: int) -> str:
    return f"ws://127.0.0.1:{port}/ws"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def proc_stat(pid: int) -> tuple[float, float]:
    """(CPU seconds, RSS MiB) of a process and its children (from /proc)."""
    import os

    pids = [pid]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                pids.append(int(entry))
    cpu = rss = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    page = os.sysconf("SC_PAGE_SIZE")
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu += (int(fields[11]) + int(fields[12])) / tick
        rss += int(fields[21]) * page / 2**20
    return cpu, rss


async def time_to_start(target: str, sessions: int) -> list[float]:
    times = []
    for i in range(sessions):
        t0 = time.perf_counter()
        client = Client(f"s{i}")
        await client.open(target)
        outcome = await client.first(30)
        hop = redirect_of(client)
        if outcome != "started" and hop is not None:
            await client.close()
            client = Client(f"s{i}")
            await client.open(hop["url"], ticket=hop["ticket"])
            outcome = await client.first(30)
        assert outcome == "started", outcome
        times.append(time.perf_counter() - t0)
        await client.stop()
    return times


async def overload(capacity: int, factor: float, hold_s: float) -> dict[str, Any]:
    clients = int(round(capacity * factor))
    rng = random.Random(7)
    results: list[dict[str, Any]] = []

    async def one(i: int) -> None:
        t0 = time.perf_counter()
        client = Client(f"o{i}")
        await client.open(url(rng.choice([A, B])))
        outcome = await client.first(120)
        queued = bool(client.statuses("queued"))
        hop = redirect_of(client)
        if hop is not None:
            client = Client(f"o{i}")
            await client.open(hop["url"], ticket=hop["ticket"])
            outcome = await client.first(30)
        results.append({"outcome": outcome, "queued": queued, "redirected": hop is not None,
                        "wait_s": time.perf_counter() - t0})
        if outcome == "started":
            await asyncio.sleep(hold_s)
            await client.stop()

    async with asyncio.timeout(300):
        await asyncio.gather(*(one(i) for i in range(clients)))
    started = [r for r in results if r["outcome"] == "started"]
    waited = [r["wait_s"] for r in started if r["queued"]]
    return {
        "clients": clients,
        "started_at_once": sum(1 for r in started if not r["queued"]),
        "redirected": sum(1 for r in results if r["redirected"]),
        "waited": len(waited),
        "wait_s_p50": round(statistics.median(waited), 2) if waited else None,
        "wait_s_max": round(max(waited), 2) if waited else None,
        "refused": sum(1 for r in results if r["outcome"] != "started"),
    }


async def bench(args: argparse.Namespace, procs: Procs) -> dict[str, Any]:
    import ray

    from speechpipe.cluster.ledger import ledger_handle

    out: dict[str, Any] = {}
    await start_head(procs)
    address = f"127.0.0.1:{HEAD_PORT}"
    common = ["serve", "--no-webrtc", "--capacity", str(args.capacity),
              "--max-queue-wait", str(args.max_queue_wait)]
    procs.start("plain", [*SCRIPTED_SPEECHPIPE, *common, "--port", str(PLAIN)])
    for name, port in (("a", A), ("b", B)):
        procs.start(name, [*SCRIPTED_SPEECHPIPE, *common, "--port", str(port),
                           "--cluster", address, "--public-url", url(port)])
    await procs.wait_for("plain", "ready", 60)
    for name in ("a", "b"):
        await procs.wait_for(name, "joined the cluster", 120)

    for label, target in (("plain node", url(PLAIN)), ("cluster node, local", url(A))):
        times = await time_to_start(target, args.sessions)
        out[f"start_{label}"] = (round(pct(times, 0.5) * 1000, 1),
                                 round(pct(times, 0.95) * 1000, 1))
    # fill a, then every new session at a is redirected to b
    holders = []
    for i in range(args.capacity):
        client = Client(f"h{i}")
        await client.open(url(A))
        assert await client.first(30) == "started"
        holders.append(client)
    times = await time_to_start(url(A), args.sessions)
    out["start_cluster node, redirected"] = (round(pct(times, 0.5) * 1000, 1),
                                            round(pct(times, 0.95) * 1000, 1))
    for client in holders:
        await client.stop()

    before = {n: proc_stat(procs.procs[n].pid) for n in ("plain", "a", "head")}
    await asyncio.sleep(args.idle)
    after = {n: proc_stat(procs.procs[n].pid) for n in ("plain", "a", "head")}
    out["idle"] = {n: {"cpu_s_per_s": round((after[n][0] - before[n][0]) / args.idle, 4),
                       "rss_mib": round(after[n][1])} for n in after}

    out["overload"] = await overload(2 * args.capacity, args.factor, args.hold)
    ray.init(address=address, namespace="speechpipe", log_to_driver=False)
    ledger = ledger_handle(create=False)
    _, snap = ray.get(ledger.snapshot.remote(), timeout=30)
    out["ledger"] = {k: snap[k] for k in ("admitted", "ended", "lost", "active", "refused")}
    ray.shutdown()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--capacity", type=int, default=2, help="per node (default 2)")
    parser.add_argument("--sessions", type=int, default=20, help="sessions timed per path")
    parser.add_argument("--idle", type=float, default=20.0, help="seconds of idle sampling")
    parser.add_argument("--factor", type=float, default=1.5, help="overload factor")
    parser.add_argument("--hold", type=float, default=5.0, help="seconds each session lasts")
    parser.add_argument("--max-queue-wait", type=float, default=300.0,
                        help="nodes' --max-queue-wait (the default 60 s refuses any wait while"
                             " the expected session length is still its 120 s prior)")
    parser.add_argument("--json", default=None, help="write the figures here too")
    args = parser.parse_args()
    procs = Procs(Path(tempfile.mkdtemp(prefix="spb", dir="/tmp")))
    try:
        out = asyncio.run(asyncio.wait_for(bench(args, procs), 600))
    finally:
        procs.stop_all()
    for key, value in out.items():
        print(f"{key}: {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
