"""Issue 21, items 1-7: the attacks on cluster admission, on the pure ledger core and on a
node's gate against the real ``LedgerService`` in process (only Ray's transport replaced, as
in ``test_cluster_node.py``; the real-Ray versions are in
``tests/cluster/test_cluster_attacks.py``).
"""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from websockets.exceptions import ConnectionClosedOK
from websockets.frames import Close

from speechpipe.cluster.ledger import UNAUTHORIZED, LedgerService, proof, sign
from speechpipe.cluster.ledger_core import HeldSession, LedgerCore, LedgerOptions
from speechpipe.cluster.node import ClusterNode, ClusterOptions
from speechpipe.errors import AdmissionError, SessionRedirect
from speechpipe.stages.frames import StatusEvent
from tests.fakes import Heard, InProcessLedger


def core_of(capacity: int = 1, capacity_a: int = 0, **options: float) -> LedgerCore:
    core = LedgerCore(LedgerOptions(max_wait_s=10_000.0, **options))  # type: ignore[arg-type]
    core.register("a", "ws://a/ws", capacity_a or capacity, [], 0.0)
    core.register("b", "ws://b/ws", capacity, [], 0.0)
    return core


def started(core: LedgerCore, ticket: str, node: str, client: str, now: float = 0.0,
            token: str = "") -> None:
    verdict = core.request(ticket, node, client, now, token=token)
    assert verdict.kind == "admitted" and verdict.node == node, verdict
    assert core.claim(ticket, node, now)


# ------------------------------------------------------------------ item 2: ticket reuse
def test_an_active_session_id_is_not_a_ticket_and_a_ticket_is_claimed_once():
    core = core_of(2)
    started(core, "s1", "a", "c1")
    for _ in range(4):  # the attack: an active session's id as start.ticket
        assert core.claim("s1", "a", 1.0) is False
    assert core.request("r", "a", "c2", 1.0).kind == "admitted"  # a's second slot
    hop = core.request("h", "a", "c3", 1.0)
    assert hop.kind == "redirect" and hop.node == "b"
    claims = [core.claim("h", "b", 1.5) for _ in range(6)]  # 6 connections, one ticket
    assert claims == [True, False, False, False, False, False]
    assert core.claim("r", "b", 1.5) is False  # reserved on a, not b
    core.check()


# ------------------------------------------------------- items 3-5: resumes, bound and counted
def _lost_on_a(core: LedgerCore, tickets: dict[str, tuple[str, str]], now: float) -> None:
    for ticket, (client, token) in tickets.items():
        started(core, ticket, "a", client, token=token)
    core.heartbeat("b", now - 1.0)
    core.tick(now)  # a's lease ran out: its sessions are lost


def test_a_lost_session_resumes_once_and_only_for_its_holder():
    core = core_of(1, capacity_a=2, lease_s=6.0, per_client=0)
    _lost_on_a(core, {"s1": ("alice", ""), "s2": ("bob", "tok-bob")}, 7.0)
    started(core, "x", "b", "carol", 7.0)
    assert core.request("w", "b", "dave", 7.1).position == 1
    # someone else with the lost ids: no priority, at the back
    assert core.request("m1", "b", "mallory", 7.2, resume="s1").position == 2
    assert core.request("m2", "b", "bob", 7.2, resume="s2").position == 3  # bob, not tok-bob
    # the holders: ahead of the line, once
    assert core.request("r1", "b", "alice", 7.3, resume="s1").position == 1
    assert core.request("r2", "b", "other-ip", 7.3, token="tok-bob", resume="s2").position == 2
    assert core.request("r1b", "b", "alice", 7.4, resume="s1").position == 6  # used already
    assert core.resumed == 2
    core.check()


def test_resuming_ones_own_live_session_neither_jumps_nor_blocks_the_line():
    core = core_of(1, max_queue=3, per_client=0)
    started(core, "live", "a", "attacker")
    started(core, "x", "b", "other")
    assert core.request("fair", "b", "fair", 1.0).position == 1
    positions = [core.request(f"r{i}", "b", "attacker", 1.1, resume="live")
                 for i in range(20)]
    # the first waits behind the fair client (on the live session); the rest are ordinary
    # arrivals that fill the line and are then refused: nothing went ahead, nothing past 3
    assert positions[0].kind == "queued" and positions[0].position == 2
    assert (positions[1].kind, positions[1].position) == ("queued", 3)
    assert {v.kind for v in positions[2:]} == {"refused"}
    assert all("line is full" in v.reason for v in positions[2:])
    assert core.status("fair", "b", 1.2).position == 1
    assert len(core.line) == 3 and core.resumed == 0
    # a slot frees on b: the fair client goes first
    core.release("x", 2.0)
    assert core.status("fair", "b", 2.0).kind == "admitted"
    core.check()


