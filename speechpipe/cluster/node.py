"""One speech node's link to the cluster: Ray connection, heartbeat lease, admission gate.

A node is the ``speechpipe serve`` process itself, connected to Ray as a driver
(``ray.init(address=HEAD:PORT)``): the audio path stays inside the process; only control
calls go to the ledger actor (``speechpipe.cluster.ledger``). ``ClusterNode.gate`` implements
the server's ``CapacityGate``:

- a new client: the ledger places it here (the session starts), on another node (close
  **4020** with that node's URL and a ticket; the client reconnects there with
  ``start.ticket`` and is not queued again), in the line (``queued`` status events with the
  cluster-wide position and wait), or refuses it (close 1013 with ``retry_after_s``);
- ``start.resume``: the session id of a session whose node was lost or drained; it goes
  ahead of the line (once, for the session's own client or token: ``ledger_core``);
- **ledger unreachable** (a call fails or times out): the node admits only up to its own
  capacity, tells the client so in a ``status`` event, shows it in ``/metrics``
  (``speechpipe_cluster_ledger_reachable 0``; the cluster-wide gauges are dropped until the
  ledger answers, not left at their last value), looks the ledger up again by name (creating
  it when it is gone for good) and re-registers what it holds when the ledger answers again.

The node never holds more than ``capacity`` sessions, whatever the ledger says: its own
count (sessions held plus claims in flight) is checked before every claim, so a slot cannot
be double-booked even across a ledger restart. A slot taken is always given back: every
path from "admitted" ends in ``release`` (the session ended) or in the node's loss.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import math
import os
import secrets
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from speechpipe.cluster.ledger_core import LedgerOptions, Verdict
from speechpipe.cluster.options import ClusterSettings
from speechpipe.errors import AdmissionError, SessionRedirect
from speechpipe.stages.frames import StatusEvent

__all__ = ["ClusterOptions", "ClusterNode", "ClusterGate", "LedgerUnreachable", "connect_ray"]

log = logging.getLogger("speechpipe.cluster")

Notify = Callable[[StatusEvent], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    """How this node joins the cluster: Ray head, public URL, capacity, timings."""
    address: str  # Ray head, HOST:PORT
    public_url: str  # where clients reach this node's /ws (sent in redirects)
    capacity: int
    node_id: str = ""  # default: the public URL
    heartbeat_s: float = 1.0
    call_timeout_s: float = 5.0
    poll_s: float = 0.5  # a waiting client's ticket is asked about this often
    status_interval_s: float = 2.0  # a waiting client hears at least this often
    drain_deadline_s: float = ClusterSettings().drain_deadline_s  # then close the rest (4021)
    ledger: LedgerOptions = field(default_factory=LedgerOptions)
    secret: str = field(default="", repr=False)  # the cluster secret (SPEECHPIPE_CLUSTER_SECRET)

    @property
    def name(self) -> str:
        """The node's id in the ledger (``node_id``, else the public URL)."""
        return self.node_id or self.public_url


class LedgerUnreachable(Exception):
    """A call to the ledger failed or timed out."""
    pass


class LedgerRefused(LedgerUnreachable):
    """The ledger refused a call: it was not signed with the ledger's cluster secret."""
    pass


def cluster_secret() -> str:
    """The cluster secret from ``SPEECHPIPE_CLUSTER_SECRET`` ("" when unset)."""
    from speechpipe.cluster.ledger import SECRET_ENV

    return os.environ.get(SECRET_ENV, "").strip()


def connect_ray(address: str) -> None:
    """Join the Ray cluster at ``address`` as a driver (idempotent); raises ``SystemExit``
    with one line when Ray is not installed."""
    try:
        import ray
    except ImportError:
        raise SystemExit(
            "speechpipe: --cluster needs Ray: pip install 'speechpipe[cluster]'") from None
    from speechpipe.cluster.ledger import NAMESPACE

    if not ray.is_initialized():
        _check_reachable(address)  # Ray itself retries a missing head for minutes
        try:
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=False,
                     logging_level=logging.WARNING, configure_logging=False)
        except Exception as exc:  # ConnectionError, a bad address, a version mismatch ...
            raise SystemExit(f"speechpipe: cannot join the Ray cluster at {address}: "
                             f"{str(exc).splitlines()[0][:200]}") from None


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    import socket

    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except (OSError, ValueError) as exc:
        raise SystemExit(f"speechpipe: cannot reach the Ray head at {address}: "
                         f"{exc.__class__.__name__}") from None


