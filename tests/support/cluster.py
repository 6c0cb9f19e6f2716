"""A two-node cluster scenario, run INSIDE a private network namespace by
tests/cluster/test_cluster_ray.py (and benchmarks/cluster_*.py, which import its helpers).

Starts a Ray head (loopback), two ``speechpipe serve --cluster`` nodes on the scripted
pipeline (``tests/scripted_serve.py``: no models) with capacity 2, then real WebSocket
clients; records what every step observed into a JSON file for the test to check. Every wait
is bounded; every process started here is killed (by process group) in ``finally``. Not a test
module itself: pytest never collects it.

Usage: python tests/support/cluster.py OUT.json [--real-models]
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

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# ``speechpipe`` whose ``serve`` runs the tests' scripted pipeline (tests/scripted_serve.py)
SCRIPTED_SPEECHPIPE = [sys.executable, "-P", str(ROOT / "tests" / "scripted_serve.py")]
HEAD_PORT = 6390
PORTS = {"a": 8801, "b": 8802}
URL = {name: f"ws://127.0.0.1:{port}/ws" for name, port in PORTS.items()}
CAPACITY = 2


def log(*parts: object) -> None:
    print(f"[{time.strftime('%H:%M:%S')}]", *parts, file=sys.stderr, flush=True)


class Procs:
    """Processes started here, each in its own process group."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        out = open(self.logdir / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        self.procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True, cwd=ROOT,
                                            env={**os.environ, **(env or {})})

    def text(self, name: str) -> str:
        return (self.logdir / f"{name}.log").read_text(errors="replace")

    async def wait_for(self, name: str, needle: str, limit_s: float) -> None:
        deadline = time.monotonic() + limit_s
        while needle not in self.text(name):
            if self.procs[name].poll() is not None:
                raise RuntimeError(f"{name} exited: {self.text(name)[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name}: no {needle!r} in {limit_s} s: "
                                   f"{self.text(name)[-2000:]}")
            await asyncio.sleep(0.2)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs.get(name)
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.kill(name, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for name in list(self.procs):
            self.kill(name, signal.SIGKILL)
            self.procs[name].wait(5)


async def start_head(procs: Procs, attempts: int = 3) -> None:
    """``ray start --head`` on loopback; again if it times out starting (Ray waits 30 s for
    its raylet, which a saturated 2-core machine can miss)."""
    for attempt in range(1, attempts + 1):
        procs.start("head", [str(BIN / "ray"), "start", "--head", "--block",
                             f"--port={HEAD_PORT}", "--num-cpus=1", "--include-dashboard=false",
                             "--disable-usage-stats", "--node-ip-address=127.0.0.1",
                             f"--temp-dir={procs.logdir / f'ray{attempt}'}"])
        try:
            await procs.wait_for("head", "Ray runtime started", 120)
            return
        except (RuntimeError, TimeoutError):
            procs.kill("head")
            procs.procs["head"].wait(10)
            if attempt == attempts:
                raise
            log("ray head did not start; trying again")


class Client:
    """A real WebSocket client: ``start``, then (once started) 100 ms of audio every 100 ms."""

    def __init__(self, label: str, audio: np.ndarray | None = None) -> None:
        self.label = label
        self.audio = audio  # stream this (then 3 s of silence and ``stop``) instead of zeros
        self.audio_bytes = 0
        self.events: list[dict[str, Any]] = []
        self.close_code: int | None = None
        self.session: str | None = None
        self.url: str | None = None
        self.ws: ClientConnection | None = None
        self.outcome = asyncio.get_running_loop().create_future()
        self.task: asyncio.Task[None] | None = None
        self.targets = 0

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    def statuses(self, status: str) -> list[dict[str, Any]]:
        return [e for e in self.of("status") if e["status"] == status]

    async def open(self, url: str, **start: Any) -> None:
        self.url = url
        self.ws = await connect(url, open_timeout=10)
        await self.ws.send(json.dumps({"type": "start", "sample_rate": 16000,
                                       "client_id": self.label, **start}))
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        assert self.ws is not None
        sender: asyncio.Task[None] | None = None
        try:
            async for message in self.ws:
                if isinstance(message, bytes):
                    self.audio_bytes += len(message)
                    continue
                event = json.loads(message)
                self.events.append(event)
                if event["type"] in ("started", "status", "error"):
                    log(self.label, event["type"], event.get("status") or event.get("code"))
                if event["type"] == "started":
                    self.session = event["session"]
                    if not self.outcome.done():
                        self.outcome.set_result("started")
                    sender = asyncio.create_task(self._send_audio())
                elif event["type"] == "target":
                    self.targets += 1
        except ConnectionClosed:
            pass
        finally:
            if sender is not None:
                sender.cancel()
            self.close_code = self.ws.close_code
            if not self.outcome.done():
                self.outcome.set_result(f"closed {self.close_code}")

    async def _send_audio(self) -> None:
        assert self.ws is not None
        if self.audio is not None:
            await self._send_clip(self.audio)
            return
        chunk = np.zeros(1600, np.int16).tobytes()
        t0 = time.monotonic()
        for i in range(3000):  # at most 5 minutes
            await asyncio.sleep(max(0.0, t0 + i * 0.1 - time.monotonic()))
            try:
                await self.ws.send(chunk)
            except ConnectionClosed:
                return

    async def _send_clip(self, audio: np.ndarray) -> None:
        assert self.ws is not None
        padded = np.concatenate([audio, np.zeros(3 * 16000, np.int16)]).astype("<i2")
        t0 = time.monotonic()
        for i, offset in enumerate(range(0, len(padded), 320)):
            await asyncio.sleep(max(0.0, t0 + i * 0.02 - time.monotonic()))
            await self.ws.send(padded[offset:offset + 320].tobytes())
        await self.ws.send(json.dumps({"type": "stop"}))

    async def first(self, limit_s: float = 20.0) -> str:
        async with asyncio.timeout(limit_s):
            return await asyncio.shield(self.outcome)

    async def queued_position(self, limit_s: float = 10.0) -> int:
        deadline = time.monotonic() + limit_s
        while not self.statuses("queued"):
            if time.monotonic() > deadline or self.outcome.done():
                return 0
            await asyncio.sleep(0.05)
        return int(self.statuses("queued")[-1]["detail"]["position"])

    async def stop(self, limit_s: float = 10.0) -> None:
        assert self.ws is not None
        with _suppress():
            await self.ws.send(json.dumps({"type": "stop"}))
        async with asyncio.timeout(limit_s):
            assert self.task is not None
            await self.task

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self.task is not None:
            self.task.cancel()
            with _suppress():
                await self.task


class _suppress:  # noqa: N801 (a tiny contextlib.suppress for every exception)
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True


def redirect_of(client: Client) -> dict[str, Any] | None:
    errors = [e for e in client.of("error") if e["code"] == "redirect"]
    return errors[-1] if errors else None


async def follow(label: str, url: str, **start: Any) -> Client:
    """Connect; when redirected (4020), reconnect where told with the ticket (once)."""
    client = Client(label)
    await client.open(url, **start)
    await client.first()
    hop = redirect_of(client)
    if client.close_code == 4020 and hop is not None:
        moved = Client(label)
        moved.events = [*client.events]
        await moved.open(hop["url"], ticket=hop["ticket"], **start)
        await moved.first()
        return moved
    return client


async def snapshot(ledger: Any) -> dict[str, Any]:
    return (await epoch_snapshot(ledger))[1]


async def epoch_snapshot(ledger: Any) -> tuple[str, dict[str, Any]]:
    """The ledger's epoch (new after each restart) and its snapshot."""
    ref = ledger.snapshot.remote()
    epoch, snap = await asyncio.wait_for(asyncio.wrap_future(ref.future()), 15)
    return str(epoch), snap


async def until(check: Any, limit_s: float = 10.0, every_s: float = 0.1) -> bool:
    """Wait until ``await check()`` is true, at most ``limit_s``; whether it became true.
    The scenarios wait on conditions like this one, never on fixed sleeps."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            if await check():
                return True
        except Exception:  # noqa: BLE001 (a ledger restarting, a node not answering yet)
            pass
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(every_s)


async def restarted_ledger(ledger: Any, old_epoch: str, nodes: int,
                           limit_s: float = 30.0) -> dict[str, Any]:
    """The snapshot of the ledger restarted after ``old_epoch`` (a new epoch) once ``nodes``
    nodes have registered with it, or the latest one after ``limit_s``."""
    seen: dict[str, Any] = {}

    async def registered() -> bool:
        epoch, snap = await epoch_snapshot(ledger)
        seen.update(snap)
        return epoch != old_epoch and len(snap["nodes"]) == nodes

    await until(registered, limit_s, every_s=0.25)
    return seen if seen else await _snapshot_retry(ledger, 20)


async def metrics_showing(port: int, want: dict[str, float],
                          limit_s: float = 10.0) -> list[str]:
    """The node's cluster metrics once they show ``want`` (name -> value; the ledger's
    figures reach a node with its next heartbeat), or as they are after ``limit_s``."""
    lines: list[str] = []

    async def shown() -> bool:
        lines[:] = await asyncio.to_thread(_metrics, port)
        values = dict(line.rsplit(" ", 1) for line in lines)
        return all(name in values and float(values[name]) == value
                   for name, value in want.items())

    await until(shown, limit_s, every_s=0.2)
    return lines


def nodes_by_url(snap: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["url"]: n for n in snap["nodes"]}


async def scenario(out: dict[str, Any], procs: Procs) -> None:  # noqa: PLR0915
    import ray

    from speechpipe.cluster.ledger import ledger_handle

    await start_head(procs)
    address = f"127.0.0.1:{HEAD_PORT}"
    for name, port in PORTS.items():
        procs.start(name, [*SCRIPTED_SPEECHPIPE, "-v", "serve", "--no-webrtc", "--port", str(port),
                           "--capacity", str(CAPACITY),
                           "--max-queue", "3", "--max-queue-wait", "1000", "--cluster", address,
                           "--public-url", URL[name], "--cluster-lease", "3",
                           "--drain-deadline", "4"])
    for name in PORTS:
        await procs.wait_for(name, "joined the cluster", 120)
    ray.init(address=address, namespace="speechpipe", log_to_driver=False)
    ledger = ledger_handle(create=False)
    out["started"] = True
    clients: list[Client] = []
    try:
        log('step 0')
        await rooms_step(out, ledger)
        log('step 1')
        # 1. four sessions, all arriving at node a: two stay, two are redirected to b
        first4 = []
        for i in range(4):
            client = await follow(f"c{i + 1}", URL["a"])
            first4.append(client)
            clients.append(client)
        out["spread"] = [{"client": c.label, "outcome": await c.first(), "url": c.url,
                          "redirected": redirect_of(c) is not None,
                          "queued": bool(c.statuses("queued"))} for c in first4]
        snap = await snapshot(ledger)
        out["spread_nodes"] = {u: n["active"] for u, n in nodes_by_url(snap).items()}
        # a heartbeat brings the ledger's figures to the node
        out["metrics_b"] = await metrics_showing(PORTS["b"], {
            "speechpipe_cluster_ledger_reachable": 1, "speechpipe_cluster_capacity": 4,
            "speechpipe_cluster_node_sessions": 2,
            'speechpipe_cluster_sessions{state="active"}': 4})

        log('step 2')
        # 2. the 5th (at b) and 6th (at a) wait at positions 1 and 2; the 7th is refused
        c5, c6, c7 = Client("c5"), Client("c6"), Client("c7")
        clients += [c5, c6, c7]
        await c5.open(URL["b"])
        out["c5_position"] = await c5.queued_position()
        await c6.open(URL["a"])
        out["c6_position"] = await c6.queued_position()
        c6b = Client("c6b")  # the third place of the line (--max-queue 3)
        clients.append(c6b)
        await c6b.open(URL["b"])
        out["c6b_position"] = await c6b.queued_position()
        await c7.open(URL["a"])
        out["c7_outcome"] = await c7.first()
        refusal = [e for e in c7.of("error") if e["code"] == "over_capacity"]
        out["c7_retry_after_s"] = refusal[-1].get("retry_after_s") if refusal else None
        out["c5_wait_s"] = c5.statuses("queued")[-1]["detail"]["estimated_wait_s"] \
            if c5.statuses("queued") else None

        log('step 3')
        # 3. c1 (on a) ends: c5 (waiting on b) is redirected to a and starts there unqueued
        await first4[0].stop()
        out["c1_close"] = first4[0].close_code
        out["c5_first"] = await c5.first(15)
        hop = redirect_of(c5)
        out["c5_redirect"] = hop
        if hop is not None:
            moved = Client("c5")
            await moved.open(hop["url"], ticket=hop["ticket"])
            out["c5_moved"] = await moved.first(15)
            out["c5_moved_queued_again"] = bool(moved.statuses("queued"))
            out["c5_moved_url"] = moved.url
            clients.append(moved)
            c5 = moved
        out["c6_position_after"] = await _latest_position(c6)
        running = [first4[1], first4[2], first4[3], c5]

        log('step 4')
        # 4. the ledger is killed (Ray restarts it): no session dropped, no slot double-booked
        targets_before = {c.label: c.targets for c in running}
        old_epoch, _ = await epoch_snapshot(ledger)
        ray.kill(ledger, no_restart=False)
        # until both nodes have re-registered with the restarted ledger (a new epoch)
        snap = await restarted_ledger(ledger, old_epoch, nodes=2)
        out["after_ledger_restart"] = {
            "active": snap["active"], "capacity": snap["capacity"],
            "nodes": {u: n["active"] for u, n in nodes_by_url(snap).items()},
            "still_open": [c.label for c in running if not c.outcome.done()
                           or c.outcome.result() == "started" and c.close_code is None],
        }
        await until(lambda: _grew(running, targets_before))  # audio still flowing
        out["after_ledger_restart"]["targets_grew"] = [
            c.label for c in running if c.targets > targets_before[c.label]]
        c8 = Client("c8")
        clients.append(c8)
        await c8.open(URL["b"])
        out["c8_first_after_restart"] = await _first_or_queued(c8)
        for extra in (c6b, c8):  # make room in the line: resumes count against it too
            await extra.close()
        out["line_before_resumes"] = await _waiting_reaching(ledger, 1, limit_s=15.0)

        log('step 5')
        # 5. node b is killed mid-session: its clients see the connection drop, resume on a
        on_b = [c for c in running if c.url == URL["b"]]
        out["on_b"] = [c.label for c in on_b]
        procs.kill("b")
        for c in on_b:
            with _suppress():
                async with asyncio.timeout(10):
                    await c.task  # type: ignore[misc]
        out["b_close_codes"] = [c.close_code for c in on_b]
        resumed: list[Client] = []
        for c in on_b:
            again = Client(c.label)  # the same client (a resume is bound to its holder)
            await again.open(URL["a"], resume=c.session)
            resumed.append(again)
            clients.append(again)
        # within b's lease they wait behind c6; once b is counted lost they move ahead
        out["resume_positions"] = [await _position_falling(again, i + 1, limit_s=15.0)
                                   for i, again in enumerate(resumed)]
        out["c6_position_behind_resumes"] = await _position_reaching(c6, 3, limit_s=10.0)
        out["c6_positions"] = [e["detail"]["position"] for e in c6.statuses("queued")]
        async def b_lost() -> bool:  # b's lease (3 s) runs out: b counted lost
            node = nodes_by_url(await snapshot(ledger)).get(URL["b"])
            return node is not None and not node["alive"]

        await until(b_lost, 15.0, every_s=0.25)
        snap = await _snapshot_retry(ledger, 10)
        out["after_node_loss"] = {"lost": snap["lost"], "capacity": snap["capacity"],
                                  "nodes": {u: (n["alive"], n["active"])
                                            for u, n in nodes_by_url(snap).items()}}
        on_a = [c for c in running if c.url == URL["a"]]
        for c in on_a:  # free a's slots: the resumes come first
            await c.stop()
        out["resumed_outcomes"] = [await again.first(15) for again in resumed]
        out["c6_after_resumes"] = "started" if c6.outcome.done() and \
            c6.outcome.result() == "started" else f"position {await _latest_position(c6)}"
        snap = await _snapshot_retry(ledger, 10)
        out["accounting"] = {k: snap[k] for k in ("admitted", "ended", "lost", "active")}

        log('step 6')
        # 6. drain a: no new sessions; at the deadline (4 s) the rest get 4021 + resume
        drain = await asyncio.to_thread(
            subprocess.run, [str(BIN / "speechpipe"), "cluster", "drain", URL["a"], "--cluster",
                             address], capture_output=True, text=True, timeout=60, cwd=ROOT)
        out["drain_rc"] = drain.returncode
        out["drain_err"] = drain.stderr[-500:]
        on_a_now = [c for c in resumed if c.outcome.done() and c.outcome.result() == "started"]
        for c in on_a_now:
            with _suppress():
                async with asyncio.timeout(15):
                    await c.task  # type: ignore[misc]
        out["drained_close"] = [(c.close_code, [e for e in c.of("error")
                                                if e["code"] == "node_drained"][-1:])
                                for c in on_a_now]
        try:
            out["a_exit"] = await asyncio.wait_for(asyncio.to_thread(procs.procs["a"].wait), 20)
        except TimeoutError:
            out["a_exit"] = None
        status = await asyncio.to_thread(
            subprocess.run, [str(BIN / "speechpipe"), "cluster", "status", "--cluster", address],
            capture_output=True, text=True, timeout=60, cwd=ROOT)
        out["status_rc"] = status.returncode
        out["status_text"] = status.stdout
    finally:
        for client in clients:
            with _suppress():
                await asyncio.wait_for(client.close(), 5)
        ray.shutdown()


async def rooms_step(out: dict[str, Any], ledger: Any) -> None:
    """0. a room opened on node a; a listener reaching node b is redirected to a and hears
    the speaker; ``cluster status`` lists the room (without its id); it ends with its
    members (the speaker's slot is free again for step 1)."""
    from speechpipe.cluster.cli import format_status

    speaker = Client("room-speaker")
    await speaker.open(URL["a"], role="speaker")
    out["room_speaker"] = await speaker.first()
    room = speaker.of("started")[0]["room"]
    await _until(lambda snap: bool(snap.get("rooms")), ledger)
    snap = await snapshot(ledger)
    out["room_status"] = format_status(snap)
    out["room_id_in_status"] = room in json.dumps(snap)
    listener = Client("room-listener")
    await listener.open(URL["b"], role="listener", room=room)
    out["room_listener_first"] = await listener.first()
    hop = redirect_of(listener)
    out["room_redirect_url"] = hop["url"] if hop else None
    moved = Client("room-listener")
    await moved.open(hop["url"] if hop else URL["a"], role="listener", room=room)
    out["room_listener_moved"] = await moved.first()
    for _ in range(150):  # 15 s at most
        if moved.targets:
            break
        await asyncio.sleep(0.1)
    out["room_listener_targets"] = moved.targets
    out["room_listener_speaker"] = {e.get("speaker") for e in moved.of("target")} == {
        speaker.session}
    await moved.stop()
    await speaker.stop()
    out["room_closes"] = [speaker.close_code, moved.close_code]
    await _until(lambda snap: not snap.get("rooms"), ledger)
    out["room_gone"] = not (await snapshot(ledger)).get("rooms")
    await _until(lambda snap: not snap["active"], ledger)


async def _until(done: Any, ledger: Any, limit_s: float = 15.0) -> None:
    """Poll the ledger's snapshot (bounded) until ``done(snapshot)``."""
    for _ in range(int(limit_s / 0.2)):
        if done(await snapshot(ledger)):
            return
        await asyncio.sleep(0.2)


def _text(client: Client, side: str) -> str:
    """The last hypothesis of each utterance, committed + tentative, in order."""
    final: dict[int, str] = {}
    for e in client.of(side):
        final[e["utterance"]] = " ".join(p for p in (e["committed"], e["tentative"]) if p)
    return " ".join(final[k] for k in sorted(final))


def _metrics(port: int) -> list[str]:
    """The cluster lines of a node's /metrics (loopback inside the namespace)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return [line for line in text.splitlines() if line.startswith("speechpipe_cluster_")]


async def _grew(running: list[Client], before: dict[str, int]) -> bool:
    return all(c.targets > before[c.label] for c in running)


async def _latest_position(client: Client, after: float = 0.6) -> int:
    await asyncio.sleep(after)
    queued = client.statuses("queued")
    return int(queued[-1]["detail"]["position"]) if queued else 0


async def _position_reaching(client: Client, at_least: int, limit_s: float) -> int:
    """The client's latest queue position, once it is ``at_least`` or ``limit_s`` has passed
    (status updates arrive on the server's schedule, later on a loaded machine)."""
    deadline = time.monotonic() + limit_s
    position = 0
    while time.monotonic() < deadline:
        queued = client.statuses("queued")
        position = int(queued[-1]["detail"]["position"]) if queued else 0
        if position >= at_least:
            break
        await asyncio.sleep(0.1)
    return position


async def _waiting_reaching(ledger: Any, count: int, limit_s: float) -> int:
    """The ledger's line length, once it is ``count`` (or ``limit_s`` has passed)."""
    deadline = time.monotonic() + limit_s
    waiting = -1
    while time.monotonic() < deadline:
        waiting = int((await _snapshot_retry(ledger, 10))["waiting"])
        if waiting == count:
            break
        await asyncio.sleep(0.2)
    return waiting


async def _position_falling(client: Client, at_most: int, limit_s: float) -> int:
    """The client's latest queue position, once it is ``at_most`` or less (or ``limit_s``
    has passed)."""
    deadline = time.monotonic() + limit_s
    position = 0
    while time.monotonic() < deadline:
        queued = client.statuses("queued")
        position = int(queued[-1]["detail"]["position"]) if queued else 0
        if 0 < position <= at_most:
            break
        await asyncio.sleep(0.1)
    return position


async def _first_or_queued(client: Client, limit_s: float = 10.0) -> str:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if client.outcome.done():
            return client.outcome.result()
        if client.statuses("queued"):
            return "queued"
        await asyncio.sleep(0.05)
    return "nothing"


async def _snapshot_retry(ledger: Any, limit_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + limit_s
    while True:
        try:
            return await snapshot(ledger)
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def real_scenario(out: dict[str, Any], procs: Procs) -> None:
    """One session per node with the real models: a real Spanish recording in, English out."""
    import soundfile as sf

    clip = ROOT.parent / "shared" / "samples" / "wav" / "es_enh_12411_cv.wav"
    audio, rate = sf.read(clip, dtype="int16")
    assert rate == 16000 and audio.ndim == 1
    await start_head(procs)
    address = f"127.0.0.1:{HEAD_PORT}"
    for name, port in PORTS.items():
        procs.start(name, [str(BIN / "speechpipe"), "-v", "serve", "--no-webrtc", "--port",
                           str(port), "--capacity", "1", "--cluster", address,
                           "--public-url", URL[name]])
    for name in PORTS:
        await procs.wait_for(name, "joined the cluster", 300)
    out["started"] = True
    start = {"source_lang": "es"}
    first = Client("r1", audio)
    await first.open(URL["a"], **start)
    out["r1_first"] = await first.first(60)
    second = Client("r2", audio)
    await second.open(URL["a"], **start)  # a is full: redirected to b
    out["r2_first"] = await second.first(60)
    hop = redirect_of(second)
    moved = second
    if hop is not None:
        moved = Client("r2", audio)
        await moved.open(hop["url"], ticket=hop["ticket"], **start)
        out["r2_moved"] = await moved.first(60)
    for client in (first, moved):
        async with asyncio.timeout(120):
            assert client.task is not None
            await client.task
    out["real"] = [{"url": c.url, "close": c.close_code, "audio_bytes": c.audio_bytes,
                    "target": _text(c, "target")}
                   for c in (first, moved)]


def main() -> int:
    out_path = Path(sys.argv[1])
    real = "--real-models" in sys.argv[2:]
    out: dict[str, Any] = {"started": False}
    logdir = Path(tempfile.mkdtemp(prefix="spc", dir="/tmp"))
    out["logdir"] = str(logdir)
    procs = Procs(logdir)
    try:
        run = real_scenario if real else scenario
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
