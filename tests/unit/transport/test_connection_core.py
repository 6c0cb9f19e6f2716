"""The connection's state machine without I/O: client messages in, actions out."""

from __future__ import annotations

import json

import numpy as np

from speechpipe.transport.connection_core import (
    AcceptStart,
    AddIce,
    ConnectionCore,
    Fail,
    FlushInput,
    OpenPeer,
    PushAudio,
    SendError,
    State,
    StopInput,
)
from speechpipe.transport.quotas import EXPIRED


def core() -> ConnectionCore:
    return ConnectionCore(max_message_bytes=1 << 17, max_lead_s=5.0)


def started() -> ConnectionCore:
    c = core()
    [accept] = c.receive(json.dumps({"type": "start", "sample_rate": 16000}), 0.0)
    assert isinstance(accept, AcceptStart) and c.state is State.STARTING
    c.session_opened(accept.start)
    assert c.state is State.STREAMING and c.session_open and c.started
    return c


def codes(actions: list) -> list[str]:
    return [a.code if isinstance(a, SendError | Fail) else type(a).__name__ for a in actions]


def test_before_start() -> None:
    c = core()
    assert codes(c.receive(b"\x00\x00", 0.0)) == ["not_started"]
    assert codes(c.receive('{"type": "flush"}', 0.0)) == ["not_started"]
    assert codes(c.receive("not json", 0.0)) == ["bad_json"]
    [bad] = c.receive(json.dumps({"type": "start", "sample_rate": 16000, "format": "x"}), 0.0)
    assert isinstance(bad, Fail) and bad.code == 4001 and bad.error is not None
    assert c.start_timed_out().code == 4005
    assert c.state is State.AWAITING_START and not c.session_open


def test_streaming_audio_and_control() -> None:
    c = started()
    pcm = np.zeros(320, np.int16).tobytes()
    [push] = c.receive(pcm, 0.0)
    assert isinstance(push, PushAudio) and push.seconds == 0.02
    assert codes(c.receive(b"\x00", 0.0)) == ["bad_frame"]
    assert codes(c.receive(pcm, 0.0, peer=True)) == ["webrtc_active"]
    assert codes(c.receive('{"type": "start", "sample_rate": 16000}', 0.0)) == ["bad_start"]
    assert isinstance(c.receive('{"type": "flush"}', 0.0)[0], FlushInput)
    ice = '{"type": "ice", "candidate": ""}'
    assert codes(c.receive(ice, 0.0)) == ["bad_message"]
    assert isinstance(c.receive(ice, 0.0, peer=True)[0], AddIce)
    assert isinstance(c.receive('{"type": "offer", "sdp": "v=0"}', 0.0)[0], OpenPeer)


def test_audio_far_ahead_of_real_time_closes_1008() -> None:
    c = started()
    second = np.zeros(16000, np.int16).tobytes()
    actions = [c.receive(second, 0.0)[0] for _ in range(7)]  # 7 s of audio at t = 0
    assert isinstance(actions[0], PushAudio)
    assert isinstance(actions[-1], Fail) and actions[-1].code == 1008
    assert actions[-1].reason == "too_fast"


def test_stop_and_expiry() -> None:
    c = started()
    assert isinstance(c.receive('{"type": "stop"}', 0.0)[0], StopInput)
    assert c.stop() and c.state is State.STOPPING and c.session_open
    assert not c.stop()  # once
    assert codes(c.receive(b"\x00\x00", 0.0)) == ["stopping"]
    assert codes(c.receive('{"type": "offer", "sdp": "v=0"}', 0.0)) == ["stopping"]
    assert codes(started().receive(EXPIRED, 0.0)) == ["session_expired", "StopInput"]
    c.closed()
    assert c.state is State.CLOSED and not c.session_open and c.started