def test_a_resume_of_a_live_session_waits_for_it_and_moves_ahead_once_it_is_lost():
    core = core_of(1, lease_s=6.0, per_client=1)
    started(core, "s1", "a", "alice")
    started(core, "x", "b", "carol")
    assert core.request("w", "b", "dave", 0.5).position == 1
    # alice's node died; the lease has not run out: she may wait (not counted twice) ...
    resumed = core.request("r1", "b", "alice", 1.0, resume="s1")
    assert (resumed.kind, resumed.position) == ("queued", 2)
    core.release("x", 2.0)  # ... but not take a slot while s1 is active: dave goes first
    assert core.status("w", "b", 2.0).kind == "admitted"
    assert core.status("r1", "b", 2.0).kind == "queued"
    core.claim("w", "b", 2.0)
    assert core.request("n", "b", "erin", 3.0).position == 2
    core.heartbeat("b", 3.0)
    core.tick(7.0)  # a's lease ran out: s1 is lost, alice's request takes the grant
    assert core.status("r1", "b", 7.0).position == 1 and core.resumed == 1
    assert core.status("n", "b", 7.0).position == 2
    core.check()


def test_a_resume_of_a_live_session_that_then_ends_is_an_ordinary_request():
    core = core_of(1, per_client=1)
    started(core, "s1", "a", "alice")
    started(core, "x", "b", "carol")
    assert core.request("r1", "b", "alice", 1.0, resume="s1").position == 1
    core.release("s1", 2.0)  # s1 was alive after all and ended: r1 is alice's one session
    verdict = core.status("r1", "b", 2.0)
    assert (verdict.kind, verdict.node) == ("redirect", "a")
    assert core.resumed == 0
    core.check()


def test_per_token_limit_holds_cluster_wide_through_resumes():
    core = core_of(1, per_token=1)
    started(core, "s1", "a", "c1", token="tok")
    refusals = [core.request(f"r{i}", "b", "c2", 1.0, token="tok", resume="s1")
                for i in range(1, 4)]
    # one request may wait on the live session s1 (it is not placed while s1 runs) ...
    assert refusals[0].kind == "queued"
    # ... and every other one counts s1 and that one
    assert [v.kind for v in refusals[1:]] == ["refused", "refused"]
    assert all("token already has 1" in v.reason for v in refusals[1:])
    assert sum(1 for e in core.active.values() if e.token == "tok") == 1
    assert not any(e.token == "tok" for e in core.reserved.values())
    core.check()


def test_a_resume_counts_against_the_per_client_limit_like_any_session():
    core = core_of(1, lease_s=6.0, per_client=1)
    _lost_on_a(core, {"s1": ("alice", "")}, 7.0)
    started(core, "x", "b", "alice", 7.0)  # alice already runs a session on b
    verdict = core.request("r1", "b", "alice", 7.5, resume="s1")
    assert verdict.kind == "refused" and "client already has 1" in verdict.reason
    assert "s1" in core.resumes  # a refused request does not use the grant up
    core.check()


# ---------------------------------------------------------- item 7: ledger restart, the line
def test_after_a_ledger_restart_waiters_rejoin_in_order_and_waits_use_the_sessions_age():
    options = LedgerOptions(max_queue=2, max_wait_s=60.0, expected_session_s=120.0)
    core = LedgerCore(options)  # the restarted ledger: empty, no history
    # the nodes re-register sessions that have run 100 s
    core.register("a", "ws://a/ws", 1, [HeldSession("s1", "c1", "", 100.0)], 500.0)
    core.register("b", "ws://b/ws", 1, [HeldSession("s2", "c2", "", 100.0)], 500.0)
    fresh = core.request("n", "a", "c3", 500.0)  # the wait knows the sessions are old
    assert fresh.kind == "queued" and fresh.wait_s < 60.0, fresh
    # clients that waited before the restart ask again: kept, at their old place, even
    # though their estimated wait is long and the line is full
    late = core.request("w2", "b", "c5", 500.2, waiting_s=30.0)
    early = core.request("w1", "a", "c4", 500.3, waiting_s=50.0)
    assert (late.kind, early.kind) == ("queued", "queued")
    assert [t for t in core.line] == ["w1", "w2", "n"]
    assert core.request("x", "a", "c6", 500.4).reason == "the waiting line is full"
    core.check()


