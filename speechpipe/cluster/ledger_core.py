"""The cluster's admission ledger, pure: nodes, slots, one line, resumes. No Ray, no I/O.

Every method takes ``now`` (the ledger's monotonic seconds) and is idempotent by ticket id:
asking twice about one ticket gives the same answer and never takes a second slot.

Words:

- a **node** is one ``speechpipe serve --cluster`` process with a ``capacity`` and a public
  URL. It holds a lease that each ``heartbeat`` renews; a node whose lease runs out is *lost*.
- a **ticket** is a session's id in the cluster (chosen by the node the client reached).
- a ticket is **reserved** on a node when a slot there is set aside for it (the client is on
  that node and claims it at once, or is redirected there and must claim it within
  ``ticket_ttl_s``), **active** once the node ``claim``\\s it, **waiting** while in line.
- a ticket is **claimed** once: only a reserved ticket becomes active, on the node it is
  reserved on; claiming an active (or ended, or expired) ticket fails, so one ticket never
  starts two sessions.
- a node lost with active sessions counts them **lost** and grants each a **resume** for
  ``resume_window_s``: a request carrying it goes ahead of everyone waiting. A grant is used
  once, and only by the session's holder: the same token key when the session had one,
  else the same client key. A resume names a session that is still active on *another* node
  (its node died, its lease has not run out yet): the request waits in line at its arrival
  place (it is not placed while that session is active); when the session is counted lost it
  takes the grant and moves ahead; when it ends instead, the request is an ordinary one.
  Only one request may wait on a live session so. Every request, resume or not, counts
  against the per-client and per-token limits and the line's length and wait.

Invariants (checked by ``check``): ``admitted == ended + lost + active``; on every node
``active + reserved <= capacity``; the line is first come first served, resumes first.

After a ledger restart the core is empty: each node ``register``\\s with the tickets it holds
(adopted as active, counted admitted, with their age so waits are estimated right), and a
node that is not registered gets no placement, so a slot is never handed out twice. A client
that was waiting asks again with how long it has waited (``waiting_s``): it rejoins the line
at its old place, without the length and wait checks it passed already.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal

from speechpipe.cluster.options import ClusterSettings

__all__ = ["LedgerOptions", "LedgerCore", "Verdict", "NodeView", "HeldSession"]


@dataclass(frozen=True, slots=True)
class LedgerOptions:
    """Settings of the cluster ledger: the line, per-client limits, leases, timeouts."""
    max_queue: int = 16  # tickets waiting in the line
    max_wait_s: float = 60.0  # refuse when the estimated wait is longer
    per_client: int = 0  # sessions (active + reserved + waiting) per client; 0 = no limit
    per_token: int = 0  # the same per token key, cluster-wide; 0 = no limit
    expected_session_s: float = 120.0  # prior for the wait estimate
    min_retry_s: float = 5.0  # smallest retry hint given
    lease_s: float = ClusterSettings().lease_s  # a node silent this long is lost
    ticket_ttl_s: float = 5.0  # a reservation must be claimed within this (a redirected
    # client reconnects at once; one that never follows holds the slot only this long)
    waiter_ttl_s: float = 10.0  # a waiting ticket not asked about this long leaves the line
    resume_window_s: float = ClusterSettings().resume_window_s  # lost sessions resume ahead


Kind = Literal["admitted", "redirect", "queued", "refused"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a ticket may do now. ``admitted``: claim the slot on ``node`` (the asking node);
    ``redirect``: reconnect to ``url`` with the ticket within ``expires_in_s``; ``queued``:
    ask again; ``refused``: close 1013, retry after ``wait_s``."""

    kind: Kind
    ticket: str
    node: str = ""
    url: str = ""
    position: int = 0
    wait_s: float = 0.0
    expires_in_s: float = 0.0
    reason: str = ""


@dataclass(frozen=True, slots=True)
class HeldSession:
    """A session a node holds (what it re-registers after a ledger restart)."""

    ticket: str
    client: str = ""
    token: str = ""
    age_s: float = 0.0  # how long the session has run