class ClusterNode:
    """This server's membership in the cluster: registration, heartbeat, held sessions."""
    def __init__(self, options: ClusterOptions, *, registry: Any = None) -> None:
        self.options = options
        self.held: dict[str, tuple[str, str, float]] = {}  # ticket -> (client, token, since)
        self.claiming: set[str] = set()  # claims in flight (counted against the capacity)
        self.handle: Any = None
        self.epoch: str | None = None
        self.reachable = False
        self.draining = False
        self.snapshot: dict[str, Any] = {}
        self.gate = ClusterGate(self)
        self._task: asyncio.Task[None] | None = None
        self._stale = False  # a call failed since the last registration
        self._drained = asyncio.Event()
        self._metrics = _ClusterMetrics(registry) if registry is not None else None
        self._lookup: asyncio.Future[Any] | None = None  # a ledger look-up in flight
        # rooms: this node's rooms and their counts (the server's RoomRegistry.report)
        self.rooms_report: Callable[[], dict[str, dict[str, int]]] | None = None

    # -- life -------------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect to Ray, find (or create) the ledger, register; then heartbeat."""
        from speechpipe.cluster.ledger import ledger_handle

        connect_ray(self.options.address)
        self.handle = ledger_handle(self.options.ledger, secret=self.options.secret)
        for attempt in range(10):  # the ledger may still be starting (bounded)
            try:
                await self._register()
                break
            except LedgerRefused:
                raise SystemExit("speechpipe: the cluster ledger refused this node: its "
                                 "SPEECHPIPE_CLUSTER_SECRET differs from the ledger's") from None
            except LedgerUnreachable:
                if attempt == 9:
                    raise SystemExit("speechpipe: the cluster ledger does not answer") from None
                await asyncio.sleep(1.0)
        self._task = asyncio.create_task(self._heartbeat_loop(), name="cluster-heartbeat")

    async def stop(self) -> None:
        """Leave the cluster (sessions still here count as lost, resumable elsewhere)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with contextlib.suppress(LedgerUnreachable):  # bounded: stopping must not wait long
            await self.call("leave", self.options.name,
                            timeout_s=min(self.options.call_timeout_s, 2.0))

    # -- ledger calls -----------------------------------------------------------------------
    async def call(self, method: str, *args: Any, timeout_s: float | None = None) -> Any:
        """One ledger call; re-registers first after an outage, and again when the ledger
        restarted meanwhile (a new epoch). Raises ``LedgerUnreachable`` on failure or
        timeout (``LedgerRefused`` when the ledger refuses this node's secret)."""
        if self._stale and method != "register":
            await self._register()  # sessions admitted meanwhile, before anything else
        epoch, result = await self._raw(method, *args, timeout_s=timeout_s)
        if epoch != self.epoch and method != "register":
            log.warning("ledger restarted (epoch %s -> %s): re-registering", self.epoch, epoch)
            await self._register()
            epoch, result = await self._raw(method, *args, timeout_s=timeout_s)
        return result

    async def _raw(self, method: str, *args: Any,
                   timeout_s: float | None = None) -> tuple[str, Any]:
        from speechpipe.cluster.ledger import SIGNED, UNAUTHORIZED, sign

        try:
            tag = (sign(self.options.secret, method, args),) if method in SIGNED else ()
            ref = getattr(self.handle, method).remote(*tag, *args)
            async with asyncio.timeout(timeout_s or self.options.call_timeout_s):
                epoch, result = await asyncio.wrap_future(ref.future())
        except (TimeoutError, Exception) as exc:  # RayActorError, GetTimeoutError, ...
            if self.reachable:
                log.warning("cluster ledger unreachable (%s): admitting on own capacity",
                            type(exc).__name__)
            self._set_reachable(False)
            self._stale = True
            raise LedgerUnreachable(str(exc)) from None
        if epoch == UNAUTHORIZED:
            if self.reachable or not self._stale:
                log.error("the cluster ledger refused this node's call (%s): check that every "
                          "node has the same SPEECHPIPE_CLUSTER_SECRET", method)
            self._set_reachable(False)
            self._stale = True
            raise LedgerRefused(str(result))
        if not self.reachable:
            log.info("cluster ledger reachable")
        self._set_reachable(True)
        return epoch, result

    async def _register(self) -> None:
        opts = self.options
        now = time.monotonic()
        held = [(t, c, k, round(now - since, 3)) for t, (c, k, since) in self.held.items()]
        from speechpipe.cluster.ledger import proof

        nonce = secrets.token_hex(16)
        epoch, answer = await self._raw("register", opts.name, opts.public_url, opts.capacity,
                                        held, nonce)
        if opts.secret and not hmac.compare_digest(str(answer), proof(opts.secret, nonce,
                                                                         epoch)):
            log.error("the cluster ledger could not prove it holds the cluster secret: not "
                      "following it (admitting on own capacity)")
            self._set_reachable(False)
            self._stale = True
            raise LedgerRefused("the ledger does not hold this node's cluster secret")
        self.epoch = epoch
        self._stale = False
        if self.draining:  # a restarted ledger must not place sessions here again
            await self._raw("drain", opts.name)

    async def _heartbeat_loop(self) -> None:
        while True:
            try:
                answer, snapshot = await self.call("heartbeat", self.options.name)
                if answer == "register":
                    await self._register()
                elif answer == "drain" and not self.draining:
                    self._begin_drain()
                self.snapshot = snapshot
                if self.rooms_report is not None:
                    await self.call("rooms", self.options.name, self.rooms_report())
            except LedgerRefused:
                self.snapshot = {}
            except LedgerUnreachable:
                self.snapshot = {}  # the cluster's figures are unknown now, not frozen
                self._look_up_ledger()
            except Exception:  # a heartbeat hiccup must not end the node
                log.exception("cluster heartbeat failed")
            self._export()
            await asyncio.sleep(self.options.heartbeat_s)

    def _look_up_ledger(self) -> None:
        """Find the ledger again by name, creating it when it is gone for good (killed
        without restart, restarts used up): one look-up at a time, in a daemon thread, as
        Ray's look-up blocks and may hang while the head is down."""
        if self._lookup is not None and not self._lookup.done():
            return
        from speechpipe.cluster.ledger import ledger_handle

        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        options, secret = self.options.ledger, self.options.secret

        def look_up() -> None:
            try:
                handle = ledger_handle(options, secret=secret)
            except BaseException as exc:  # noqa: BLE001 (reported to the loop)
                loop.call_soon_threadsafe(_settle, future, None, exc)
            else:
                loop.call_soon_threadsafe(_settle, future, handle, None)

        def adopt(done: asyncio.Future[Any]) -> None:
            if not done.cancelled() and done.exception() is None and done.result() is not None:
                self.handle = done.result()
                self._stale = True  # register (and check its proof) before the next call

        future.add_done_callback(adopt)
        self._lookup = future
        threading.Thread(target=look_up, name="cluster-ledger-lookup", daemon=True).start()

    def _set_reachable(self, value: bool) -> None:
        self.reachable = value
        if self._metrics is not None:
            self._metrics.reachable.set(1 if value else 0)

    def _export(self) -> None:
        if self._metrics is not None:
            self._metrics.export(self)

    async def room_url(self, room: str) -> str | None:
        """The public URL of the other node ``room`` lives on (None: unknown, or here; or the
        ledger does not answer)."""
        try:
            found = await self.call("room_node", room)
        except LedgerUnreachable:
            return None
        if not found or found[0] == self.options.name:
            return None
        return str(found[1])

    # -- drain ------------------------------------------------------------------------------
    def _begin_drain(self) -> None:
        log.info("draining: no new sessions; %d running (deadline %.0f s)",
                 len(self.held), self.options.drain_deadline_s)
        self.draining = True
        asyncio.get_running_loop().call_later(self.options.drain_deadline_s, self._drained.set)

    async def drain_progress(self) -> None:
        """Returns once draining and every session here has ended, or at the deadline."""
        while not self._drained.is_set():
            if self.draining and not self.held:
                self._drained.set()
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.25):
                    await self._drained.wait()

    # -- slots ------------------------------------------------------------------------------
    def has_room(self) -> bool:
        """Whether this node holds (or is claiming) fewer sessions than its capacity."""
        return len(self.held) + len(self.claiming) < self.options.capacity

    def hold(self, ticket: str, client: str, token: str) -> None:
        """Record a session this node now serves."""
        self.held[ticket] = (client, token, time.monotonic())
        self._export()

    async def release(self, ticket: str) -> None:
        """Forget a held session and tell the ledger (best effort)."""
        if self.held.pop(ticket, None) is None:
            return
        self._export()
        with contextlib.suppress(LedgerUnreachable):
            await self.call("release", ticket)


