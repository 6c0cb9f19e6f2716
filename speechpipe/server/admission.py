"""Admission control: hold at most ``capacity`` sessions at real time; queue or refuse the rest.

``capacity`` is the number of sessions this machine holds at real time. It is configured
(``speechpipe serve --capacity N``) or, without the flag, estimated at start-up by a short
calibration (``speechpipe.server.load_control.calibrate_capacity``: a timed batched inference; a
rough figure — measure the real one with ``speechpipe bench load`` and configure it).

A session over capacity either **waits** in a first-come-first-served line, receiving
``status`` events (``queued`` with its position and an estimated wait, then ``admitted``),
or is **refused** (``over_capacity`` error, close 1013, ``retry_after_s``) when the line is
full, the estimated wait exceeds ``max_wait_s``, or its client already holds
``per_client`` sessions (active or waiting; client = the ``start``'s client id, else the IP;
by default half the capacity, loopback clients exempt: ``AdmissionCore.client_limit``).

``AdmissionCore`` is pure (time is a parameter); ``AdmissionGate`` is the thin async shell the
server calls (``transport.ws_connection.CapacityGate``): it holds a slot for the life of a
session and sends the status events.

The wait estimate for line position p (1-based) with C active sessions whose expected
remaining times are r_1 <= ... <= r_C: ``r_((p-1) mod C + 1) + floor((p-1)/C) * D``, where D is
the expected session length (an average of the sessions seen, starting at
``expected_session_s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from speechpipe.errors import AdmissionError
from speechpipe.server.options import AdmissionOptions
from speechpipe.stages.frames import StatusEvent

__all__ = ["AdmissionOptions", "AdmissionCore", "AdmissionGate", "Decision"]


def _is_loopback(client: str) -> bool:
    try:
        return ipaddress.ip_address(client).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class Decision:
    """What admission decided for one session: admitted, queued or refused."""
    kind: Literal["admitted", "queued", "refused"]
    position: int = 0  # 1-based place in line when queued
    wait_s: float = 0.0  # estimated wait (queued) or the retry hint (refused)
    reason: str = ""


@dataclass
class _Ticket:
    client: str
    since: float  # admitted at, or queued at


@dataclass
class AdmissionCore:
    """Slots and the waiting line; every method takes ``now`` (monotonic seconds)."""

    options: AdmissionOptions
    capacity: int = 1
    active: dict[int, _Ticket] = field(default_factory=dict)
    waiting: dict[int, _Ticket] = field(default_factory=dict)  # insertion order = line order
    refused: int = 0
    admitted_total: int = 0
    _mean_s: float = 0.0
    _seen: int = 0

    def __post_init__(self) -> None:
        if self.options.capacity is not None:
            self.capacity = self.options.capacity
        self._mean_s = self.options.expected_session_s

    # -- decisions ------------------------------------------------------------------------
    def request(self, ticket: int, client: str, now: float) -> Decision:
        """A new session asks for a slot."""
        opts = self.options
        limit = self.client_limit(client)
        if limit is not None and self._held_by(client) >= limit:
            self.refused += 1
            return Decision("refused", wait_s=self._retry(self._client_wait(client, now)),
                            reason=f"this client already has {limit} sessions")
        if not self.waiting and len(self.active) < self.capacity:
            self.active[ticket] = _Ticket(client, now)
            self.admitted_total += 1
            return Decision("admitted")
        position = len(self.waiting) + 1
        wait = self.estimated_wait(position, now)
        if len(self.waiting) >= opts.max_queue:
            self.refused += 1
            return Decision("refused", wait_s=self._retry(wait), reason="the waiting line is full")
        if wait > opts.max_wait_s:
            self.refused += 1
            return Decision("refused", wait_s=self._retry(wait),
                            reason=f"the estimated wait ({wait:.0f} s) is too long")
        self.waiting[ticket] = _Ticket(client, now)
        return Decision("queued", position=position, wait_s=wait)

    def client_limit(self, client: str) -> int | None:
        """Sessions (active + waiting) ``client`` may hold; ``None``: no limit.

        By default half the capacity, rounded up, so one address cannot hold every slot;
        clients on a loopback address are not limited by default: they are this machine
        (a benchmark, or a reverse proxy that does not pass the client's address: see
        ``--client-ip-header``). An explicit ``per_client`` applies to every client."""
        if self.options.per_client is not None:
            return self.options.per_client or None
        if _is_loopback(client):
            return None
        return max(1, math.ceil(self.capacity / 2))

    def status(self, ticket: int, now: float) -> Decision:
        """Where ``ticket`` stands now: admitted, or queued with its position and wait."""
        if ticket in self.active:
            return Decision("admitted")
        for position, waiting in enumerate(self.waiting, start=1):
            if waiting == ticket:
                return Decision("queued", position=position,
                                wait_s=self.estimated_wait(position, now))
        return Decision("refused", reason="unknown ticket")

    def release(self, ticket: int, now: float) -> list[int]:
        """A session ended (or a waiting one gave up); returns the tickets admitted now."""
        held = self.active.pop(ticket, None)
        if held is not None:
            self._seen += 1
            weight = max(0.1, 1.0 / min(self._seen, 20))
            self._mean_s += weight * ((now - held.since) - self._mean_s)
        else:
            self.waiting.pop(ticket, None)
        return self.promote(now)

    def promote(self, now: float) -> list[int]:
        """Admit waiting sessions while slots are free; returns the admitted."""
        admitted = []
        while self.waiting and len(self.active) < self.capacity:
            ticket = next(iter(self.waiting))
            waiting = self.waiting.pop(ticket)
            self.active[ticket] = _Ticket(waiting.client, now)
            self.admitted_total += 1
            admitted.append(ticket)
        return admitted

    def set_capacity(self, capacity: int, now: float) -> list[int]:
        """Change the capacity (e.g. after calibration); waiting sessions may be admitted."""
        self.capacity = max(1, capacity)
        return self.promote(now)

    # -- estimates ------------------------------------------------------------------------
    @property
    def expected_session_s(self) -> float:
        """The session length the wait estimate assumes (learned from ended sessions)."""
        return self._mean_s

    def estimated_wait(self, position: int, now: float) -> float:
        """Seconds until line position ``position`` (1-based) gets a slot."""
        free = self.capacity - len(self.active)
        if position <= free:
            return 0.0
        k = position - 1 - max(0, free)
        mean = self._mean_s
        floor = 0.1 * mean  # a session past its expected length may still run a while
        remaining = sorted(max(floor, mean - (now - t.since)) for t in self.active.values())
        if not remaining:
            return 0.0
        slots = len(remaining)
        return remaining[k % slots] + (k // slots) * mean

    def _held_by(self, client: str) -> int:
        return sum(1 for t in itertools.chain(self.active.values(), self.waiting.values())
                   if t.client == client)

    def _client_wait(self, client: str, now: float) -> float:
        mine = [max(0.0, self._mean_s - (now - t.since))
                for t in self.active.values() if t.client == client]
        return min(mine) if mine else self._mean_s

    def _retry(self, wait: float) -> float:
        return float(max(self.options.min_retry_s, math.ceil(wait)))


Notify = Callable[[StatusEvent], Awaitable[None]]


class AdmissionGate:
    """The async shell: ``async with gate.slot(client, notify): ...`` holds one slot.

    Waiting clients get ``queued`` status events (when their position or estimate changes,
    and at least every ``status_interval_s``), then ``admitted``. A refusal raises
    ``AdmissionError`` (the server closes with 1013 and the retry hint). If the client goes
    away while waiting (``notify`` raises), its place in line is given up."""

    def __init__(
        self,
        core: AdmissionCore,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_admitted: Callable[[float], None] | None = None,
    ) -> None:
        self.core = core
        self._clock = clock
        self._on_admitted = on_admitted  # gets the seconds each admitted session waited
        self._ids = itertools.count(1)
        self._changed = asyncio.Event()

    @property
    def capacity(self) -> int:
        """Sessions held at once."""
        return self.core.capacity

    def set_capacity(self, capacity: int) -> None:
        """Change the capacity and admit whoever now fits."""
        self.core.set_capacity(capacity, self._clock())
        self._wake()

    @contextlib.asynccontextmanager
    async def slot(self, client: str, notify: Notify, *, token: str = "", ticket: str = "",
                   resume: str = "") -> AsyncIterator[None]:
        """Hold a capacity slot for one session (waiting in line with status events);
        ``token``, ``ticket`` and ``resume`` matter in cluster mode only."""
        del token, ticket, resume
        ticket_id = next(self._ids)
        core = self.core
        asked = self._clock()
        decision = core.request(ticket_id, client, asked)
        if decision.kind == "refused":
            raise AdmissionError(
                f"server at capacity: {decision.reason}; retry in {decision.wait_s:.0f} s",
                retry_after_s=decision.wait_s,
            )
        try:
            if decision.kind == "queued":
                await self._wait_in_line(ticket_id, decision, notify)
                waited = self._clock() - asked
                await notify(StatusEvent(
                    "admitted", "your session is starting",
                    detail={"waited_s": round(waited, 1), "capacity": core.capacity},
                ))
            if self._on_admitted is not None:
                self._on_admitted(self._clock() - asked)
            yield
        finally:
            core.release(ticket_id, self._clock())
            self._wake()

    async def _wait_in_line(self, ticket: int, decision: Decision, notify: Notify) -> None:
        interval = self.core.options.status_interval_s
        last: tuple[int, int] | None = None
        last_sent = -math.inf
        while decision.kind == "queued":
            shown = (decision.position, int(decision.wait_s))
            now = self._clock()
            if shown != last or now - last_sent >= interval:
                await notify(_queued_event(decision, self.core.capacity))
                last, last_sent = shown, now
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await changed.wait()
            decision = self.core.status(ticket, self._clock())

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


def _queued_event(decision: Decision, capacity: int) -> StatusEvent:
    wait = decision.wait_s
    return StatusEvent(
        "queued",
        f"the server is busy: you are number {decision.position} in line "
        f"(about {wait:.0f} s)",
        detail={
            "position": decision.position,
            "estimated_wait_s": round(wait, 1),
            "capacity": capacity,
        },
    )
