"""The attacks of issue 21 (items 1-7) on a real two-node cluster, run INSIDE a private network
namespace by tests/cluster/test_cluster_attacks.py.

Like ``cluster.py`` (whose helpers it uses): a Ray head on loopback, two
``speechpipe serve --cluster`` nodes on the scripted pipeline of capacity 1, real WebSocket
clients with real signed session tokens; it records what each attack observed into a JSON
file for the test to check. Every wait is bounded; every process is killed in ``finally``.

Usage: python tests/support/cluster_attacks.py OUT.json admission|ledger
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cluster as base  # noqa: E402
from cluster import (  # noqa: E402
    BIN,
    HEAD_PORT,
    SCRIPTED_SPEECHPIPE,
    Client,
    Procs,
    _first_or_queued,
    _metrics,
    _position_reaching,
    _snapshot_retry,
    _suppress,
    epoch_snapshot,
    log,
    redirect_of,
    snapshot,
    start_head,
)

PORTS = {"a": 8811, "b": 8812}
URL = {name: f"ws://127.0.0.1:{port}/ws" for name, port in PORTS.items()}
URL_C = "ws://127.0.0.1:8813/ws"  # a third node, capacity 2, only for the ticket attack
CLUSTER_SECRET = "the-cluster-secret-of-this-test"
AUTH_SECRET = "a" * 48  # the session tokens' signing secret (>= 32 bytes)


class Tokens:
    """Real signed session tokens, a new one (a new per-token key) for each holder."""

    def __init__(self) -> None:
        from speechpipe.transport.auth import TokenAuthority

        self.authority = TokenAuthority(AUTH_SECRET)

    def new(self) -> str:
        return self.authority.issue(ttl_s=900)


def node_env(secret: str = CLUSTER_SECRET) -> dict[str, str]:
    return {"SPEECHPIPE_CLUSTER_SECRET": secret, "SPEECHPIPE_AUTH_SECRET": AUTH_SECRET}


def start_node(procs: Procs, name: str, port: int, url: str, *extra: str,
               secret: str = CLUSTER_SECRET) -> None:
    procs.start(name, [*SCRIPTED_SPEECHPIPE, "-v", "serve", "--no-webrtc", "--port", str(port),
                       "--capacity", "1",
                       "--cluster", f"127.0.0.1:{HEAD_PORT}", "--public-url", url,
                       "--cluster-lease", "3", *extra], env=node_env(secret))


async def opened(label: str, url: str, token: str, **start: Any) -> Client:
    client = Client(label)
    await client.open(url, token=token, **start)
    return client


async def node_sessions(port: int) -> float:
    lines = await asyncio.to_thread(_metrics, port)
    found = [line for line in lines if line.startswith("speechpipe_cluster_node_sessions ")]
    return float(found[0].rsplit(" ", 1)[1]) if found else -1.0


async def settle(check: Any, limit_s: float = 10.0) -> bool:
    """Wait (bounded) until ``await check()`` is true; whether it became true."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(0.2)
    return False


async def _waits_under(ledger: Any, places: int, limit_s: float) -> bool:
    """Whether the ledger's own estimate of the wait at line position ``places`` (the last of
    the next ``places`` arrivals) is under ``limit_s``, read on the actor."""
    ref = ledger.__ray_call__.remote(
        lambda service, n: service.core.estimated_wait(n, service._now()), places)
    wait = await asyncio.wait_for(asyncio.wrap_future(ref.future()), 10)
    return bool(wait < limit_s)