class ClusterGate:
    """``CapacityGate`` backed by the cluster ledger (see the module docs)."""

    def __init__(self, node: ClusterNode) -> None:
        self.node = node

    @property
    def capacity(self) -> int:
        """This node's capacity."""
        return self.node.options.capacity

    @contextlib.asynccontextmanager
    async def slot(self, client: str, notify: Notify, *, token: str = "", ticket: str = "",
                   resume: str = "") -> AsyncIterator[str]:
        """Hold a slot for the session's lifetime, yielding its ticket (or ``SessionRedirect``)."""
        held = await self._acquire(client, notify, token, ticket, resume)
        try:
            yield held
        finally:
            await asyncio.shield(self.node.release(held))

    async def _acquire(self, client: str, notify: Notify, token: str, ticket: str,
                       resume: str) -> str:
        node = self.node
        name = node.options.name
        if ticket and not node.draining:  # a redirect's ticket: claimable once, while reserved
            with contextlib.suppress(LedgerUnreachable):
                if await self._claim(ticket, client, token):
                    return ticket
        # a new arrival (or a ticket that is not reserved here): ask for a slot
        ticket = secrets.token_hex(8)
        try:
            try:
                verdict: Verdict = await node.call("request", ticket, name, client, token,
                                                   resume, 0.0)
            except LedgerUnreachable:
                return await self._local(ticket, client, token, notify)
            return await self._follow(verdict, client, token, notify)
        except SessionRedirect:
            raise  # the reservation elsewhere stands until claimed or expired
        except BaseException:  # refused, the client left the line, or it vanished as it was
            await asyncio.shield(self._give_back(ticket))  # admitted: give the place up
            raise

    async def _claim(self, ticket: str, client: str, token: str) -> bool:
        """Claim ``ticket`` (reserved here) and hold its slot; False when this node is full,
        already holds or claims it, or the ledger refuses (not reserved here, or claimed
        already). Raises ``LedgerUnreachable``."""
        node = self.node
        if ticket in node.held or ticket in node.claiming or not node.has_room():
            return False
        node.claiming.add(ticket)
        try:
            claimed = bool(await node.call("claim", ticket, node.options.name))
        except LedgerUnreachable:
            raise
        except BaseException:  # cancelled while claiming: the ledger may count it active
            await asyncio.shield(self._give_back(ticket))
            raise
        finally:
            node.claiming.discard(ticket)
        if claimed:
            node.hold(ticket, client, token)
        return claimed

    async def _give_back(self, ticket: str) -> None:
        """The slot (held here, reserved or in line at the ledger) is not used after all."""
        node = self.node
        if ticket in node.held:
            await node.release(ticket)
            return
        with contextlib.suppress(LedgerUnreachable):
            await node.call("release", ticket)

    async def _follow(self, verdict: Verdict, client: str, token: str, notify: Notify) -> str:
        node = self.node
        name = node.options.name
        ticket = verdict.ticket
        asked = time.monotonic()
        waited = False
        last: tuple[int, int] | None = None
        last_sent = -math.inf
        limit = asked + node.options.ledger.max_wait_s + 60.0  # bound the wait, whatever
        while True:
            if verdict.kind == "admitted":
                try:
                    claimed = await self._claim(ticket, client, token)
                except LedgerUnreachable:  # placed here, then the ledger went away
                    return await self._local(ticket, client, token, notify)
                if not claimed:
                    raise AdmissionError("this node is full; retry",
                                         retry_after_s=node.options.ledger.min_retry_s)
                if waited:
                    await notify(StatusEvent("admitted", "your session is starting", detail={
                        "waited_s": round(time.monotonic() - asked, 1),
                        "capacity": node.snapshot.get("capacity", node.options.capacity)}))
                return ticket
            if verdict.kind == "redirect":
                raise SessionRedirect(
                    f"admitted on another node: reconnect to {verdict.url} with the ticket",
                    url=verdict.url, ticket=ticket, expires_in_s=verdict.expires_in_s)
            if verdict.kind == "refused" and verdict.reason == "unknown ticket" and waited:
                # the ledger restarted while this client waited: ask again, same ticket
                try:
                    verdict = await self._ask_again(ticket, client, token,
                                                    time.monotonic() - asked)
                except LedgerUnreachable:
                    return await self._local(ticket, client, token, notify)
                continue
            if verdict.kind == "refused":
                raise AdmissionError(
                    f"cluster at capacity: {verdict.reason}; retry in {verdict.wait_s:.0f} s",
                    retry_after_s=verdict.wait_s)
            now = time.monotonic()
            if now > limit:
                raise AdmissionError("waited too long in line",
                                     retry_after_s=node.options.ledger.min_retry_s)
            shown = (verdict.position, int(verdict.wait_s))
            if shown != last or now - last_sent >= node.options.status_interval_s:
                await notify(_queued(verdict, node))
                last, last_sent, waited = shown, now, True
            await asyncio.sleep(node.options.poll_s)
            try:
                verdict = await node.call("status", ticket, name)
            except LedgerUnreachable:
                if node.has_room() and not node.draining:
                    return await self._local(ticket, client, token, notify)
                # full here: keep the client waiting until the ledger answers (bounded)

    async def _ask_again(self, ticket: str, client: str, token: str,
                         waited_s: float) -> Verdict:
        """After a ledger restart: the same ticket asks again, saying how long it has waited,
        so it rejoins the line at its place instead of being refused as a newcomer."""
        await asyncio.sleep(self.node.options.poll_s)
        verdict: Verdict = await self.node.call("request", ticket, self.node.options.name,
                                                client, token, "", max(waited_s, 0.001))
        return verdict

    async def _local(self, ticket: str, client: str, token: str, notify: Notify) -> str:
        """The ledger is unreachable: admit only up to this node's own capacity."""
        node = self.node
        if node.draining or not node.has_room():
            raise AdmissionError(
                "the cluster ledger is unreachable and this node is full; retry",
                retry_after_s=node.options.ledger.min_retry_s)
        node.hold(ticket, client, token)
        await notify(StatusEvent(
            "admitted", "the cluster ledger is unreachable: admitted on this node's capacity",
            detail={"ledger": "unreachable", "capacity": node.options.capacity}))
        return ticket


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


