"""The /ws protocol codec, pure: no sockets, no event loop."""

from __future__ import annotations

import json

import numpy as np
import pytest

from speechpipe.stages.frames import (
    FRAME_SAMPLES,
    ErrorEvent,
    SpeechChunk,
    StageTiming,
    StatusEvent,
    TextHypothesis,
    UtteranceEnd,
    VadEvent,
)
from speechpipe.transport.audio_io import InputResampler, OutputResampler, RealtimeGuard
from speechpipe.transport.codes import CloseCode, ErrorCode
from speechpipe.transport.protocol import (
    Flush,
    Ice,
    Offer,
    ProtocolError,
    Start,
    Stop,
    dumps,
    encode_event,
    parse_text,
    validate_audio,
)


def start(**fields: object) -> str:
    return json.dumps({"type": "start", **fields})


def test_start_defaults_and_fields() -> None:
    msg = parse_text(
        start(
            source_lang="es", target_lang="en", format="pcm_s16le", sample_rate=48000,
            output_sample_rate=24000, voice="en_US-joe-medium", mode="fast", token="t",
            future_field=1,
        )
    )
    assert isinstance(msg, Start)
    assert msg.sample_rate == 48000 and msg.token == "t"
    req = msg.request
    assert (req.source_lang, req.target_lang, req.voice) == ("es", "en", "en_US-joe-medium")
    assert (req.output_sample_rate, req.mode, req.pace) == (24000, "fast", "realtime")
    bare = parse_text(start())
    assert isinstance(bare, Start) and bare.sample_rate == 16000
    assert bare.request.source_lang == "auto" and bare.request.mode == "balanced"


@pytest.mark.parametrize(
    ("fields", "code", "close"),
    [
        ({"format": "opus"}, ErrorCode.UNSUPPORTED_FORMAT, CloseCode.UNSUPPORTED_FORMAT),
        ({"sample_rate": 7999}, ErrorCode.UNSUPPORTED_RATE, CloseCode.UNSUPPORTED_RATE),
        ({"sample_rate": 96000}, ErrorCode.UNSUPPORTED_RATE, CloseCode.UNSUPPORTED_RATE),
        ({"sample_rate": 16000.5}, ErrorCode.UNSUPPORTED_RATE, CloseCode.UNSUPPORTED_RATE),
        ({"output_sample_rate": 100}, ErrorCode.UNSUPPORTED_RATE, CloseCode.UNSUPPORTED_RATE),
        ({"sample_rate": "16000"}, ErrorCode.BAD_START, CloseCode.BAD_START),
        ({"sample_rate": True}, ErrorCode.BAD_START, CloseCode.BAD_START),
        ({"mode": "turbo"}, ErrorCode.BAD_START, CloseCode.BAD_START),
        ({"source_lang": 3}, ErrorCode.BAD_START, CloseCode.BAD_START),
        ({"voice": 5}, ErrorCode.BAD_START, CloseCode.BAD_START),
        ({"voice": "x" * 100}, "no_voice", CloseCode.UNSUPPORTED_REQUEST),  # not a name
        ({"token": 5}, ErrorCode.BAD_START, CloseCode.BAD_START),
    ],
)
def test_bad_start_is_fatal_with_its_close_code(
    fields: dict[str, object], code: str, close: int
) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_text(start(**fields))
    assert info.value.code == code
    assert info.value.close_code == close and info.value.fatal