def test_without_the_sessions_age_a_restarted_ledger_estimates_a_full_session():
    core = LedgerCore(LedgerOptions(max_wait_s=60.0, expected_session_s=120.0))
    core.register("a", "ws://a/ws", 1, [HeldSession("s1", "c1")], 500.0)
    assert core.request("n", "a", "c3", 500.0).reason.startswith("the estimated wait (120 s)")


# ---------------------------------------------------------------- item 6: signed calls
def test_the_ledger_refuses_calls_without_the_cluster_secret():
    service = LedgerService(LedgerOptions(), secret="s3cret")
    args = ("rogue", "ws://rogue/ws", 50, [])
    assert service.register("", *args)[0] == UNAUTHORIZED
    assert service.register(sign("guess", "register", args), *args)[0] == UNAUTHORIZED
    assert service.register(sign("s3cret", "register", ("rogue", "ws://x/ws", 50, [])),
                            *args)[0] == UNAUTHORIZED  # a tag for other arguments
    assert service.core.nodes == {}
    good = ("a", "ws://a/ws", 2, [], "nonce1")
    epoch, answer = service.register(sign("s3cret", "register", good), *good)
    assert epoch == service.epoch and answer == proof("s3cret", "nonce1", epoch)
    assert list(service.core.nodes) == ["a"]
    assert service.leave("", "a")[0] == UNAUTHORIZED and service.core.nodes["a"].alive
    assert service.snapshot()[1]["refused_calls"] == 4


# ------------------------------------------------ the gate against the in-process ledger
async def secret_node(ledger: InProcessLedger, name: str, capacity: int = 1,
                      secret: str = "", registry: CollectorRegistry | None = None,
                      heartbeat_s: float = 1.0) -> ClusterNode:
    result = ClusterNode(ClusterOptions(address="unused:0", public_url=f"ws://{name}/ws",
                                        capacity=capacity, call_timeout_s=1.0, poll_s=0.01,
                                        status_interval_s=60.0, secret=secret,
                                        heartbeat_s=heartbeat_s),
                         registry=registry)
    result.handle = ledger
    await result._register()
    return result


class VanishesWhenAdmitted(Heard):
    """A waiting client whose connection is gone by the time its turn comes."""

    async def __call__(self, event: StatusEvent) -> None:
        if event.status == "admitted":
            raise ConnectionClosedOK(Close(1000, ""), Close(1000, ""), True)
        await super().__call__(event)


async def test_a_waiter_that_vanishes_at_its_turn_gives_its_slot_back():
    ledger = InProcessLedger()
    ledger.service = LedgerService(LedgerOptions(max_queue=8, max_wait_s=1000.0))
    a = await secret_node(ledger, "a", capacity=1)
    for _ in range(2):  # two rounds, as in the report
        async with a.gate.slot("holder", Heard()):
            waiter = asyncio.create_task(_enter(a, VanishesWhenAdmitted()))
            await _until(lambda: bool(ledger.service.core.line))
        with pytest.raises(ConnectionClosedOK):
            await asyncio.wait_for(waiter, 10)
        assert a.held == {} and a.has_room()
    core = ledger.service.core
    assert (len(core.active), len(core.reserved), len(core.line)) == (0, 0, 0)
    core.check()
    heard = Heard()  # a fair client starts at once
    async with a.gate.slot("fair", heard) as ticket:
        assert ticket in a.held and not heard.events


async def test_one_ticket_claimed_by_parallel_connections_starts_one_session():
    ledger = InProcessLedger()
    a, b = await secret_node(ledger, "a"), await secret_node(ledger, "b")
    async with a.gate.slot("c1", Heard()) as first:
        with pytest.raises(SessionRedirect) as hop:
            async with a.gate.slot("c2", Heard()):
                pass
        outcomes = await asyncio.gather(
            *[_hold(b, hop.value.ticket) for _ in range(6)], return_exceptions=True)
        assert sorted(map(str, outcomes)) == ["held", *["refused"] * 5], outcomes
        # the active session's id as a ticket does not start one either
        assert await _hold(a, first) == "refused"
        assert len(a.held) == 1 and len(b.held) <= 1
    ledger.service.core.check()


