"""The rooms core (``transport.room``): outboxes, feeds' history, the registry's limits."""

from __future__ import annotations

import pytest

from speechpipe.transport.room import (
    FULL,
    SOURCE_ONLY,
    Feed,
    Member,
    Outbox,
    Outgoing,
    Role,
    RoomError,
    RoomRegistry,
    Subscriber,
    new_room_id,
)


def item(kind: str, t: float, utterance: int = 0, final: bool = False) -> Outgoing:
    return Outgoing(kind, (f"{kind}{t}",), t, utterance, final)


def sub(capacity: int = 4) -> Subscriber:
    return Subscriber("m", "en", Outbox(capacity))


def test_an_outbox_that_fills_overflows_and_takes_nothing_more() -> None:
    woken: list[int] = []
    box = Outbox(2, lambda: woken.append(1))
    assert box.offer(item("source", 0)) and box.offer(item("source", 1))
    assert not box.offer(item("source", 2))
    assert box.overflowed and len(box) == 0, "an overflowed outbox is emptied"
    assert not box.offer(item("source", 3))
    assert len(woken) == 3


def test_publishing_never_waits_for_a_full_subscriber_and_reports_it() -> None:
    feed = Feed(("s", "en"))
    slow, fast = sub(1), sub(100)
    feed.join(slow, FULL, 0)
    feed.join(fast, FULL, 0)
    assert feed.publish(item("audio", 1), 1) == []
    assert feed.publish(item("audio", 2), 2) == [slow]
    assert feed.publish(item("audio", 3), 3) == []
    assert [i.published for i in fast.outbox.take()] == [1, 2, 3]


def test_a_late_joiner_gets_recent_committed_captions_then_the_current_state() -> None:
    feed = Feed(("s", "en"), history_s=60.0, history_items=10)
    feed.publish(item("target", 0, 0, final=True), 0)  # old: beyond the minute at t=100
    feed.publish(item("target", 50, 1, final=True), 50)
    feed.publish(item("source", 90, 2), 90)
    feed.publish(item("target", 91, 2), 91)
    feed.publish(item("audio", 92, 2), 92)
    backlog = feed.join(sub(), FULL, 100)
    assert [(i.kind, i.published) for i in backlog] == [
        ("target", 50), ("source", 90), ("target", 91)], "no audio in the backlog"
    feed.publish(item("target", 101, 2, final=True), 101)
    assert "target" not in feed.current, "a final hypothesis ends the current state"


def test_source_only_subscribers_get_only_captions() -> None:
    feed = Feed(("s", "en"))
    captions = sub(10)
    feed.join(captions, SOURCE_ONLY, 0)
    for kind in ("source", "target", "audio", "vad"):
        feed.publish(item(kind, 1), 1)
    assert [i.kind for i in captions.outbox.take()] == ["source", "vad"]


def test_history_is_bounded_in_count() -> None:
    feed = Feed(("s", "en"), history_items=3)
    for t in range(10):
        feed.publish(item("source", t, t, final=True), t)
    assert [i.published for i in feed.history] == [7, 8, 9]


def test_listener_limits_per_room_and_per_server() -> None:
    reg = RoomRegistry(max_listeners_per_room=2, max_listeners=3)
    a, b = reg.create(0), reg.create(0)
    reg.join(a, Member("1", Role.LISTENER, "en"))
    reg.join(a, Member("2", Role.LISTENER, "en"))
    with pytest.raises(RoomError) as full:
        reg.join(a, Member("3", Role.LISTENER, "en"))
    assert full.value.code == "room_full"
    reg.join(a, Member("s", Role.SPEAKER, "en"))  # speakers are not listeners
    reg.join(b, Member("4", Role.LISTENER, "en"))
    with pytest.raises(RoomError, match="server"):
        reg.join(b, Member("5", Role.LISTENER, "en"))


def test_rooms_are_random_and_forgotten_with_their_last_member() -> None:
    assert len({new_room_id() for _ in range(100)}) == 100
    assert len(new_room_id()) >= 32
    reg = RoomRegistry()
    room = reg.create(0)
    speaker = Member("s", Role.SPEAKER, "en")
    reg.join(room, speaker)
    room.feed(("s", "en"))
    listener = Member("l", Role.LISTENER, "en", subscriber=sub())
    reg.join(room, listener)
    room.feeds[("s", "en")].join(listener.subscriber, FULL, 0)  # type: ignore[arg-type]
    assert reg.leave(room, speaker) == [listener.subscriber], "its feeds end"
    assert room.id in reg.rooms
    reg.leave(room, listener)
    assert room.id not in reg.rooms
    with pytest.raises(RoomError) as gone:
        reg.get(room.id)
    assert gone.value.code == "no_room"


def test_a_late_joiner_starts_with_the_phrase_playing_now_not_mid_word() -> None:
    feed = Feed(("s", "en"))

    def speech(t: float, seconds: float) -> Outgoing:
        return Outgoing("audio", (f"a{t}", b"pcm"), t, 0, speech_s=seconds)

    feed.publish(speech(10.0, 2.0), 10.0)  # plays 10-12
    feed.publish(speech(10.5, 2.0), 10.5)  # made early: plays 12-14, back to back
    feed.publish(speech(10.6, 1.0), 10.6)  # plays 14-15
    joined = feed.join(sub(10), FULL, 12.5)  # the second phrase is playing for the others
    assert [i.published for i in joined if i.kind == "audio"] == [10.5, 10.6]
    assert [i.published for i in feed.join(sub(10), FULL, 15.5) if i.kind == "audio"] == []
