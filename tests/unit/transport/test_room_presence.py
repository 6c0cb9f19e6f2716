"""Issue 46: a conversation's participants see who is present (``presence``: the speaking
members and a listener count), at most one event per half second: the pure parts (over a
socket: the cli tier)."""

from __future__ import annotations

import json

import pytest

from speechpipe.transport.room import (
    Member,
    Role,
    RoomRegistry,
    Throttle,
    presence_of,
)


def test_presence_names_speaking_members_and_counts_listeners() -> None:
    registry = RoomRegistry()
    room = registry.create(0.0, conversation=True)
    registry.join(room, Member("aa", Role.PARTICIPANT, "es"))
    registry.join(room, Member("l1", Role.LISTENER, "de"))
    registry.join(room, Member("bb", Role.PARTICIPANT, "en"))
    registry.join(room, Member("l2", Role.LISTENER, "fr"))
    assert presence_of(room) == {
        "type": "presence", "listeners": 2,
        "members": [{"session": "aa", "role": "participant", "target_lang": "es"},
                    {"session": "bb", "role": "participant", "target_lang": "en"}]}
    registry.leave(room, room.members["l1"])
    assert presence_of(room)["listeners"] == 1
    assert "l2" not in json.dumps(presence_of(room))  # a listener is counted, never named


def test_throttle_sends_the_first_change_at_once_and_coalesces_a_burst() -> None:
    throttle = Throttle(0.5)
    assert throttle.changed(10.0) == 0.0
    throttle.sent(10.0)
    assert throttle.changed(10.1) == pytest.approx(0.4)  # one send, due at 10.5 ...
    assert all(throttle.changed(10.1 + i / 100) is None for i in range(30))  # ... for all
    throttle.sent(10.5)
    assert throttle.changed(11.5) == 0.0  # quiet for a while: at once again
