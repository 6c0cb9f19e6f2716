"""The cluster ledger's pure core: examples, then a hypothesis state machine over
admit / queue / end / node lost / resume / ticket expiry / ledger restart, with the nodes'
own view of what they hold as the ground truth (no Ray here)."""

from __future__ import annotations

import math

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from speechpipe.cluster.ledger_core import HeldSession, LedgerCore, LedgerOptions

OPTIONS = LedgerOptions(max_queue=4, max_wait_s=10_000.0, expected_session_s=100.0,
                        lease_s=6.0, ticket_ttl_s=10.0, waiter_ttl_s=20.0,
                        resume_window_s=30.0, per_client=3)


def two_nodes(capacity: int = 2) -> LedgerCore:
    core = LedgerCore(OPTIONS)
    core.register("a", "ws://a/ws", capacity, [], 0.0)
    core.register("b", "ws://b/ws", capacity, [], 0.0)
    return core


def test_capacity_is_the_sum_and_the_fifth_and_sixth_wait_the_seventh_is_refused():
    core = LedgerCore(LedgerOptions(max_queue=2, max_wait_s=10_000.0))
    core.register("a", "ws://a/ws", 2, [], 0.0)
    core.register("b", "ws://b/ws", 2, [], 0.0)
    assert core.capacity == 4
    kinds = []
    for i in range(4):
        verdict = core.request(f"t{i}", "a", f"c{i}", 1.0)
        kinds.append((verdict.kind, verdict.node))
        if verdict.kind == "admitted":
            assert core.claim(f"t{i}", "a", 1.0)
    # the arriving node first, then the other one through a redirect
    assert kinds == [("admitted", "a"), ("admitted", "a"), ("redirect", "b"), ("redirect", "b")]
    assert core.claim("t2", "b", 1.5) and core.claim("t3", "b", 1.5)
    fifth, sixth = core.request("t4", "b", "c4", 2.0), core.request("t5", "a", "c5", 2.0)
    assert (fifth.kind, fifth.position, sixth.kind, sixth.position) == ("queued", 1, "queued", 2)
    assert math.isfinite(fifth.wait_s) and fifth.wait_s > 0
    seventh = core.request("t6", "a", "c6", 2.0)
    assert seventh.kind == "refused" and "line is full" in seventh.reason
    assert seventh.wait_s >= core.options.min_retry_s
    # a session ends on a: the first waiter (on b) is redirected to a
    core.release("t0", 3.0)
    moved = core.status("t4", "b", 3.0)
    assert (moved.kind, moved.node, moved.url) == ("redirect", "a", "ws://a/ws")
    assert core.status("t5", "a", 3.0).position == 1
    core.check()


def test_calls_are_idempotent_by_ticket():
    core = two_nodes(1)
    first = core.request("x", "a", "c", 0.0)
    again = core.request("x", "a", "c", 0.1)
    assert (again.kind, again.node) == (first.kind, first.node) == ("admitted", "a")
    assert core.claim("x", "a", 0.2)
    assert not core.claim("x", "a", 0.3)  # claimable once (issue 21, item 2)
    assert core.admitted == 1 and len(core.active) == 1
    core.release("x", 1.0)
    core.release("x", 1.1)
    assert core.ended == 1
    # an ended ticket cannot come back as a new session
    assert core.request("x", "a", "c", 2.0).kind == "refused"
    core.check()


def test_lost_node_frees_slots_counts_lost_and_resumes_go_first():
    core = two_nodes(1)
    for ticket, node in (("s1", "a"), ("s2", "b")):
        assert core.request(ticket, node, ticket, 0.0).kind == "admitted"
        core.claim(ticket, node, 0.0)
    assert core.request("new", "b", "n", 1.0).kind == "queued"
    core.heartbeat("b", 5.0)
    core.tick(7.0)  # a's lease (6 s) ran out
    assert core.lost == 1 and not core.nodes["a"].alive and core.capacity == 1
    resumed = core.request("again", "b", "s1", 7.5, resume="s1")
    assert (resumed.kind, resumed.position) == ("queued", 1)  # ahead of "new"
    assert core.status("new", "b", 7.5).position == 2
    core.release("s2", 8.0)
    assert core.status("again", "b", 8.0).kind == "admitted"
    assert core.status("new", "b", 8.0).kind == "queued"
    # the resume grant is single use and expires
    again = core.request("again2", "b", "s1", 8.0, resume="s1")
    assert (again.kind, again.position) == ("queued", 2)  # an ordinary arrival now
    core.check()