@dataclass(frozen=True, slots=True)
class NodeView:
    """One node as the ledger sees it: capacity, sessions, liveness, draining."""
    node: str
    url: str
    capacity: int
    active: int
    reserved: int
    alive: bool
    draining: bool


@dataclass
class _Node:
    url: str
    capacity: int
    lease_until: float
    alive: bool = True
    draining: bool = False


@dataclass
class _Entry:
    client: str
    token: str
    since: float  # admitted, reserved or queued at
    node: str = ""  # active/reserved: the node; waiting: the node the client is on
    expires: float = math.inf  # reserved: claim by; waiting: ask again by
    resumed: bool = False
    seq: int = 0  # arrival order: the line is sorted by (not resumed, arrived, seq)
    arrived: float = 0.0  # when it joined the line (earlier for a rejoin after a restart)
    pending: str = ""  # waiting: the live session (on another node) this request resumes


@dataclass
class LedgerCore:
    """Cluster-wide admission state: nodes, sessions, reservations and the line."""
    options: LedgerOptions = field(default_factory=LedgerOptions)
    nodes: dict[str, _Node] = field(default_factory=dict)
    active: dict[str, _Entry] = field(default_factory=dict)
    reserved: dict[str, _Entry] = field(default_factory=dict)
    line: OrderedDict[str, _Entry] = field(default_factory=OrderedDict)
    # a lost ticket -> (client, token, resumable until)
    resumes: dict[str, tuple[str, str, float]] = field(default_factory=dict)
    admitted: int = 0
    ended: int = 0
    lost: int = 0
    refused: int = 0
    resumed: int = 0
    # rooms (transport/room.py): a room lives on one node; room id -> (node, counts)
    rooms: dict[str, tuple[str, dict[str, int]]] = field(default_factory=dict)
    _answers: OrderedDict[str, Verdict] = field(default_factory=OrderedDict)  # refusals, ended
    _mean_s: float = 0.0
    _seen: int = 0
    _arrivals: int = 0

    def __post_init__(self) -> None:
        self._mean_s = self.options.expected_session_s

    # -- nodes ------------------------------------------------------------------------------
    def register(self, node: str, url: str, capacity: int, held: list[HeldSession],
                 now: float) -> None:
        """A node joins, or re-joins (after a ledger restart or a lost lease) with what it
        holds: those tickets become its active sessions; ones it no longer holds ended."""
        self.tick(now)
        known = self.nodes.get(node)
        self.nodes[node] = _Node(url, max(1, capacity), now + self.options.lease_s,
                                 draining=known.draining if known else False)
        held_ids = {h.ticket for h in held}
        for ticket, entry in list(self.active.items()):
            if entry.node == node and ticket not in held_ids:
                self._end(ticket, now)
        for h in held:
            if h.ticket in self.active:
                continue
            self.reserved.pop(h.ticket, None)
            self.line.pop(h.ticket, None)
            self._answers.pop(h.ticket, None)
            age = min(max(0.0, h.age_s), 7 * 24 * 3600.0) if math.isfinite(h.age_s) else 0.0
            self.active[h.ticket] = _Entry(h.client, h.token, now - age, node)
            self.admitted += 1
        self._promote(now)

    def heartbeat(self, node: str, now: float) -> Literal["ok", "register", "drain"]:
        """Renew the lease. ``register``: the ledger does not know this node (restarted, or
        the lease ran out): register again with what it holds."""
        self.tick(now)
        state = self.nodes.get(node)
        if state is None or not state.alive:
            return "register"
        state.lease_until = now + self.options.lease_s
        return "drain" if state.draining else "ok"

    def drain(self, node: str, now: float) -> bool:
        """Stop placing sessions on ``node``; False if it is unknown."""
        state = self.nodes.get(node)
        if state is None:
            return False
        state.draining = True
        for ticket, entry in list(self.reserved.items()):  # not claimed yet: place elsewhere
            if entry.node == node:
                self._unreserve(ticket, entry, now)
        self._promote(now)
        return True

    def node_lost(self, node: str, now: float) -> list[str]:
        """The node died or its lease ran out: its slots are freed, its sessions counted lost
        (each may resume within the window); returns the lost tickets."""
        state = self.nodes.get(node)
        if state is None or not state.alive:
            return []
        state.alive = False
        self._drop_rooms(node)  # its rooms ended with it
        lost = [t for t, e in self.active.items() if e.node == node]
        for ticket in lost:
            entry = self.active.pop(ticket)
            self.lost += 1
            waiter = self._pending_on(ticket)
            if waiter is not None:  # its holder is already in line: the grant is used now
                waiter.pending, waiter.resumed = "", True
                self.resumed += 1
            else:
                self.resumes[ticket] = (entry.client, entry.token,
                                        now + self.options.resume_window_s)
        self._resort()
        for ticket, entry in list(self.reserved.items()):
            if entry.node == node:
                self._unreserve(ticket, entry, now)
        self._promote(now)
        return lost

    def leave(self, node: str, now: float) -> None:
        """A node left on purpose (drained, stopped): its remaining sessions are lost."""
        self.node_lost(node, now)
        self.nodes.pop(node, None)
        self._drop_rooms(node)

    # -- rooms --------------------------------------------------------------------------------
    def set_rooms(self, node: str, rooms: dict[str, dict[str, int]], now: float) -> list[str]:
        """A node's rooms now (its periodic report), with their counts. A room stays on the
        node that reported it first while that node is alive; returns the ids ``node``
        reported that live elsewhere (it should not have them)."""
        self.tick(now)
        state = self.nodes.get(node)
        if state is None or not state.alive:
            return []
        self._drop_rooms(node)
        clashes = []
        for room, counts in rooms.items():
            held = self.rooms.get(room)
            if held is not None and held[0] != node and self._alive(held[0]):
                clashes.append(room)
                continue
            self.rooms[room] = (node, {k: int(v) for k, v in counts.items()})
        return clashes

    def room_node(self, room: str) -> tuple[str, str] | None:
        """(node, url) of the node a room lives on, if a live node reported it."""
        held = self.rooms.get(room)
        if held is None or not self._alive(held[0]):
            return None
        return held[0], self.nodes[held[0]].url

    def _alive(self, node: str) -> bool:
        state = self.nodes.get(node)
        return state is not None and state.alive

    def _drop_rooms(self, node: str) -> None:
        for room in [r for r, (n, _) in self.rooms.items() if n == node]:
            del self.rooms[room]

    # -- tickets ----------------------------------------------------------------------------
    def request(self, ticket: str, node: str, client: str, now: float, *, token: str = "",
                resume: str = "", waiting_s: float = 0.0) -> Verdict:
        """A client reached ``node`` and asks for a slot (``resume``: the ticket of its lost
        session; ``waiting_s``: it was in line that long before the ledger restarted).
        Asking again about a known ticket answers its current state."""
        self.tick(now)
        if self._known(ticket):
            return self.status(ticket, node, now)
        if node not in self.nodes or not self.nodes[node].alive:
            return self._refuse(ticket, "this node is not registered with the ledger")
        opts = self.options
        grant, pending = self._grant(resume, node, client, token)
        if opts.per_client and client and \
                self._held_by(client=client, besides=pending) >= opts.per_client:
            return self._refuse(ticket, f"this client already has {opts.per_client} sessions")
        if opts.per_token and token and \
                self._held_by(token=token, besides=pending) >= opts.per_token:
            return self._refuse(ticket, f"this token already has {opts.per_token} sessions")
        rejoin = math.isfinite(waiting_s) and waiting_s > 0
        arrived = now - min(waiting_s, opts.max_wait_s + 60.0) if rejoin else now
        self._arrivals += 1
        entry = _Entry(client, token, now, node, now + opts.waiter_ttl_s, resumed=grant,
                       seq=self._arrivals, arrived=arrived, pending=pending)
        if not self.line and not pending:
            target = self._place(node)
            if target is not None:
                self._take_grant(resume, grant)
                self._reserve(ticket, entry, target, now)
                return self.status(ticket, node, now)
        if not self._placeable():
            return self._refuse(ticket, "no node is taking sessions")
        position = 1 + sum(1 for e in self.line.values() if e.resumed) if grant \
            else len(self.line) + 1
        wait = self.estimated_wait(position, now)
        if not rejoin:
            if len(self.line) >= opts.max_queue:
                return self._refuse(ticket, "the waiting line is full", wait)
            if wait > opts.max_wait_s:
                return self._refuse(ticket, f"the estimated wait ({wait:.0f} s) is too long", wait)
        self._take_grant(resume, grant)
        self._enqueue(ticket, entry)
        self._promote(now)
        return self.status(ticket, node, now)

    def _grant(self, resume: str, node: str, client: str, token: str) -> tuple[bool, str]:
        """``(True, "")``: ``resume`` names a lost session of this holder, unused; ``(False,
        X)``: it names this holder's session X, still active on another node, that no other
        request waits on; ``(False, "")``: no resume (absent, used, not the holder's ...)."""
        if not resume:
            return False, ""
        held = self.resumes.get(resume)
        if held is not None:
            return _same_holder(held[0], held[1], client, token), ""
        entry = self.active.get(resume)
        if entry is not None and entry.node != node and \
                _same_holder(entry.client, entry.token, client, token) and \
                self._pending_on(resume) is None:
            return False, resume
        return False, ""

    def _take_grant(self, resume: str, grant: bool) -> None:
        if grant:
            del self.resumes[resume]
            self.resumed += 1

    def status(self, ticket: str, node: str, now: float) -> Verdict:
        """The current verdict of a ticket (a waiting ticket's asking keeps it in line)."""
        self.tick(now)
        if ticket in self.active:
            return Verdict("admitted", ticket, node=self.active[ticket].node)
        if ticket in self.reserved:
            entry = self.reserved[ticket]
            target = self.nodes[entry.node]
            if entry.node == node:
                return Verdict("admitted", ticket, node=node, url=target.url,
                               expires_in_s=entry.expires - now)
            return Verdict("redirect", ticket, node=entry.node, url=target.url,
                           expires_in_s=max(0.0, entry.expires - now))
        if ticket in self.line:
            entry = self.line[ticket]
            entry.expires = now + self.options.waiter_ttl_s
            position = list(self.line).index(ticket) + 1
            return Verdict("queued", ticket, position=position,
                           wait_s=self.estimated_wait(position, now))
        answer = self._answers.get(ticket)
        if answer is not None:
            return answer
        return Verdict("refused", ticket, reason="unknown ticket",
                       wait_s=self.options.min_retry_s)

    def claim(self, ticket: str, node: str, now: float) -> bool:
        """The client is on ``node`` with a ticket reserved there: its session starts. Only
        once: a ticket already active (or ended, expired, reserved elsewhere) is refused."""
        self.tick(now)
        entry = self.reserved.get(ticket)
        if entry is None or entry.node != node:
            return False
        del self.reserved[ticket]
        entry.since, entry.expires = now, math.inf
        self.active[ticket] = entry
        self.admitted += 1
        return True

    def release(self, ticket: str, now: float) -> None:
        """A session ended, a waiting client gave up, or a reservation is given back."""
        self.tick(now)
        if ticket in self.active:
            self._end(ticket, now)
        elif ticket in self.reserved:
            del self.reserved[ticket]
        else:
            self.line.pop(ticket, None)
        self._promote(now)

    # -- time -------------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        """Expire leases, unclaimed reservations, silent waiters and old resume grants."""
        for node, state in list(self.nodes.items()):
            if state.alive and now > state.lease_until:
                self.node_lost(node, now)
        changed = False
        for ticket, entry in list(self.reserved.items()):
            if now > entry.expires:
                del self.reserved[ticket]
                self._remember(ticket, Verdict("refused", ticket, reason="ticket expired",
                                               wait_s=self.options.min_retry_s))
                changed = True
        for ticket, entry in list(self.line.items()):
            if now > entry.expires:
                del self.line[ticket]
                changed = True
        for ticket, (_, _, until) in list(self.resumes.items()):
            if now > until:
                del self.resumes[ticket]
        if changed:
            self._promote(now)

    # -- views ------------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        """Total capacity of the live nodes."""
        return sum(n.capacity for n in self.nodes.values() if n.alive)

    def node_views(self) -> list[NodeView]:
        """Every known node, sorted by id."""
        return [
            NodeView(node, n.url, n.capacity, self._count(self.active, node),
                     self._count(self.reserved, node), n.alive, n.draining)
            for node, n in sorted(self.nodes.items())
        ]

    def estimated_wait(self, position: int, now: float) -> float:
        """Seconds until line position ``position`` (1-based) gets a slot (the single-server
        estimate of ``speechpipe.server.admission`` over every placeable slot)."""
        free = sum(self._free(n) for n in self.nodes if self._open(n))
        if position <= free:
            return 0.0
        # an unclaimed reservation is claimed within ticket_ttl_s or lapses: until then the
        # line's head may get that slot (a redirect never followed), so it does not count
        # as a whole session ahead -- the wait is until it lapses (issue 74)
        lapsing = sorted(max(0.0, e.expires - now) for e in self.reserved.values()
                         if self._open(e.node))
        if position <= free + len(lapsing):
            return lapsing[position - 1 - max(0, free)]
        k = position - 1 - max(0, free) - len(lapsing)
        mean = self._mean_s
        floor = 0.1 * mean
        remaining = sorted(max(floor, mean - (now - e.since)) for e in self.active.values()
                           if self._open(e.node))
        if not remaining:
            return mean
        return remaining[k % len(remaining)] + (k // len(remaining)) * mean

    def check(self) -> None:
        """Raise ``AssertionError`` if an invariant does not hold (for tests)."""
        assert self.admitted == self.ended + self.lost + len(self.active), "accounting"
        for node, state in self.nodes.items():
            used = self._count(self.active, node) + self._count(self.reserved, node)
            assert used <= state.capacity or not state.alive, f"node {node} over capacity"
            if not state.alive:
                assert used == 0, f"lost node {node} still holds slots"
        assert not set(self.active) & set(self.reserved), "a ticket both active and reserved"
        assert not (set(self.active) | set(self.reserved)) & set(self.line), "placed and waiting"
        order = [(not e.resumed, e.arrived, e.seq) for e in self.line.values()]
        assert order == sorted(order), "the line is not resumes first, then first come"

    def snapshot(self) -> dict[str, object]:
        """The ledger's counters, line and nodes as a JSON-able dict."""
        return {
            "capacity": self.capacity,
            "active": len(self.active),
            "reserved": len(self.reserved),
            "waiting": len(self.line),
            "admitted": self.admitted,
            "ended": self.ended,
            "lost": self.lost,
            "refused": self.refused,
            "resumed": self.resumed,
            "resumable": len(self.resumes),
            "line": [{"position": i, "resume": e.resumed, "node": e.node,
                      "resuming_live": bool(e.pending)}
                     for i, e in enumerate(self.line.values(), start=1)],
            "nodes": [_view_dict(v) for v in self.node_views()],
            # no room ids (each is a capability): the node and the counts of each room
            "rooms": [{"node": self.nodes[n].url if n in self.nodes else n, **counts}
                      for n, counts in sorted(self.rooms.values(), key=lambda r: r[0])],
        }

    # -- inside -----------------------------------------------------------------------------
    def _known(self, ticket: str) -> bool:
        return (ticket in self.active or ticket in self.reserved or ticket in self.line
                or ticket in self._answers)

    def _open(self, node: str) -> bool:
        state = self.nodes.get(node)
        return state is not None and state.alive and not state.draining

    def _free(self, node: str) -> int:
        used = self._count(self.active, node) + self._count(self.reserved, node)
        return self.nodes[node].capacity - used

    @staticmethod
    def _count(entries: dict[str, _Entry], node: str) -> int:
        return sum(1 for e in entries.values() if e.node == node)

    def _placeable(self) -> bool:
        return any(self._open(n) for n in self.nodes)

    def _place(self, preferred: str) -> str | None:
        """The node for the next admission: the client's own if it has room, else the open
        node with the most free slots (ties by name), else none."""
        if self._open(preferred) and self._free(preferred) > 0:
            return preferred
        best = max((n for n in sorted(self.nodes) if self._open(n)),
                   key=lambda n: self._free(n), default=None)
        return best if best is not None and self._free(best) > 0 else None

    def _reserve(self, ticket: str, entry: _Entry, node: str, now: float) -> None:
        self.reserved[ticket] = _Entry(entry.client, entry.token, now, node,
                                       now + self.options.ticket_ttl_s, entry.resumed, entry.seq,
                                       entry.arrived)

    def _unreserve(self, ticket: str, entry: _Entry, now: float) -> None:
        """A reservation's node went away before the claim: back to the head of the line."""
        del self.reserved[ticket]
        entry.expires = now + self.options.waiter_ttl_s
        self._enqueue(ticket, entry)

    def _enqueue(self, ticket: str, entry: _Entry) -> None:
        """Into the line at its place: resumes first, then by arrival."""
        self.line[ticket] = entry
        self._resort()

    def _resort(self) -> None:
        self.line = OrderedDict(sorted(
            self.line.items(), key=lambda item: (not item[1].resumed, item[1].arrived,
                                                 item[1].seq)))

    def _pending_on(self, session: str) -> _Entry | None:
        """The waiting request that resumes the live session ``session``, if any."""
        return next((e for e in self.line.values() if e.pending == session), None)

    def _promote(self, now: float) -> None:
        for ticket, entry in list(self.line.items()):
            if entry.pending:  # not while the session it resumes is active
                continue
            target = self._place(entry.node)
            if target is None:
                return
            del self.line[ticket]
            self._reserve(ticket, entry, target, now)

    def _end(self, ticket: str, now: float) -> None:
        entry = self.active.pop(ticket)
        waiter = self._pending_on(ticket)
        if waiter is not None:  # it ended, it was not lost: an ordinary request now
            waiter.pending = ""
        self.ended += 1
        self._seen += 1
        weight = max(0.1, 1.0 / min(self._seen, 20))
        self._mean_s += weight * ((now - entry.since) - self._mean_s)
        self._remember(ticket, Verdict("refused", ticket, reason="session ended",
                                       wait_s=self.options.min_retry_s))

    def _held_by(self, *, client: str = "", token: str = "", besides: str = "") -> int:
        """Sessions (active, reserved, waiting) of a client or token, not counting
        ``besides`` (the live session a resume replaces)."""
        entries = [e for t, e in (*self.active.items(), *self.reserved.items(),
                                  *self.line.items()) if t != besides]
        if client:
            return sum(1 for e in entries if e.client == client)
        return sum(1 for e in entries if e.token == token)

    def _refuse(self, ticket: str, reason: str, wait: float | None = None) -> Verdict:
        self.refused += 1
        hint = self._mean_s if wait is None else wait
        verdict = Verdict("refused", ticket, reason=reason,
                          wait_s=float(max(self.options.min_retry_s, math.ceil(hint))))
        self._remember(ticket, verdict)
        return verdict

    def _remember(self, ticket: str, verdict: Verdict) -> None:
        self._answers[ticket] = verdict
        while len(self._answers) > 4096:
            self._answers.popitem(last=False)


def _same_holder(client: str, token: str, asking_client: str, asking_token: str) -> bool:
    """Whether a request comes from a session's holder: its token key when it had one,
    else its client key."""
    if token:
        return asking_token == token
    return bool(client) and asking_client == client


def _view_dict(view: NodeView) -> dict[str, object]:
    return {name: getattr(view, name) for name in NodeView.__slots__}
