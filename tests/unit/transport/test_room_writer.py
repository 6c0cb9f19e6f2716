"""Issue 42: one writer per room feed (``transport.room_writer``). The publisher hands each
message to the feed once; the writer writes it directly to every idle listener in one pass
(yielding between chunks) and through the outbox to any busy one, so the order per listener
holds across the two paths and a stalled listener still overflows. The rule is the pure
``room.route``; here with fake sockets (no I/O)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from speechpipe.transport.room import (
    FULL,
    SOURCE_ONLY,
    Member,
    Outbox,
    Outgoing,
    Role,
    Route,
    Subscriber,
    route,
)
from speechpipe.transport.room_shell import RoomHub
from speechpipe.transport.room_writer import WRITE_CHUNK, Frames, frames_of, wire_of


def item(kind: str, n: int, pcm: bytes | None = None) -> Outgoing:
    parts: tuple[str | bytes, ...] = (f'{{"type":"{kind}","n":{n}}}',)
    return Outgoing(kind, parts + ((pcm,) if pcm is not None else ()), float(n))


class FakeSocket:
    """A listener's socket: what it was written directly; ``full`` stands for a write buffer
    at its limit (a listener that does not read)."""

    limit = 100

    def __init__(self) -> None:
        self.frames: list[Frames] = []
        self.writes = 0
        self.full = False
        self.open = True

    def buffered(self) -> int | None:
        return (self.limit if self.full else 0) if self.open else None

    def write(self, frames: Frames, wire: bytes = b"") -> None:
        """One write may carry several messages (queued together): each starts with its
        JSON text frame; recorded a message each."""
        assert wire == wire_of(frames), "the serialized bytes are the frames"
        self.writes += 1
        for data, text in frames:
            if text or not self.frames:
                self.frames.append(((data, text),))
            else:
                self.frames[-1] += ((data, text),)


class Metrics:
    def __init__(self) -> None:
        self.delays: list[float] = []
        self.drops = 0

    def rooms_changed(self, rooms: int, listeners: int) -> None:
        pass

    def fanout_dropped(self) -> None:
        self.drops += 1

    def fanout_delay(self, seconds: float, cpu_s: float = 0.0) -> None:
        self.delays.append(seconds)


def room_with(hub: RoomHub, count: int, *, capacity: int = 8) -> tuple[Any, list[Subscriber]]:
    """A room with a speaker ``s`` and ``count`` listeners on its English feed, each with a
    fake socket for direct writes."""
    room = hub.new_room("r")
    hub.registry.join(room, Member("s", Role.SPEAKER, "en"))
    feed = room.feed(("s", "en"))
    subs = []
    for i in range(count):
        sub = Subscriber(f"l{i}", "en", Outbox(capacity))
        sub.direct = FakeSocket()
        feed.join(sub, FULL, 0.0)
        subs.append(sub)
    return room, subs


def received(sub: Subscriber) -> list[tuple[str | bytes, ...]]:
    """Everything ``sub`` got so far, as message parts: its direct writes, then its outbox
    (what its sender would write next)."""
    direct = [tuple(data.decode() if text else data for data, text in frames)
              for frames in sub.direct.frames]
    return direct + [i.parts for i in sub.outbox.take()]


# -- the rule ---------------------------------------------------------------------------------

def test_route_writes_directly_only_to_an_idle_open_socket_with_nothing_queued() -> None:
    box = Outbox(4)
    assert route(box, 0, 100) is Route.DIRECT
    assert route(box, 99, 100) is Route.DIRECT
    assert route(box, 100, 100) is Route.OUTBOX, "its write buffer at the limit: busy"
    assert route(box, None, 100) is Route.OUTBOX, "no direct path (participant, WebRTC)"
    box.draining = True
    assert route(box, 0, 100) is Route.OUTBOX, "its sender is writing: never come between"
    box.draining = False
    box.offer(item("source", 1))
    assert box.busy and route(box, 0, 100) is Route.OUTBOX, "behind what is queued"
    box.take()
    assert not box.busy and route(box, 0, 100) is Route.DIRECT
    box.close()
    assert route(box, 0, 100) is Route.NONE
    full = Outbox(1)
    full.offer(item("source", 1))
    full.offer(item("source", 2))
    assert full.overflowed and route(full, 0, 100) is Route.NONE


def test_frames_are_encoded_once_text_then_binary() -> None:
    assert frames_of(item("audio", 3, b"\x01\x02")) == (
        (b'{"type":"audio","n":3}', True), (b"\x01\x02", False))


def test_wire_bytes_are_what_the_servers_protocol_writes() -> None:
    """A direct write puts ``wire_of`` on the transport: byte for byte what websockets' own
    server protocol writes for the same messages (small and 64 KiB payloads: the 7-, 16- and
    64-bit length forms)."""
    from websockets.protocol import State
    from websockets.server import ServerProtocol

    for payload in (b"\x01\x02", bytes(200), bytes(65_536)):
        frames = frames_of(item("audio", 3, payload))
        protocol = ServerProtocol(state=State.OPEN)
        for data, text in frames:
            (protocol.send_text if text else protocol.send_binary)(data)
        assert wire_of(frames) == b"".join(protocol.data_to_send())


# -- the writer -------------------------------------------------------------------------------

@pytest.mark.asyncio
@pytest.mark.parametrize("slice_s", [0.0, 1e9])
async def test_publishing_hands_the_message_once_and_the_writer_yields_when_its_slice_ends(
        monkeypatch: pytest.MonkeyPatch, slice_s: float) -> None:
    """The writer looks at the clock every ``WRITE_CHUNK`` listeners and lets the loop's other
    tasks run once it has held the loop for ``WRITE_SLICE_S``: with a slice of 0 it yields at
    every look, with an endless one the pass runs whole."""
    from speechpipe.transport import room_writer

    monkeypatch.setattr(room_writer, "WRITE_SLICE_S", slice_s)
    metrics = Metrics()
    hub = RoomHub(observer=metrics)
    count = 3 * WRITE_CHUNK + 5
    room, subs = room_with(hub, count)
    steps: list[int] = []  # how many listeners had it each time another task ran

    async def pipeline() -> None:
        for _ in range(10):
            steps.append(sum(1 for s in subs if s.direct.frames))
            await asyncio.sleep(0)

    other = asyncio.create_task(pipeline())  # the speaker's pipeline, on the same loop
    hub.publish(room, ("s", "en"), item("audio", 1, b"pcm"))
    assert not any(s.direct.frames for s in subs), "the publisher wrote nothing itself"
    await other
    assert all(len(s.direct.frames) == 1 for s in subs)
    if slice_s == 0.0:
        assert steps[:5] == [0, WRITE_CHUNK, 2 * WRITE_CHUNK, 3 * WRITE_CHUNK, count], (
            "one pass, a chunk of listeners between the other tasks' turns")
    else:
        assert steps[:2] == [0, count], "one pass, whole, between two of the other's turns"
    assert len(metrics.delays) == count, "each direct write counts in the fan-out histogram"
    assert all(not s.outbox.busy for s in subs), "no outbox used, no sender woken"


@pytest.mark.asyncio
async def test_every_listener_gets_the_same_bytes_whichever_path() -> None:
    hub = RoomHub()
    room, subs = room_with(hub, 6)
    subs[1].direct.full = True  # busy socket: the outbox
    subs[2].direct = None  # no direct path at all (a participant): the outbox
    subs[3].outbox.draining = True  # its sender is writing: the outbox
    messages = [item("source", 1), item("audio", 2, b"\x00\x01" * 50), item("target", 3)]
    for message in messages:
        hub.publish(room, ("s", "en"), message)
    await asyncio.sleep(0.01)
    subs[3].outbox.draining = False
    direct = [s.direct.frames for s in (subs[0], subs[4], subs[5])]
    assert direct[0] == direct[1] == direct[2] and len(direct[0]) == 3
    assert all(a[1][0] is b[1][0] for a, b in zip(direct[0], direct[1], strict=True)
               if len(a) > 1), "the PCM is one object, not a copy per listener"
    assert [i.parts for i in subs[1].outbox.take()] == [m.parts for m in messages]
    assert [i.parts for i in subs[2].outbox.take()] == [m.parts for m in messages]
    assert [i.parts for i in subs[3].outbox.take()] == [m.parts for m in messages]


@pytest.mark.asyncio
async def test_messages_queued_together_reach_an_idle_listener_in_one_write() -> None:
    """The captions and the translation of one decode are published together: an idle
    listener gets both (and what else was queued) in one write, in order, and each counts
    as a delivery; a listener whose sender is writing gets them all in its outbox."""
    metrics = Metrics()
    hub = RoomHub(observer=metrics)
    room, subs = room_with(hub, 3)
    subs[2].outbox.draining = True
    messages = [item("source", 1), item("target", 1), item("audio", 2, b"\x00\x01" * 8)]
    for message in messages:
        hub.publish(room, ("s", "en"), message)
    await asyncio.sleep(0.01)
    for sub in subs[:2]:
        assert sub.direct.writes == 1
        assert received(sub) == [m.parts for m in messages]
    assert subs[2].direct.writes == 0
    assert [i.parts for i in subs[2].outbox.take()] == [m.parts for m in messages]
    assert len(metrics.delays) == 2 * len(messages)


@pytest.mark.asyncio
async def test_the_order_per_listener_holds_across_the_direct_and_outbox_paths() -> None:
    hub = RoomHub()
    room, (sub,) = room_with(hub, 1, capacity=16)
    sock = sub.direct
    key = ("s", "en")
    sent = [item("source", n) for n in range(8)]

    hub.publish(room, key, sent[0])  # idle: direct
    await asyncio.sleep(0)
    sock.full = True  # its socket stops taking more: the outbox
    hub.publish(room, key, sent[1])
    await asyncio.sleep(0)
    sock.full = False  # the buffer drained, but message 1 is still queued: behind it
    hub.publish(room, key, sent[2])
    await asyncio.sleep(0)
    assert [i.parts for i in sub.outbox._items] == [sent[1].parts, sent[2].parts]
    # its sender takes them and writes them; meanwhile the writer must queue behind
    taken = sub.outbox.take()
    sub.outbox.draining = True
    hub.publish(room, key, sent[3])
    await asyncio.sleep(0)
    written = [i.parts for i in taken]
    sub.outbox.draining = False
    written += [i.parts for i in sub.outbox.take()]  # its sender's next round
    hub.publish(room, key, sent[4])  # idle again: direct
    await asyncio.sleep(0)
    assert received(sub)[:1] + written + received(sub)[1:] == [m.parts for m in sent[:5]]


@pytest.mark.asyncio
async def test_a_stalled_listener_overflows_and_is_dropped_during_the_talk() -> None:
    metrics = Metrics()
    hub = RoomHub(observer=metrics)
    room, (good, stalled) = room_with(hub, 2, capacity=3)
    key = ("s", "en")
    hub.publish(room, key, item("source", 0))
    await asyncio.sleep(0)
    stalled.direct.full = True  # it stopped reading: its socket is full, its sender blocked
    for n in range(1, 6):
        hub.publish(room, key, item("source", n))
        await asyncio.sleep(0)
    assert stalled.outbox.overflowed, "its outbox overflowed: the shell closes it (4012)"
    assert metrics.drops == 1
    assert id(stalled) not in room.feeds[key].subscribers
    assert len(good.direct.frames) == 6, "the other listener got everything, directly"


@pytest.mark.asyncio
async def test_a_listener_that_left_gets_nothing_more() -> None:
    hub = RoomHub()
    room, (sub,) = room_with(hub, 1)
    sub.outbox.close()  # its path ended (``leave`` closes it)
    hub.publish(room, ("s", "en"), item("source", 1))
    await asyncio.sleep(0)
    assert sub.direct.frames == [] and len(sub.outbox) == 0


@pytest.mark.asyncio
async def test_kinds_and_history_are_kept_by_the_writer() -> None:
    hub = RoomHub(clock=lambda: 1.0)  # the history's clock (the messages' ``published``)
    room, (full,) = room_with(hub, 1)
    captions = Subscriber("c", "en", Outbox(8))
    captions.direct = FakeSocket()
    feed = room.feeds[("s", "en")]
    feed.join(captions, SOURCE_ONLY, 0.0)
    final = Outgoing("source", ('{"f":1}',), 1.0, 0, True)
    hub.publish(room, ("s", "en"), final)
    hub.publish(room, ("s", "en"), item("audio", 2, b"x"))
    await asyncio.sleep(0.01)
    assert len(full.direct.frames) == 2 and len(captions.direct.frames) == 1
    assert list(feed.history) == [final], "a late joiner gets what the writer remembered"
    late = Subscriber("late", "en", Outbox(8))
    assert feed.join(late, FULL, 1.0)[0] is final


@pytest.mark.asyncio
async def test_speaker_left_comes_after_the_feeds_last_messages() -> None:
    hub = RoomHub()
    room, subs = room_with(hub, WRITE_CHUNK + 3)
    speaker = room.members["s"]
    from speechpipe.transport.room_shell import Presence

    presence = Presence(speaker, room)
    hub.publish(room, ("s", "en"), item("target", 1))
    hub.leave(presence)  # before the writer ran at all
    await asyncio.sleep(0.01)
    for sub in subs:
        kinds = [frames[0][0] for frames in sub.direct.frames]
        assert len(kinds) == 2 and b'"speaker_left"' in kinds[1], kinds


def test_without_a_loop_the_hub_delivers_at_once_through_the_outboxes() -> None:
    hub = RoomHub()
    room, (sub,) = room_with(hub, 1)
    sub.direct = None
    hub.publish(room, ("s", "en"), item("source", 1))
    assert [i.parts for i in sub.outbox.take()] == [item("source", 1).parts]
