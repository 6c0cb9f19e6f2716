"""``bench room``'s lean listeners, the pure parts: the SCM_TIMESTAMPNS decoding and the
reassembly of a fragmented message (over real sockets: the cli tier)."""

from __future__ import annotations

import math
import socket
import struct

from websockets.frames import Frame, Opcode

from speechpipe.bench.room_listeners import SO_TIMESTAMPNS, assembled, kernel_time


def test_the_kernel_receive_time_is_decoded_from_scm_timestampns() -> None:
    timespec = struct.pack("@ll", 1_700_000_000, 250_000_000)
    assert SO_TIMESTAMPNS == 35  # Linux; SCM_TIMESTAMPNS has the same value
    assert kernel_time([(socket.SOL_SOCKET, SO_TIMESTAMPNS, timespec)]) == 1_700_000_000.25
    assert math.isnan(kernel_time([])), "no cmsg: NaN, never a time of our own"
    assert math.isnan(kernel_time([(socket.SOL_SOCKET, 29, timespec)])), "SO_TIMESTAMP (us)"
    assert math.isnan(kernel_time([(socket.SOL_SOCKET, SO_TIMESTAMPNS, timespec[:8])]))


def test_a_fragmented_message_is_whole_once_its_last_fragment_comes() -> None:
    parts: list[Frame] = []
    assert assembled(parts, Frame(Opcode.TEXT, b'{"type":', fin=False)) is None
    assert assembled(parts, Frame(Opcode.PING, b"")) is None
    assert assembled(parts, Frame(Opcode.CONT, b' "x"}')) == '{"type": "x"}'
    assert assembled(parts, Frame(Opcode.BINARY, b"\x01\x02")) == b"\x01\x02"
    assert parts == []