# ------------------------------------------------------------------------- part 1: admission
async def admission(out: dict[str, Any], procs: Procs) -> None:  # noqa: PLR0915
    import ray

    from speechpipe.cluster.ledger import ledger_handle

    await start_head(procs)
    flags = ("--max-queue", "3", "--max-queue-wait", "1000", "--max-sessions-per-token", "1",
             "--set", "admission.expected_session_s=1")
    for name, port in PORTS.items():
        start_node(procs, name, port, URL[name], *flags)
    for name in PORTS:
        await procs.wait_for(name, "joined the cluster", 120)
    ray.init(address=f"127.0.0.1:{HEAD_PORT}", namespace="speechpipe", log_to_driver=False)
    ledger = ledger_handle(create=False)
    tokens = Tokens()
    out["started"] = True
    clients: list[Client] = []
    try:
        log("item 6: rogue registrations")
        # a driver without the secret registers a node of capacity 50, then one with a wrong
        # secret's tag; then a node process with a wrong secret tries to join
        from speechpipe.cluster.ledger import sign

        rogue = ("rogue", "ws://127.0.0.1:8819/ws", 50, [])
        answers = []
        for tag in ("", sign("not-the-secret", "register", rogue)):
            epoch, _ = await asyncio.wait_for(
                asyncio.wrap_future(ledger.register.remote(tag, *rogue).future()), 15)
            answers.append(epoch)
        out["rogue_register_answers"] = answers
        start_node(procs, "rogue", 8819, "ws://127.0.0.1:8819/ws", secret="not-the-secret")
        try:
            out["rogue_node_rc"] = await asyncio.wait_for(
                asyncio.to_thread(procs.procs["rogue"].wait), 120)
        except TimeoutError:
            out["rogue_node_rc"] = None
        out["rogue_node_err"] = [line for line in procs.text("rogue").splitlines()
                                 if line.startswith("speechpipe: ")][-1:]
        snap = await snapshot(ledger)
        out["nodes_after_rogues"] = sorted(n["url"] for n in snap["nodes"])
        out["ledger_signed"] = snap["signed"]

        log("item 1: waiters that vanish at their turn")
        h1 = await opened("h1", URL["a"], tokens.new())
        clients.append(h1)
        await h1.first()
        h2 = await base.follow("h2", URL["a"], token=tokens.new())
        clients.append(h2)
        out["vanish_setup"] = [await h1.first(), await h2.first(), h2.url]
        rounds = []
        for holder, node in ((h1, "a"), (h2, "b")):
            waiter = await opened(f"w-{node}", URL[node], tokens.new())
            position = await waiter.queued_position()
            await waiter.close()  # gone while waiting: its turn comes right after
            await holder.stop()
            turn = await settle(lambda: _turn_over(ledger))  # the waiter's turn came, went
            # the node's next heartbeat brings the figures to /metrics
            freed = await settle(lambda port=PORTS[node]: _zero(port), 10.0)
            snap = await _snapshot_retry(ledger, 10)
            rounds.append({"position": position, "turn_over": turn, "node_freed": freed,
                           "node_sessions": await node_sessions(PORTS[node]),
                           "ledger": {k: snap[k] for k in ("active", "reserved", "waiting")}})
            if node == "a":  # refill a for the second round, on b
                h1_token = tokens.new()
                again = await opened("h1b", URL["a"], h1_token)
                clients.append(again)
                rounds[-1]["refill"] = await outcome(again)
                h1 = again
        out["vanish_rounds"] = rounds
        fair = await opened("fair", URL["b"], tokens.new())
        clients.append(fair)
        out["fair_after_vanish"] = await _first_or_queued(fair)

        log("item 2: reused tickets")
        with _suppress():
            await fair.stop()  # b is free; a holds h1b
        # an active session's id as start.ticket, on a node with room (c: capacity 2)
        procs.start("c", [*SCRIPTED_SPEECHPIPE, "-v", "serve", "--no-webrtc", "--port", "8813",
                          "--capacity", "2", "--cluster",
                          f"127.0.0.1:{HEAD_PORT}", "--public-url", URL_C, "--cluster-lease",
                          "3", *flags], env=node_env())
        await procs.wait_for("c", "joined the cluster", 120)
        owner_c = await opened("owner-c", URL_C, tokens.new())
        clients.append(owner_c)
        out["owner_c"] = await outcome(owner_c)
        reusers = await asyncio.gather(*[
            opened(f"reuse{i}", URL_C, tokens.new(), ticket=owner_c.session)
            for i in range(4)])
        clients += reusers
        await asyncio.gather(*[_first_or_queued(c) for c in reusers])
        out["reuse_sessions"] = [c.session for c in reusers]
        out["reuse_same_id"] = sum(1 for c in reusers if c.session == owner_c.session)
        out["reuse_started"] = sum(1 for c in reusers if c.session is not None)
        for c in [owner_c, *reusers]:
            with _suppress():
                await asyncio.wait_for(c.close(), 5)
        procs.kill("c", signal.SIGTERM)  # c leaves the cluster
        with _suppress():
            await asyncio.wait_for(asyncio.to_thread(procs.procs["c"].wait), 30)
        # one redirect ticket, claimed by 6 connections at once
        hopper = Client("hopper")
        clients.append(hopper)
        await hopper.open(URL["a"], token=tokens.new())
        out["hop_first"] = await outcome(hopper)
        hop = redirect_of(hopper)
        ticket = hop["ticket"] if hop else ""
        claimers = await asyncio.gather(*[
            opened(f"claim{i}", URL["b"], tokens.new(), ticket=ticket) for i in range(6)])
        clients += claimers
        out["claim_outcomes"] = list(await asyncio.gather(
            *[_first_or_queued(c) for c in claimers]))
        out["claim_sessions_with_the_ticket"] = sum(1 for c in claimers if c.session == ticket)
        async def reused_once() -> bool:  # the nodes' heartbeats bring the figures to /metrics
            return bool((await snapshot(ledger))["active"] == 2
                        and await node_sessions(PORTS["a"]) == 1
                        and await node_sessions(PORTS["b"]) == 1)

        await settle(reused_once)
        snap = await _snapshot_retry(ledger, 10)
        out["after_reuse"] = {"ledger_active": snap["active"],
                              "a": await node_sessions(PORTS["a"]),
                              "b": await node_sessions(PORTS["b"])}
        for c in claimers:
            with _suppress():
                await asyncio.wait_for(c.close(), 5)
        await settle(lambda: _zero(PORTS["b"]))

        log("items 3 and 4: resuming one's own live session")
        filler = await opened("filler", URL["b"], tokens.new())
        clients.append(filler)
        out["filler"] = await outcome(filler)
        waiter = await opened("waiter", URL["b"], tokens.new())
        clients.append(waiter)
        out["waiter_position"] = await waiter.queued_position()
        resumes = []
        for _ in range(20):
            again = await opened(h1.label, URL["b"], h1_token, resume=h1.session)
            clients.append(again)
            resumes.append(again)
            await _first_or_queued(again, 5)
        out["resume_outcomes"] = [("queued" if c.statuses("queued") else c.outcome.result()
                                   if c.outcome.done() else "nothing") for c in resumes]
        out["resume_codes"] = sorted({e["code"] for c in resumes for e in c.of("error")})
        out["waiter_position_after"] = await _position_reaching(waiter, 99, limit_s=2.5)
        snap = await _snapshot_retry(ledger, 10)
        out["line_after_resumes"] = snap["line"]
        with _suppress():
            await filler.stop()  # a slot on b: the fair waiter goes first
        out["waiter_outcome"] = await outcome(waiter, 15)
        with _suppress():
            await waiter.stop()  # b is free again; h1b still runs on a
        pending = [c for c in resumes if not c.outcome.done()]
        # a pending resume must not start while h1b runs: watched for 3 s, over at the first
        await settle(lambda: _any_started(resumes), 3.0)
        out["resumes_started_while_live"] = sum(
            1 for c in resumes if c.outcome.done() and c.outcome.result() == "started")
        out["pending_resumes"] = len(pending)
        for c in resumes:
            with _suppress():
                await asyncio.wait_for(c.close(), 5)
        out["line_cleared"] = await settle(lambda: _line_empty(ledger))  # their places freed

        log("item 5: a lost session's resume, taken by someone else")
        filler2 = await opened("filler2", URL["b"], tokens.new())
        clients.append(filler2)
        out["filler2"] = await outcome(filler2)
        first_in_line = await opened("first", URL["b"], tokens.new())
        clients.append(first_in_line)
        out["first_position"] = await first_in_line.queued_position()
        before_kill = await _snapshot_retry(ledger, 10)
        out["lost_before_kill"] = before_kill["lost"]  # earlier steps may have lost some
        procs.kill("a")  # h1b's node dies
        with _suppress():
            async with asyncio.timeout(10):
                await h1.task  # type: ignore[misc]
        thief = await opened("thief", URL["b"], tokens.new(), resume=h1.session)
        clients.append(thief)
        out["thief_position"] = await thief.queued_position()
        owner = await opened(h1.label, URL["b"], h1_token, resume=h1.session)
        clients.append(owner)
        await owner.queued_position()
        out["owner_position"] = await _position_reaching_down(owner, 1, limit_s=15)
        # (their status events follow on the server's schedule: wait for them, bounded)
        out["first_position_after"] = await _position_reaching(first_in_line, 2, limit_s=5)
        out["thief_position_after"] = await _position_reaching(thief, 3, limit_s=5)
        snap = await _snapshot_retry(ledger, 10)
        out["accounting"] = {k: snap[k] for k in ("admitted", "ended", "lost", "active",
                                                  "resumed")}
    finally:
        for client in clients:
            with _suppress():
                await asyncio.wait_for(client.close(), 5)
        ray.shutdown()