def _queued(verdict: Verdict, node: ClusterNode) -> StatusEvent:
    wait = verdict.wait_s
    return StatusEvent(
        "queued",
        f"the service is busy: you are number {verdict.position} in line (about {wait:.0f} s)",
        detail={"position": verdict.position, "estimated_wait_s": round(wait, 1),
                "capacity": node.snapshot.get("capacity", node.options.capacity),
                "cluster": True},
    )


class _ClusterMetrics:
    """The node's and the ledger's figures in the node's ``/metrics``."""

    def __init__(self, registry: Any) -> None:
        from prometheus_client import Gauge

        self.reachable = Gauge("speechpipe_cluster_ledger_reachable",
                               "1 while the cluster ledger answers", registry=registry)
        self.node_capacity = Gauge("speechpipe_cluster_node_capacity",
                                   "sessions this node holds at most", registry=registry)
        self.node_sessions = Gauge("speechpipe_cluster_node_sessions",
                                   "sessions running on this node", registry=registry)
        self.draining = Gauge("speechpipe_cluster_node_draining", "1 while draining",
                              registry=registry)
        self.cluster = Gauge("speechpipe_cluster_sessions",
                             "the ledger's sessions by state (as of the last heartbeat)",
                             ["state"], registry=registry)
        self.capacity = Gauge("speechpipe_cluster_capacity",
                              "the sum of the live nodes' capacities", registry=registry)
        self.counts = Gauge("speechpipe_cluster_ledger_count",
                            "the ledger's counters since it started (admitted = ended + lost"
                            " + active)", ["kind"], registry=registry)
        self.nodes = Gauge("speechpipe_cluster_nodes", "nodes alive in the ledger",
                           registry=registry)

    def export(self, node: ClusterNode) -> None:
        self.node_capacity.set(node.options.capacity)
        self.node_sessions.set(len(node.held))
        self.draining.set(1 if node.draining else 0)
        snap = node.snapshot
        if not snap:  # the ledger does not answer: its figures are unknown, not frozen
            self.cluster.clear()
            self.counts.clear()
            self.capacity.set(math.nan)
            self.nodes.set(math.nan)
            return
        for state in ("active", "reserved", "waiting"):
            self.cluster.labels(state).set(float(snap.get(state, 0)))
        self.capacity.set(float(snap.get("capacity", 0)))
        for kind in ("admitted", "ended", "lost", "refused", "resumed"):
            self.counts.labels(kind).set(float(snap.get(kind, 0)))
        self.nodes.set(sum(1 for n in snap.get("nodes", []) if n.get("alive")))