def test_whole_float_rate_is_accepted() -> None:
    msg = parse_text(start(sample_rate=44100.0))
    assert isinstance(msg, Start) and msg.sample_rate == 44100


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("{not json", ErrorCode.BAD_JSON),
        ("[1, 2]", ErrorCode.BAD_JSON),
        ('"start"', ErrorCode.BAD_JSON),
        ("{}", ErrorCode.UNKNOWN_TYPE),
        ('{"type": 7}', ErrorCode.UNKNOWN_TYPE),
        ('{"type": "dance"}', ErrorCode.UNKNOWN_TYPE),
        ('{"type": "offer"}', ErrorCode.BAD_SDP),
        ('{"type": "offer", "sdp": ""}', ErrorCode.BAD_SDP),
        ('{"type": "ice", "candidate": 5}', ErrorCode.BAD_MESSAGE),
        ('{"type": "ice", "candidate": "c", "sdpMLineIndex": "0"}', ErrorCode.BAD_MESSAGE),
        ("[" * 100_000, ErrorCode.BAD_JSON),
    ],
)
def test_bad_messages_are_recoverable(text: str, code: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_text(text)
    assert info.value.code == code and not info.value.fatal


def test_control_and_signalling_messages() -> None:
    assert parse_text('{"type": "flush"}') == Flush()
    assert parse_text('{"type": "stop"}') == Stop()
    assert parse_text('{"type": "offer", "sdp": "v=0"}') == Offer("v=0")
    assert parse_text('{"type": "ice", "candidate": "candidate:1 1 udp 1 1.2.3.4 5 typ host",'
                      ' "sdpMid": "0", "sdpMLineIndex": 0}') == Ice(
        "candidate:1 1 udp 1 1.2.3.4 5 typ host", "0", 0
    )
    browser = {"type": "ice", "candidate": {"candidate": "c", "sdpMid": "0", "sdpMLineIndex": 0}}
    assert parse_text(json.dumps(browser)) == Ice("c", "0", 0)
    assert parse_text('{"type": "ice", "candidate": ""}') == Ice(None)


def test_validate_audio() -> None:
    pcm = np.array([1, -2, 32767, -32768], dtype="<i2").tobytes()
    assert validate_audio(pcm).tolist() == [1, -2, 32767, -32768]
    for bad in (b"", b"\x00\x01\x02", b"\x00" * 10):
        with pytest.raises(ProtocolError) as info:
            validate_audio(bad, max_bytes=8)
        assert info.value.code == ErrorCode.BAD_FRAME and not info.value.fatal


def hyp(side: str = "target", **kw: object) -> TextHypothesis:
    fields: dict[str, object] = dict(
        side=side, utterance=2, revision=3, committed="the little", tentative="prince",
        language="en", audio_start=16000, audio_end=48000, stream_pts=56000, final=False,
        timings=(StageTiming("asr", 0.2),),
    )
    fields.update(kw)
    return TextHypothesis(**fields)  # type: ignore[arg-type]


def test_encode_hypotheses() -> None:
    out = encode_event(hyp())
    assert out == {
        "type": "target", "utterance": 2, "revision": 3, "committed": "the little",
        "tentative": "prince", "final": False, "language": "en", "stream_t": 3.5,
        "audio_start": 1.0, "audio_end": 3.0,
    }
    assert encode_event(hyp("source", final=True))["type"] == "source"
    json.loads(dumps(out))


def test_encode_other_events() -> None:
    assert encode_event(VadEvent("start", 1, 8000, 9600)) == {
        "type": "vad", "kind": "start", "utterance": 1, "t": 0.5, "stream_t": 0.6,
        "forced": False,
    }
    assert encode_event(UtteranceEnd(1, 32000, "hola", "hello")) == {
        "type": "utterance_end", "utterance": 1, "stream_t": 2.0, "source": "hola",
        "target": "hello",
    }
    status = encode_event(StatusEvent("queued", "waiting", 0, {"position": 3, "x": object()}))
    assert status["status"] == "queued" and status["detail"]["position"] == 3
    json.loads(dumps(status))  # odd detail values are stringified, never break JSON
    err = encode_event(ErrorEvent("worker_error", "tts failed", 16000, utterance=4))
    assert err == {
        "type": "error", "code": "worker_error", "message": "tts failed", "fatal": False,
        "utterance": 4, "stream_t": 1.0,
    }


def test_audio_header_and_pcm() -> None:
    samples = (np.sin(np.arange(2205) / 5) * 10000).astype(np.int16)
    chunk = SpeechChunk(samples, 22050, utterance=1, text="hello", stream_pts=24000)
    same, pcm = OutputResampler(22050).encode(chunk)
    assert same["type"] == "audio" and same["samples"] == 2205 and same["stream_t"] == 1.5
    assert np.frombuffer(pcm, "<i2").tolist() == samples.tolist()
    header, pcm = OutputResampler(16000).encode(chunk)
    assert header["sample_rate"] == 16000
    assert header["samples"] == len(pcm) // 2 == pytest.approx(1600, abs=2)


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 44100, 48000])
def test_input_resampler_frames_are_contiguous(rate: int) -> None:
    rs = InputResampler(rate)
    rng = np.random.default_rng(0)
    frames = []
    for size in rng.integers(1, 2000, 50):
        frames += rs.feed(rng.integers(-1000, 1000, int(size)).astype(np.int16))
    frames += rs.finish()
    assert all(len(f.samples) == FRAME_SAMPLES for f in frames)
    assert [f.pts for f in frames] == [i * FRAME_SAMPLES for i in range(len(frames))]
    expect = rs.received * 16000 / rate
    assert abs(frames[-1].end - expect) <= FRAME_SAMPLES + 64


def test_input_resampler_preserves_a_tone() -> None:
    rate = 48000
    t = np.arange(rate) / rate
    tone = (np.sin(2 * np.pi * 440 * t) * 8000).astype(np.int16)
    rs = InputResampler(rate, start_pts=640)
    frames = [f for i in range(0, rate, 480) for f in rs.feed(tone[i : i + 480])] + rs.finish()
    assert frames[0].pts == 640
    out = np.concatenate([f.samples for f in frames]).astype(np.float64)
    spectrum = np.abs(np.fft.rfft(out[2000:14000]))
    peak_hz = np.argmax(spectrum) * 16000 / 12000
    assert abs(peak_hz - 440) < 3
    assert np.sqrt(np.mean(out[2000:14000] ** 2)) == pytest.approx(8000 / np.sqrt(2), rel=0.05)


def test_realtime_guard() -> None:
    guard = RealtimeGuard(max_lead_s=2.0)
    assert guard.add(1.5, now=100.0)  # a burst while connecting
    for i in range(1, 50):  # then real time
        assert guard.add(0.02, now=100.0 + i * 0.02)
    assert not guard.add(5.0, now=101.0)  # 5 s of audio at once: far ahead
    slow = RealtimeGuard(max_lead_s=2.0)
    slow.add(0.1, now=0.0)
    assert slow.add(9.0, now=10.0)  # catching up after a stall is fine


def test_start_phrase_cache_is_no_longer_a_field() -> None:
    """``phrase_cache`` left the wire (issue 43: the bench servers' own phrase caches are the
    server's ``pipeline.phrase_cache_per_session``): an old client's field is an unknown
    field, ignored whatever it holds, and the session gets the server's namespace."""
    from speechpipe.transport.protocol import parse_start, parse_text

    assert parse_start({"type": "start"}).request.phrase_cache == ""
    for old in ("bench-7", 7, "x" * 65, None, "\ud800"):
        start = parse_text(json.dumps({"type": "start", "phrase_cache": old}))
        assert start.request.phrase_cache == ""
