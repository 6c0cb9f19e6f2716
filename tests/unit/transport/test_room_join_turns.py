"""Issue 74: a room audience behind one address (a conference network, a company NAT). The
join limiter books each refused listener a turn (``retry_after_s`` is when *its* turn comes),
and clients that follow the documented retry rule (``docs/protocol.md``, "Retrying a
refusal": ``transport.client.retry_delay``) are all seated, by time on the pure limiter
(over loopback sockets: the cli tier)."""

from __future__ import annotations

import heapq
import math
import random

import pytest

from speechpipe.transport.client import retry_delay
from speechpipe.transport.limits import RoomOptions
from speechpipe.transport.room_access import JoinLimiter, JoinTurn

AUDIENCE = 200
SEATED_WITHIN_S = 20.0
MOST_REFUSALS = 2


def _default_limiter() -> JoinLimiter:
    rooms = RoomOptions()
    return JoinLimiter(per_ip_s=rooms.join_per_ip_s, ip_burst=rooms.join_ip_burst,
                       per_room_s=rooms.join_per_room_s, room_burst=rooms.join_room_burst)


def _seat_by_time(limiter: JoinLimiter, audience: int, seed: int,
                  arrivals: list[float] | None = None) -> tuple[list[float], list[int]]:
    """Every listener joins from one address (at ``arrivals``, default all at 0) and, when
    refused, comes back as the rule says: (when each was seated, refusals of each)."""
    rng = random.Random(seed)
    due = [(t, i) for i, t in enumerate(arrivals or [0.0] * audience)]
    heapq.heapify(due)
    seated = [float("nan")] * audience
    refusals = [0] * audience
    turns: list[str | None] = [None] * audience
    for _ in range(audience * 10):  # bounded: each listener at most 10 tries
        if not due:
            break
        now, who = heapq.heappop(due)
        refused = limiter.join("192.0.2.1", "venue", now, turns[who])
        if refused is None:
            seated[who] = now
            continue
        refusals[who] += 1
        turns[who] = refused.turn
        # the server tells the wait rounded up to a hundredth (transport.refusals)
        told = math.ceil(round(refused.wait_s * 100, 6)) / 100
        heapq.heappush(due, (now + retry_delay(told, rng.random), who))
    return seated, refusals


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_an_audience_behind_one_address_is_seated_by_turns(seed: int) -> None:
    seated, refusals = _seat_by_time(_default_limiter(), AUDIENCE, seed)
    assert all(t == t for t in seated), "someone was never seated"
    assert max(seated) <= SEATED_WITHIN_S, max(seated)
    assert max(refusals) <= MOST_REFUSALS, sorted(refusals)[-5:]
    assert sum(refusals) <= AUDIENCE - RoomOptions().join_ip_burst  # one each, once over


def test_an_audience_arriving_over_ten_seconds_is_seated_too() -> None:
    """People walking in: 200 over 10 s, a few at a time (faster than the address's rate)."""
    rng = random.Random(7)
    arrivals = sorted(rng.uniform(0.0, 10.0) for _ in range(AUDIENCE))
    seated, refusals = _seat_by_time(_default_limiter(), AUDIENCE, 7, arrivals)
    assert all(t == t for t in seated)
    assert max(seated) <= SEATED_WITHIN_S and max(refusals) <= MOST_REFUSALS


def test_each_refused_join_is_told_its_own_turn() -> None:
    """40 pass at once; the next ones are told 0.1 s, 0.2 s, 0.3 s ... (one per join the
    address's rate frees), not all the same 0.1 s."""
    limiter = _default_limiter()
    burst, rate = RoomOptions().join_ip_burst, RoomOptions().join_per_ip_s
    assert all(limiter.admit("192.0.2.1", "venue", 0.0) is None for _ in range(burst))
    told = [limiter.join("192.0.2.1", "venue", 0.0) for _ in range(5)]
    assert [t.wait_s for t in told if t] == pytest.approx([(k + 1) / rate for k in range(5)])
    turns = [t.turn for t in told if t]
    assert len(set(turns)) == 5 and all(turns)
    # a join without a turn cannot take one: it is booked after them
    late = limiter.join("192.0.2.1", "venue", 0.25)
    assert late is not None and late.wait_s == pytest.approx(0.6 - 0.25)
    # back too early: the rest of its wait, the same turn
    early = limiter.join("192.0.2.1", "venue", 0.05, turns[0])
    assert early == JoinTurn(pytest.approx(0.05), turns[0])  # type: ignore[arg-type]
    # each comes back at its turn (in any order) and is let in, once
    for k in (1, 0, 2, 4, 3):
        assert limiter.join("192.0.2.1", "venue", 0.55, turns[k]) is None, k
    assert limiter.join("192.0.2.1", "venue", 0.55, turns[0]) is not None  # used
    assert limiter.join("198.51.100.7", "venue", 0.55) is None  # another address: its own
    # a turn is good only from the address and into the room it was booked for
    other = limiter.join("192.0.2.1", "venue", 0.55)
    assert other is not None and other.turn
    assert limiter.join("198.51.100.8", "venue", 5.0, other.turn) is None  # its own burst
    assert limiter.join("192.0.2.1", "elsewhere", 0.56, other.turn) is not None


def test_turns_are_booked_only_so_far_ahead() -> None:
    """Past the booking bound nothing is booked: a longer retry, and the line stays short."""
    limiter = JoinLimiter(per_ip_s=10.0, ip_burst=1, per_room_s=0, room_burst=0,
                          book_ahead_s=2.0)
    assert limiter.admit("192.0.2.1", "r", 0.0) is None
    waits = [limiter.admit("192.0.2.1", "r", 0.0) for _ in range(40)]
    booked = [w for w in waits if w is not None and w <= 2.0]
    assert len(booked) == 20  # 0.1 .. 2.0 s
    later = [w for w in waits if w is not None and w > 2.0]
    assert len(later) == 20 and all(2.0 < w <= 2.2 for w in later)
    # a booked turn nobody takes lapses: the next join after it waits only for the rate
    fresh = JoinLimiter(per_ip_s=10.0, ip_burst=1, per_room_s=0, room_burst=0)
    assert fresh.admit("192.0.2.1", "r", 0.0) is None
    lapsed = fresh.join("192.0.2.1", "r", 0.0)
    assert lapsed is not None and lapsed.wait_s == pytest.approx(0.1)  # booked, not taken
    assert fresh.admit("192.0.2.1", "r", 60.0) is None
    assert fresh.join("192.0.2.1", "r", 60.0, lapsed.turn) is not None  # lapsed: no turn


def test_the_retry_rule_never_comes_back_early_and_spreads_a_little() -> None:
    assert retry_delay(2.0, lambda: 0.0) == 2.0
    top = retry_delay(2.0, lambda: 1.0)
    assert 2.0 < top <= 2.0 + 0.1 + 0.05 * 2.0 + 1e-9
