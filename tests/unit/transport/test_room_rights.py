"""Issue 46: who may speak in a room (the pure rules; over a real socket: the cli tier), and
start fields that cannot be encoded refused with bad_start for every role."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from speechpipe.transport.codes import ErrorCode
from speechpipe.transport.protocol import ProtocolError, parse_text
from speechpipe.transport.room import Role, Room
from speechpipe.transport.room_access import EntryRequest, Join, JoinLimiter, Open, Refuse, decide

ROOM = Room("room-a", 0.0, opener_key="jti:opener")


# the room's invite is random: its id says "invite", the same in every process (each of
# pytest-xdist's workers must collect the same tests)
@pytest.mark.parametrize("role,claim_room,claim_role,key,invite,tokens", list(itertools.product(
    list(Role), [None, "room-a", "room-b"], [None, "speaker", "listener", "participant"],
    [None, "jti:opener", "jti:other"], [None, "wrong", ROOM.invite], [False, True])),
    ids=lambda value: "invite" if value == ROOM.invite else None)
def test_every_combination_of_role_claim_and_right(role: Role, claim_room: str | None,
                                                   claim_role: str | None, key: str | None,
                                                   invite: str | None, tokens: bool) -> None:
    ask = EntryRequest(role, "room-a", invite, key=key, claim_room=claim_room,
                       claim_role=claim_role, tokens_required=tokens)
    entry = decide(ask, ROOM)
    if claim_role is not None and claim_role != role or claim_room == "room-b":
        assert entry == Refuse(ErrorCode.UNAUTHORIZED, entry.message)  # type: ignore[union-attr]
        return
    right = (role is Role.LISTENER or key == "jti:opener" or invite == ROOM.invite
             or (claim_room == "room-a" and claim_role in ("speaker", "participant")))
    if right:
        assert entry == Join("room-a")
    else:
        assert isinstance(entry, Refuse)
        assert entry.code == (ErrorCode.UNAUTHORIZED if tokens else ErrorCode.NOT_A_SPEAKER)


def test_rooms_that_do_not_exist() -> None:
    assert decide(EntryRequest(Role.SPEAKER), None) == Open()
    assert decide(EntryRequest(Role.SPEAKER, claim_room="x", claim_role="speaker"),
                  None) == Open("x")
    assert isinstance(decide(EntryRequest(Role.PARTICIPANT, "x"), None), Refuse)
    assert isinstance(decide(EntryRequest(Role.LISTENER, "x", claim_room="x"), None), Refuse)


def test_join_limiter_per_address_and_room() -> None:
    limiter = JoinLimiter(per_ip_s=1, ip_burst=2, per_room_s=10, room_burst=3)
    assert limiter.admit("a", "r", 0.0) is None and limiter.admit("a", "r", 0.0) is None
    refused = limiter.join("a", "r", 0.0)
    assert refused is not None and 0.9 < refused.wait_s <= 1.0 and refused.turn
    # the room's third: the turn "a" was booked spends a's bucket, not the room's
    assert limiter.admit("b", "r", 0.0) is None
    assert limiter.admit("c", "r", 0.0) is not None  # the room's burst is spent
    # "a"'s next token is its booked turn's: with the turn it passes
    assert limiter.join("a", "r", 1.0, refused.turn) is None


def test_one_address_booking_turns_leaves_the_room_to_the_others() -> None:
    """Issue 74 review: turns booked for one address's refused joins (a flood that never
    comes back, or an audience behind one NAT) used to borrow the room's tokens too, so
    every other address was refused for as long as the booked line (up to 30 s)."""
    limiter = JoinLimiter(per_ip_s=1, ip_burst=1, per_room_s=0.001, room_burst=6)
    assert limiter.admit("flood", "r", 0.0) is None
    refused = [limiter.join("flood", "r", 0.0) for _ in range(20)]
    assert all(r is not None and r.turn for r in refused)
    assert [limiter.admit(ip, "r", 0.0) for ip in ("b", "c", "d", "e")] == [None] * 4
    # a turn taken is charged to the room when it is taken: the room's sixth token
    first = refused[0]
    assert first is not None
    assert limiter.join("flood", "r", first.wait_s, first.turn) is None
    assert limiter.admit("f", "r", first.wait_s) is not None  # the room's burst is spent


HOSTILE = ["\ud800", "a\x00b", "x" * 65536, "\U0001f600", "\udfff\ud800", "\x7f"]
FIELDS = ["source_lang", "target_lang", "room", "token", "ticket", "resume", "invite"]


@pytest.mark.parametrize("field,value", list(itertools.product(FIELDS, HOSTILE)))
@pytest.mark.parametrize("role", [None, "speaker", "listener", "participant"])
def test_hostile_strings_are_bad_start_for_every_role(role: str | None, field: str,
                                                      value: str) -> None:
    data: dict[str, Any] = {"type": "start", "role": role, "room": "r" if role else None}
    data[field] = value
    with pytest.raises(ProtocolError) as info:
        parse_text(json.dumps(data))
    assert info.value.code == ErrorCode.BAD_START and info.value.close_code == 4000