# ---------------------------------------------------------------------------- part 2: ledger
async def ledger_faults(out: dict[str, Any], procs: Procs) -> None:
    import ray

    from speechpipe.cluster.ledger import ledger_handle

    await start_head(procs)
    # the wait estimate matters here: sessions expected to last 20 s, waits over 15 s refused
    flags = ("--max-queue", "4", "--max-queue-wait", "15",
             "--set", "admission.expected_session_s=20")
    for name, port in PORTS.items():
        start_node(procs, name, port, URL[name], *flags)
    for name in PORTS:
        await procs.wait_for(name, "joined the cluster", 120)
    ray.init(address=f"127.0.0.1:{HEAD_PORT}", namespace="speechpipe", log_to_driver=False)
    ledger = ledger_handle(create=False)
    tokens = Tokens()
    out["started"] = True
    clients: list[Client] = []
    try:
        log("item 7: waiters across a ledger restart")
        h1 = await opened("h1", URL["a"], tokens.new())
        clients.append(h1)
        await h1.first()
        h2 = await base.follow("h2", URL["a"], token=tokens.new())
        clients.append(h2)
        out["holders"] = [await h1.first(), await h2.first(), h2.url]
        # the sessions age until the ledger would put two waiters in line: a wait of 20 s
        # less their age is under 15 s past 5 s; 1 s to spare for the ages the nodes report
        # to the restarted ledger below (bounded, not a fixed sleep)
        out["aged"] = await settle(lambda: _waits_under(ledger, 2, 14.0), 20.0)
        # w1 is in line before w2 asks: the two nodes reach the ledger in their own time,
        # so opening both at once left their order to chance (w2 first in one CI run)
        w1 = await opened("w1", URL["a"], tokens.new())
        clients.append(w1)
        first = await w1.queued_position()
        w2 = await opened("w2", URL["b"], tokens.new())
        clients.append(w2)
        out["waiters_before"] = [first, await w2.queued_position()]
        old_epoch, _ = await epoch_snapshot(ledger)
        ray.kill(ledger, no_restart=False)  # Ray restarts it, empty, with a new epoch

        async def rebuilt() -> bool:  # the nodes re-registered and their waiters asked again
            try:
                epoch, snap = await epoch_snapshot(ledger)
            except Exception:  # noqa: BLE001 (restarting)
                return False
            return (epoch != old_epoch and snap["active"] == 2 and snap["waiting"] == 2
                    and len(snap["nodes"]) == 2)

        out["restart_settled"] = await settle(rebuilt, 27.0)  # bounded, not a fixed sleep
        out["waiters_after_restart"] = [
            c.outcome.result() if c.outcome.done() else "waiting" for c in (w1, w2)]
        out["waiter_codes"] = sorted({e["code"] for c in (w1, w2) for e in c.of("error")})
        snap = await _snapshot_retry(ledger, 15)
        out["restarted"] = {"active": snap["active"], "waiting": snap["waiting"],
                            "nodes": len(snap["nodes"])}
        await h1.stop()
        out["w1_after_h1"] = await w1.first(15)

        log("item 7: the ledger gone for good")
        ray.kill(ledger, no_restart=True)
        recreated = None
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            await asyncio.sleep(0.25)
            try:
                fresh = ledger_handle(create=False)
                snap = await snapshot(fresh)
            except Exception:  # noqa: BLE001 (not there yet)
                continue
            if len(snap["nodes"]) == 2 and snap["active"] == 2:
                recreated = snap
                break
        out["recreated"] = None if recreated is None else {
            "nodes": len(recreated["nodes"]), "active": recreated["active"],
            "signed": recreated["signed"]}
        await settle(lambda: _metric_is(PORTS["b"], "speechpipe_cluster_capacity", 2.0))
        metrics = dict(line.rsplit(" ", 1) for line in await asyncio.to_thread(
            _metrics, PORTS["b"]))
        out["b_metrics_after"] = {k: metrics.get(k) for k in (
            "speechpipe_cluster_ledger_reachable", "speechpipe_cluster_capacity",
            'speechpipe_cluster_sessions{state="active"}')}

        log("item 6: `cluster drain` signs its call")
        drains = []
        for secret in ("", CLUSTER_SECRET):
            env = {k: v for k, v in os.environ.items() if k != "SPEECHPIPE_CLUSTER_SECRET"}
            if secret:
                env["SPEECHPIPE_CLUSTER_SECRET"] = secret
            done = await asyncio.to_thread(
                subprocess.run, [str(BIN / "speechpipe"), "cluster", "drain", URL["b"],
                                 "--cluster", f"127.0.0.1:{HEAD_PORT}"],
                capture_output=True, text=True, timeout=60, env=env)
            drains.append([done.returncode, done.stderr.strip().splitlines()[-1:]])
            if not secret:
                snap = await snapshot(ledger_handle(create=False))
                drains[-1].append([n["draining"] for n in snap["nodes"]])
        out["drains"] = drains
    finally:
        for client in clients:
            with _suppress():
                await asyncio.wait_for(client.close(), 5)
        ray.shutdown()