def test_reservations_expire_and_ledger_restart_adopts_what_nodes_hold():
    core = two_nodes(1)
    assert core.request("t1", "a", "c1", 0.0).kind == "admitted"
    core.claim("t1", "a", 0.0)
    assert core.request("t2", "a", "c2", 0.0).kind == "redirect"
    core.heartbeat("a", 5.0), core.heartbeat("b", 5.0)
    core.tick(11.0)  # t2 never came to b
    assert core.claim("t2", "b", 11.0) is False
    assert core.status("t2", "b", 11.0).reason == "ticket expired"
    fresh = LedgerCore(OPTIONS)  # the ledger restarted: nodes re-register
    fresh.register("a", "ws://a/ws", 1, [HeldSession("t1", "c1")], 20.0)
    assert fresh.request("t3", "a", "c3", 20.0).kind == "queued"  # b not back yet
    fresh.register("b", "ws://b/ws", 1, [], 20.5)
    assert fresh.status("t3", "a", 20.5).kind == "redirect"
    fresh.check()


# -------------------------------------------------------------------------- state machine
NODES = ("a", "b", "c")
CAPACITY = {"a": 1, "b": 2, "c": 2}


class LedgerMachine(RuleBasedStateMachine):
    """Nodes hold the truth (``held``: sessions really running there); the ledger must never
    let a node hold more than its capacity, whatever happens to it or to the nodes."""

    @initialize()
    def start(self) -> None:
        self.core = LedgerCore(OPTIONS)
        self.now = 0.0
        self.held: dict[str, set[str]] = {n: set() for n in NODES}
        self.up: set[str] = set()  # node processes running (heartbeating)
        self.redirected: dict[str, tuple[str, float]] = {}  # ticket -> node, expiry
        self.waiting: dict[str, str] = {}  # ticket -> node the client waits on
        self.lost_tickets: list[str] = []
        self.holders: dict[str, str] = {}  # ticket -> the client that asked for it
        self.used: set[str] = set()  # lost tickets whose resume was honoured
        self.tickets = 0

    def _new_ticket(self) -> str:
        self.tickets += 1
        return f"t{self.tickets}"

    def _apply(self, ticket: str, node: str) -> None:
        verdict = self.core.status(ticket, node, self.now)
        if verdict.kind == "admitted":
            assert verdict.node == node
            assert len(self.held[node]) < CAPACITY[node], "the ledger double-booked a node"
            if self.core.claim(ticket, node, self.now):
                self.held[node].add(ticket)
            self.waiting.pop(ticket, None)
        elif verdict.kind == "redirect":
            self.waiting.pop(ticket, None)
            self.redirected[ticket] = (verdict.node, self.now + verdict.expires_in_s)
        elif verdict.kind == "queued":
            assert math.isfinite(verdict.wait_s) and verdict.wait_s >= 0
            self.waiting[ticket] = node
        else:
            self.waiting.pop(ticket, None)

    @rule(node=st.sampled_from(NODES))
    def node_starts(self, node: str) -> None:
        if node in self.up:
            return
        self.up.add(node)
        self.held[node] = set()  # a fresh process holds nothing
        self.core.register(node, f"ws://{node}/ws", CAPACITY[node], [], self.now)

    @precondition(lambda self: bool(self.up))
    @rule(data=st.data(), client=st.integers(0, 4), resume=st.booleans())
    def client_arrives(self, data: st.DataObject, client: int, resume: bool) -> None:
        node = data.draw(st.sampled_from(sorted(self.up)))
        ticket = self._new_ticket()
        grant = ""
        name = f"c{client}"
        if resume and self.lost_tickets:
            grant = data.draw(st.sampled_from(self.lost_tickets))
            if data.draw(st.booleans()):  # half the time its holder, else anyone
                name = self.holders.get(grant, name)
        self.core.tick(self.now)  # leases due now run out here, not inside the request
        before = [t for t in self.core.line]
        granted_before = self.core.resumed
        holder = self.holders.get(grant)
        self.core.request(ticket, node, name, self.now, resume=grant)
        self.holders[ticket] = name
        if self.core.resumed > granted_before:  # a resume's priority: its holder's, once
            assert holder == name, "someone else took a lost session's resume"
            assert grant not in self.used, "a resume was honoured twice"
            self.used.add(grant)
        if ticket in self.core.line and not self.core.line[ticket].resumed:
            assert list(self.core.line)[:-1] == before, "a new arrival jumped the line"
        self._apply(ticket, node)

    @precondition(lambda self: bool(self.waiting))
    @rule(data=st.data())
    def waiter_asks(self, data: st.DataObject) -> None:
        ticket = data.draw(st.sampled_from(sorted(self.waiting)))
        self._apply(ticket, self.waiting[ticket])

    @precondition(lambda self: bool(self.redirected))
    @rule(data=st.data())
    def redirected_client_arrives(self, data: st.DataObject) -> None:
        ticket = data.draw(st.sampled_from(sorted(self.redirected)))
        node, expiry = self.redirected.pop(ticket)
        if node not in self.up:
            return
        full = len(self.held[node]) >= CAPACITY[node]
        reservation = self.core.reserved.get(ticket)
        honourable = (reservation is not None and reservation.node == node
                      and self.now <= reservation.expires)
        claimed = self.core.claim(ticket, node, self.now)
        assert claimed == honourable, "a reservation honoured wrongly (expired or elsewhere)"
        assert self.now <= expiry or reservation is None or reservation.expires > expiry, \
            "an expired ticket was honoured"
        if claimed:
            assert not full, "the ledger double-booked a node"
            self.held[node].add(ticket)

    @precondition(lambda self: any(self.held.values()))
    @rule(data=st.data())
    def session_ends(self, data: st.DataObject) -> None:
        node = data.draw(st.sampled_from([n for n in NODES if self.held[n]]))
        ticket = data.draw(st.sampled_from(sorted(self.held[node])))
        self.held[node].discard(ticket)
        self.core.release(ticket, self.now)

    @precondition(lambda self: bool(self.up))
    @rule(data=st.data(), announced=st.booleans())
    def node_dies(self, data: st.DataObject, announced: bool) -> None:
        node = data.draw(st.sampled_from(sorted(self.up)))
        self.up.discard(node)
        lost_before = self.core.lost
        if announced:  # Ray reported the death; otherwise the lease runs out later
            lost = self.core.node_lost(node, self.now)
            assert self.core.lost == lost_before + len(lost)
            assert set(lost) <= self.held[node]
            self.lost_tickets.extend(lost)
        else:
            self.lost_tickets.extend(self.held[node])
        self.held[node] = set()

    @rule(dt=st.sampled_from([0.5, 2.0, 5.0, 12.0, 40.0]))
    def time_passes(self, dt: float) -> None:
        """Time passes; running nodes heartbeat well within their lease, dead ones do not."""
        remaining = dt
        while remaining > 0:
            step = min(remaining, OPTIONS.lease_s - 0.5)
            self.now += step
            remaining -= step
            for node in sorted(self.up):
                if self.core.heartbeat(node, self.now) == "register":
                    self.core.register(node, f"ws://{node}/ws", CAPACITY[node],
                                       [HeldSession(t) for t in sorted(self.held[node])],
                                       self.now)
        for node in NODES:
            state = self.core.nodes.get(node)
            if node in self.up:
                assert state is not None and state.alive, "a heartbeating node was lost"

    @precondition(lambda self: bool(self.up))
    @rule(data=st.data())
    def node_drained(self, data: st.DataObject) -> None:
        node = data.draw(st.sampled_from(sorted(self.up)))
        self.core.drain(node, self.now)
        assert not any(e.node == node for e in self.core.reserved.values())

    @rule()
    def ledger_restarts(self) -> None:
        self.core = LedgerCore(OPTIONS)
        self.waiting.clear()  # their tickets are unknown now: the nodes ask afresh
        for node in sorted(self.up):
            self.core.register(node, f"ws://{node}/ws", CAPACITY[node],
                               [HeldSession(t) for t in sorted(self.held[node])], self.now)
        for node in self.up:
            assert {t for t, e in self.core.active.items() if e.node == node} == self.held[node]

    @invariant()
    def accounting_and_capacity(self) -> None:
        if not hasattr(self, "core"):
            return
        self.core.check()
        for entry in self.core.reserved.values():  # nothing new goes to a draining node
            assert not self.core.nodes[entry.node].draining
        for node in self.up:
            assert len(self.held[node]) <= CAPACITY[node]
            state = self.core.nodes.get(node)
            if state is not None and state.alive:
                ledger_view = {t for t, e in self.core.active.items() if e.node == node}
                assert ledger_view == self.held[node], "the ledger and the node disagree"


LedgerMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40,
                                           deadline=None)
test_ledger_state_machine = LedgerMachine.TestCase


@pytest.mark.parametrize("dt", [0.0, 5.9])
def test_a_node_within_its_lease_is_not_lost(dt: float):
    core = two_nodes(1)
    core.tick(dt)
    assert core.nodes["a"].alive and core.lost == 0


def test_per_token_and_per_client_limits_count_cluster_wide():
    core = LedgerCore(LedgerOptions(per_token=2, per_client=3, max_wait_s=10_000.0))
    core.register("a", "ws://a/ws", 1, [], 0.0)
    core.register("b", "ws://b/ws", 1, [], 0.0)
    assert core.request("t1", "a", "c1", 0.0, token="tok").kind == "admitted"
    assert core.request("t2", "b", "c2", 0.0, token="tok").kind == "admitted"
    third = core.request("t3", "a", "c3", 0.0, token="tok")  # on either node: one count
    assert third.kind == "refused" and "token already has 2" in third.reason
    assert core.request("t4", "a", "c4", 0.0, token="other").kind == "queued"
    core.release("t1", 1.0)  # the token's count drops with its session
    assert core.request("t5", "a", "c5", 1.0, token="tok").kind == "queued"
    core.check()
