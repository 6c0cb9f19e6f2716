"""Rooms in the cluster ledger's pure core: a room lives on one node; another node asks where;
a lost node's rooms end; ``cluster status`` lists rooms without their ids (no Ray here)."""

from __future__ import annotations

from speechpipe.cluster.cli import format_status
from speechpipe.cluster.ledger_core import LedgerCore, LedgerOptions


def two_nodes() -> LedgerCore:
    core = LedgerCore(LedgerOptions(lease_s=6.0))
    core.register("a", "ws://a/ws", 2, [], 0.0)
    core.register("b", "ws://b/ws", 2, [], 0.0)
    return core


def test_a_room_lives_on_the_node_that_reported_it_and_others_learn_where() -> None:
    core = two_nodes()
    assert core.room_node("r1") is None
    assert core.set_rooms("a", {"r1": {"speakers": 1, "listeners": 3}}, 1.0) == []
    assert core.room_node("r1") == ("a", "ws://a/ws")
    # b claims the same id while a is alive: refused, the room stays on a
    assert core.set_rooms("b", {"r1": {"speakers": 1}}, 1.5) == ["r1"]
    assert core.room_node("r1") == ("a", "ws://a/ws")
    # a's next report no longer has it: the room ended
    core.set_rooms("a", {}, 2.0)
    assert core.room_node("r1") is None


def test_a_lost_node_s_rooms_end_and_status_lists_rooms_without_ids() -> None:
    core = two_nodes()
    core.set_rooms("a", {"secret-room-id": {"speakers": 1, "listeners": 7,
                                            "participants": 0}}, 1.0)
    snapshot = core.snapshot()
    text = format_status(snapshot)
    assert "room on ws://a/ws: 1 speakers, 0 participants, 7 listeners" in text
    assert "secret-room-id" not in text and "secret-room-id" not in str(snapshot)
    core.heartbeat("b", 5.0)
    core.tick(8.0)  # a's lease (6 s) ran out
    assert core.room_node("secret-room-id") is None
    assert core.snapshot()["rooms"] == []