async def outcome(client: Client, limit_s: float = 20.0) -> str:
    """``started``, ``closed CODE``, or ``nothing`` within ``limit_s`` (never raises, so a
    regression shows as a failed check, not as a scenario that stops half-way)."""
    try:
        return await client.first(limit_s)
    except TimeoutError:
        return "nothing"


async def _turn_over(ledger: Any) -> bool:
    snap = await snapshot(ledger)
    return bool(snap["reserved"] == 0 and snap["waiting"] == 0)


async def _line_empty(ledger: Any) -> bool:
    return bool((await snapshot(ledger))["waiting"] == 0)


async def _metric_is(port: int, name: str, value: float) -> bool:
    lines = await asyncio.to_thread(_metrics, port)
    return any(line == f"{name} {value}" for line in lines)


async def _any_started(clients: list[Client]) -> bool:
    return any(c.outcome.done() and c.outcome.result() == "started" for c in clients)


async def _zero(port: int) -> bool:
    return await node_sessions(port) == 0


async def _latest(client: Client) -> int:
    queued = client.statuses("queued")
    return int(queued[-1]["detail"]["position"]) if queued else 0


async def _position_reaching_down(client: Client, at_most: int, limit_s: float) -> int:
    deadline = time.monotonic() + limit_s
    position = 0
    while time.monotonic() < deadline:
        position = await _latest(client)
        if 0 < position <= at_most or client.outcome.done():
            break
        await asyncio.sleep(0.1)
    return position


def main() -> int:
    out_path, part = Path(sys.argv[1]), sys.argv[2]
    out: dict[str, Any] = {"started": False}
    logdir = Path(tempfile.mkdtemp(prefix="spa", dir="/tmp"))
    out["logdir"] = str(logdir)
    procs = Procs(logdir)
    os.environ.pop("SPEECHPIPE_CLUSTER_SECRET", None)  # this driver is the rogue
    try:
        run = admission if part == "admission" else ledger_faults
        asyncio.run(asyncio.wait_for(run(out, procs), 600))
    except BaseException as exc:  # recorded for the test, which fails with it
        out["error"] = f"{type(exc).__name__}: {exc}"
        log("scenario failed:", out["error"])
    finally:
        procs.stop_all()
        out["logs"] = {name: procs.text(name)[-3000:] for name in procs.procs}
        out_path.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

