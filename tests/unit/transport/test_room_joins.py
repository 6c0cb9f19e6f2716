"""Issue 46: listener joins are rate-limited per address and per room by default (token
buckets, ``too_many_joins`` 4016 with ``retry_after_s``) and a normal room never trips them:
the rules by time (over real sockets: the cli tier)."""

from __future__ import annotations

import pytest

from speechpipe.transport.limits import RoomOptions
from speechpipe.transport.room_access import JoinLimiter


def _default_limiter() -> JoinLimiter:
    rooms = RoomOptions()
    return JoinLimiter(per_ip_s=rooms.join_per_ip_s, ip_burst=rooms.join_ip_burst,
                       per_room_s=rooms.join_per_room_s, room_burst=rooms.join_room_burst)


def test_the_defaults_never_trip_a_normal_room() -> None:
    limiter = _default_limiter()
    # a room of 1000 listeners, each from its own address, all joining within 6 s
    refused = [i for i in range(1000) if limiter.admit(f"10.0.{i // 250}.{i % 250}", "talk",
                                                       i * 0.006) is not None]
    assert refused == []
    # 200 listeners behind one address (a venue's NAT) joining within 20 s
    refused = [i for i in range(200) if limiter.admit("192.0.2.1", "venue", i * 0.1) is not None]
    assert refused == []


def test_the_defaults_stop_a_storm() -> None:
    """~300 joins/s from 40 addresses for 10 s, none coming back with its turn: the room's
    burst and its rate pass until the bucket is dry; then every refusal books a turn (issue
    74), none taken, and each wait stays within the booking bound."""
    limiter = _default_limiter()
    admitted = 0
    retries: list[float] = []
    for i in range(3000):
        retry = limiter.admit(f"198.51.100.{i % 40}", "talk", i / 300)
        if retry is None:
            admitted += 1
        else:
            retries.append(retry)
    room = RoomOptions()
    most = room.join_room_burst + room.join_per_room_s * 10
    assert room.join_room_burst < admitted <= most + 1
    bound = limiter.book_ahead_s + 1 / room.join_per_room_s
    assert retries and all(0 < r <= bound + 1e-9 for r in retries)
    # a listener that does bring its turn back passes at its time, storm or not
    turn = limiter.join("203.0.113.77", "talk", 10.0)
    assert turn is not None and turn.turn is not None
    assert limiter.join("203.0.113.77", "talk", 10.0 + turn.wait_s, turn.turn) is None


def test_one_address_is_limited_below_the_room() -> None:
    limiter = _default_limiter()
    burst = RoomOptions().join_ip_burst
    assert all(limiter.admit("203.0.113.9", "talk", 0.0) is None for _ in range(burst))
    retry = limiter.admit("203.0.113.9", "talk", 0.0)
    assert retry is not None and retry == pytest.approx(1 / RoomOptions().join_per_ip_s)
    assert limiter.admit("203.0.113.10", "talk", 0.0) is None  # another address passes