async def test_cluster_gauges_are_dropped_while_the_ledger_is_unreachable():
    ledger = InProcessLedger()
    registry = CollectorRegistry()
    a = await secret_node(ledger, "a", registry=registry, heartbeat_s=0.02)
    a._look_up_ledger = lambda: None  # type: ignore[method-assign]  # no Ray to look in
    heartbeat = asyncio.create_task(a._heartbeat_loop())
    try:
        await _until(lambda: 'speechpipe_cluster_sessions{state="active"}' in _text(registry))
        assert "speechpipe_cluster_capacity 1.0" in _text(registry)
        ledger.down = True
        await _until(lambda: "speechpipe_cluster_ledger_reachable 0.0" in _text(registry))
        await _until(lambda: "speechpipe_cluster_sessions{" not in _text(registry))
        text = _text(registry)
        assert "speechpipe_cluster_capacity NaN" in text
        assert "speechpipe_cluster_ledger_count{" not in text
        ledger.down = False
        await _until(lambda: "speechpipe_cluster_capacity 1.0" in _text(registry))
    finally:
        heartbeat.cancel()


async def test_a_node_with_the_wrong_secret_is_refused():
    ledger = InProcessLedger()
    ledger.service = LedgerService(LedgerOptions(), secret="right")
    await secret_node(ledger, "a", secret="right")
    with pytest.raises(Exception, match="not signed"):
        await secret_node(ledger, "rogue", capacity=50, secret="wrong")
    assert sorted(ledger.service.core.nodes) == ["ws://a/ws"]  # no rogue node


async def test_a_node_does_not_follow_a_ledger_without_the_secret():
    """An actor that took the ledger's name without the secret (after killing the real one)
    cannot answer a registration's nonce: the node refuses it and admits on its own."""
    ledger = InProcessLedger()
    ledger.service = LedgerService(LedgerOptions())  # the impostor: no secret, accepts all
    with pytest.raises(Exception, match="does not hold this node's cluster secret"):
        await secret_node(ledger, "a", secret="right")
    honest = InProcessLedger()
    honest.service = LedgerService(LedgerOptions(), secret="right")
    node = await secret_node(honest, "a", secret="right")
    assert node.reachable and node.epoch == honest.service.epoch


async def _enter(node: ClusterNode, notify: Heard) -> None:
    async with node.gate.slot("waiter", notify):
        pass


async def _hold(node: ClusterNode, ticket: str) -> str:
    """Start with ``ticket`` and hold the session a moment: "held" if it started on that
    ticket, "refused" if not (a new arrival then: refused, queued or redirected)."""
    try:
        async with asyncio.timeout(0.5):
            async with node.gate.slot("c", Heard(), ticket=ticket) as held:
                if held != ticket:
                    return "refused"
                await asyncio.sleep(0.05)
                return "held"
    except (AdmissionError, SessionRedirect, TimeoutError):
        return "refused"


async def _until(check, limit_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(limit_s / 0.01)):  # bounded in count and time
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not within {limit_s} s")


def _text(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


# ------------------------------------- issue 74: redirects that are never followed
def test_redirects_never_followed_do_not_turn_a_fair_client_away():
    """2 nodes of 2: a is full, two clients are redirected to b and never go there. A fair
    client asking meanwhile waits in line for the few seconds those reservations have left
    (it was refused "wait 115 s" while they were held), and gets b once they lapse."""
    core = LedgerCore(LedgerOptions(max_wait_s=60.0))
    core.register("a", "ws://a/ws", 2, [], 0.0)
    core.register("b", "ws://b/ws", 2, [], 0.0)
    started(core, "s1", "a", "c1")
    started(core, "s2", "a", "c2")
    for ticket in ("gone1", "gone2"):  # redirected to b; they close and never follow
        assert core.request(ticket, "a", ticket, 0.0).kind == "redirect"
    ttl = core.options.ticket_ttl_s
    assert ttl <= 5.0  # a redirect is followed at once: a short hold
    fair = core.request("fair", "a", "fair", 1.0)
    assert fair.kind == "queued" and fair.wait_s <= ttl, fair
    core.heartbeat("a", 3.0)  # the nodes stay alive
    core.heartbeat("b", 3.0)
    placed = core.status("fair", "a", ttl + 0.5)
    assert placed.kind == "redirect" and placed.node == "b", placed
    assert core.claim("fair", "b", ttl + 1.0)
    core.check()
