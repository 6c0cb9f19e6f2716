"""Property tests (hypothesis) over everything a client can make the server parse.

- the session protocol decoder (``parse_text`` for text messages, ``validate_audio`` for
  binary ones): any message is accepted or answered with an error **documented** in
  ``docs/protocol.md`` (code, and close code when fatal); never another exception;
- the SDP intake (size check, then ``WebRtcPeer.accept_offer``): any string gives an answer
  or ``bad_sdp``/``sdp_too_large``, and the peer is closed afterwards (no task or socket
  left);
- whole sessions on a live server: any sequence of messages ends with a documented close
  code or a normal end, never 1011 (an unhandled server error).

About 11k inputs per run in total (``EXAMPLES``), in a few seconds: the decoder is pure.
Fuzzed offers never name a remote ICE candidate other than 127.0.0.1 (``loopback_only``):
an offer's candidates are where the server's ICE checks go, and tests send traffic only to
this machine. No example database is written (``database=None``); a failure prints the
example and a ``@reproduce_failure`` blob.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from speechpipe.transport.protocol import (
    MAX_MESSAGE_BYTES,
    MAX_SAMPLE_RATE,
    MIN_SAMPLE_RATE,
    Flush,
    Ice,
    Offer,
    ProtocolError,
    Start,
    Stop,
    parse_text,
    validate_audio,
)
from speechpipe.transport.quotas import check_sdp_size
from tests.helpers import ROOT

DOCS = ROOT / "docs" / "protocol.md"

# thousands of generated inputs per property: part of the full run (CI), not the fast tier

EXAMPLES = {
    "text": 3000,
    "json": 1500,
    "messages": 3000,
    "audio": 2500,
    "sdp": 500,
    "sessions": 250,
}
COUNTS: Counter[str] = Counter()


def fuzz(name: str) -> Any:
    return settings(
        max_examples=EXAMPLES[name],
        deadline=None,
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@pytest.fixture(scope="module", autouse=True)
def report_counts() -> Iterator[None]:
    yield
    if COUNTS:
        print(f"\nfuzzed inputs: {sum(COUNTS.values())} {dict(COUNTS)}")


def documented_errors() -> dict[str, set[str]]:
    """``docs/protocol.md``'s error table: code -> the close codes it may come with
    (``—`` for a recoverable error)."""
    text = DOCS.read_text()
    table = text.split("## Error codes", 1)[1].split("## Close codes", 1)[0]
    out: dict[str, set[str]] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[0].startswith("`"):
            continue
        for code in re.findall(r"`([a-z_]+)`", cells[0]):
            out.setdefault(code, set()).add(cells[2])
    return out


DOCUMENTED = documented_errors()


def assert_documented(exc: ProtocolError) -> None:
    assert exc.code in DOCUMENTED, f"undocumented error code {exc.code!r}"
    close = str(exc.close_code) if exc.close_code is not None else "—"
    assert close in DOCUMENTED[exc.code], (
        f"{exc.code!r} closes with {close}, documented: {DOCUMENTED[exc.code]}"
    )


def test_the_documented_table_is_read() -> None:
    assert {"bad_json", "bad_start", "unsupported_rate", "bad_frame", "bad_sdp",
            "rate_limited", "too_many_sessions"} <= set(DOCUMENTED)
    assert DOCUMENTED["bad_start"] == {"4000", "—"}


def decode(message: str | bytes) -> object:
    """The server's first look at a client message (the reader does exactly this)."""
    if isinstance(message, bytes):
        return validate_audio(message, max_bytes=MAX_MESSAGE_BYTES)
    return parse_text(message)


def check_decoder(message: str | bytes, counter: str) -> None:
    COUNTS[counter] += 1
    try:
        result = decode(message)
    except ProtocolError as exc:
        assert_documented(exc)
        return
    if isinstance(message, bytes):
        assert len(result) * 2 == len(message)  # type: ignore[arg-type]
        return
    assert isinstance(result, Start | Flush | Stop | Offer | Ice)
    if isinstance(result, Start):
        assert MIN_SAMPLE_RATE <= result.sample_rate <= MAX_SAMPLE_RATE
        assert MIN_SAMPLE_RATE <= result.request.output_sample_rate <= MAX_SAMPLE_RATE
        assert result.request.mode in ("balanced", "fast", "quality")
        assert isinstance(result.request.source_lang, str)
        assert result.token is None or isinstance(result.token, str)
    if isinstance(result, Offer):
        assert isinstance(result.sdp, str) and result.sdp


# --------------------------------------------------------------------------- the decoder

json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=24)
    | st.sampled_from([8000, 16000, 48000, 7999, 48001, 44100.0, 16000.5, -1, 0, 2**63])
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=8,
)
shallow = json_scalars | st.lists(json_scalars, max_size=3) | st.dictionaries(
    st.text(max_size=8), json_scalars, max_size=3
)  # field values: cheap to draw, still every JSON type
types = st.sampled_from(["start", "start", "start", "offer", "offer", "ice", "ice", "flush",
                         "stop", "", "START", "bogus", None, 5, True, 1.5, []])
fields = st.sampled_from([
    "source_lang", "target_lang", "format", "sample_rate", "output_sample_rate", "voice",
    "mode", "token", "sdp", "candidate", "sdpMid", "sdpMLineIndex",
])
tailored = st.one_of(
    shallow,
    st.sampled_from(["pcm_s16le", "opus", "balanced", "fast", "quality", "warp", "es", "auto",
                     "en", "x" * 65, "candidate:1 1 udp 1 127.0.0.1 9 typ host"]),
    st.fixed_dictionaries({"candidate": json_scalars, "sdpMid": json_scalars,
                           "sdpMLineIndex": json_scalars}),
)
messages = st.builds(
    lambda kind, extra: {"type": kind, **extra} if kind is not None else extra,
    types,
    st.dictionaries(fields, tailored, max_size=6),
)


@fuzz("text")
@given(st.text(max_size=300) | st.sampled_from(["[" * 50_000, '{"a":' * 20_000, "{}", "null"]))
def test_any_text_is_accepted_or_a_documented_error(text: str) -> None:
    check_decoder(text, "text")


@fuzz("json")
@given(json_values)
def test_any_json_value_is_accepted_or_a_documented_error(value: Any) -> None:
    check_decoder(json.dumps(value), "json")


@fuzz("messages")
@given(messages)
def test_any_message_shape_is_accepted_or_a_documented_error(message: dict[str, Any]) -> None:
    check_decoder(json.dumps(message), "messages")


@fuzz("audio")
@given(st.binary(max_size=4000) | st.integers(0, MAX_MESSAGE_BYTES + 3).map(bytes))
def test_any_binary_is_audio_or_a_documented_error(data: bytes) -> None:
    check_decoder(data, "audio")


# --------------------------------------------------------------------------- SDP intake

SEED_OFFER = "\r\n".join([  # an aiortc offer (one audio section), candidates on loopback
    "v=0", "o=- 4004954585 4004954585 IN IP4 0.0.0.0", "s=-", "t=0 0", "a=group:BUNDLE 0",
    "a=msid-semantic:WMS *", "m=audio 9 UDP/TLS/RTP/SAVPF 96 9 0 8", "c=IN IP4 127.0.0.1",
    "a=sendrecv", "a=extmap:1 urn:ietf:params:rtp-hdrext:sdes:mid", "a=mid:0",
    "a=msid:5fd9e2c8-c515-476f-b9f4-cf4806dc8d65 d59d6d6b-e60f-49c3-bf7c-50acb187e45c",
    "a=rtcp:9 IN IP4 0.0.0.0", "a=rtcp-mux", "a=ssrc:3781235766 cname:d2e71861",
    "a=rtpmap:96 opus/48000/2", "a=rtpmap:9 G722/8000", "a=rtpmap:0 PCMU/8000",
    "a=rtpmap:8 PCMA/8000",
    "a=candidate:f957a2332b1715da3b0ef8ba684454eb 1 udp 2130706431 127.0.0.1 9 typ host",
    "a=end-of-candidates", "a=ice-ufrag:bBte", "a=ice-pwd:h1MZTYdGO8VYN5EP9ylJFH",
    "a=fingerprint:sha-256 5B:E1:E1:CC:AE:D7:C3:5B:F7:A8:62:B1:69:93:59:D6:AD:77:D2:38:7E:09:"
    "B2:50:3C:06:34:5C:AF:4A:59:E5",
    "a=setup:actpass", "",
])
SEED_LINES = SEED_OFFER.split("\r\n")
SDP_PREFIXES = ["v=", "o=", "s=", "t=", "c=", "m=audio ", "m=video ", "m=application ",
                "a=rtpmap:", "a=fmtp:", "a=mid:", "a=group:BUNDLE ", "a=setup:", "a=ice-ufrag:",
                "a=ice-pwd:", "a=fingerprint:sha-256 ", "a=ssrc:", "a=rtcp:", "a=extmap:",
                "a=sctp-port:", "a=msid:", "a=sendonly", "a=inactive", "a=candidate:"]
LOOPBACK_CANDIDATE = re.compile(r"^a=candidate:\S+ \d+ udp \d+ 127\.0\.0\.1 \d+ typ host$")


def loopback_only(sdp: str) -> str:
    """Drop every line naming an ICE candidate other than the seed's loopback one."""
    lines = re.split(r"(\r?\n)", sdp)
    kept = [part for part in lines
            if "candidate" not in part.lower() or LOOPBACK_CANDIDATE.match(part)]
    return "".join(kept)


@st.composite
def mutated_offers(draw: st.DrawFn) -> str:
    lines = list(SEED_LINES)
    for _ in range(draw(st.integers(0, 6))):
        op = draw(st.sampled_from(["drop", "dup", "swap", "edit", "insert", "truncate"]))
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "edit":
            head = lines[i].split(":", 1)[0] if ":" in lines[i] else lines[i][:2]
            lines[i] = head + ":" + draw(st.text(max_size=40))
        elif op == "insert":
            lines.insert(i, draw(st.sampled_from(SDP_PREFIXES)) + draw(st.text(max_size=40)))
        else:
            lines[i] = lines[i][: draw(st.integers(0, max(0, len(lines[i]) - 1)))]
    sep = draw(st.sampled_from(["\r\n", "\n"]))
    return sep.join(lines)


offers = mutated_offers() | st.text(max_size=400) | st.just(SEED_OFFER) | st.builds(
    lambda n: "v=0\r\n" + "a=x\r\n" * n, st.integers(0, 10_000)
)


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A private loop for the sync hypothesis tests (hypothesis drives examples itself)."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


MAX_SDP = 32 * 1024


async def take_offer(sdp: str) -> str:
    """What the server does with an offer: size check, a fresh peer, answer or bad_sdp;
    the peer is closed whatever happened (here always, as when the session ends)."""
    from speechpipe.transport.webrtc import WebRtcPeer

    async def push(frame: object) -> None:
        pass

    check_sdp_size(sdp, MAX_SDP)
    peer = WebRtcPeer(push=push, label="fuzz")
    try:
        return await peer.accept_offer(sdp)
    finally:
        await peer.close()
        assert peer.pc is None or peer.pc.connectionState == "closed"


def test_any_offer_is_answered_or_a_documented_error(loop: asyncio.AbstractEventLoop) -> None:
    import os

    fds_before = len(os.listdir("/proc/self/fd"))
    outcomes: Counter[str] = Counter()

    @fuzz("sdp")
    @given(offers)
    def one(sdp: str) -> None:
        sdp = loopback_only(sdp)
        COUNTS["sdp"] += 1
        try:
            answer = loop.run_until_complete(asyncio.wait_for(take_offer(sdp), 10))
        except ProtocolError as exc:
            assert_documented(exc)
            assert exc.code in ("bad_sdp", "sdp_too_large")
            outcomes[exc.code] += 1
            return
        assert answer.startswith("v=0")
        outcomes["answer"] += 1

    one()
    loop.run_until_complete(asyncio.sleep(0.2))  # let closed transports finish closing
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    assert not pending, [t.get_name() for t in pending]
    assert len(os.listdir("/proc/self/fd")) <= fds_before, "a peer left a socket open"
    print(f"\nsdp outcomes: {dict(outcomes)}")
    assert outcomes["answer"] and outcomes["bad_sdp"]  # both paths were exercised


# --------------------------------------------------------------------------- whole sessions

client_messages = st.one_of(
    messages.map(json.dumps),
    st.text(max_size=60),
    st.binary(max_size=700),
    st.just(json.dumps({"type": "start"})),
    st.just(json.dumps({"type": "flush"})),
    offers.map(lambda sdp: json.dumps({"type": "offer", "sdp": loopback_only(sdp)[:2000]})),
)
DOCUMENTED_CLOSES = {1000, 1008, 1009, 4000, 4001, 4002, 4003, 4004, 4006, 4007, 4008, 4009}


def test_any_message_sequence_ends_cleanly_on_a_live_server(
    loop: asyncio.AbstractEventLoop,
) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    from speechpipe.transport.limits import ServerLimits
    from speechpipe.transport.websocket_server import SpeechServer
    from tests.fakes import TickFactory

    server = SpeechServer(TickFactory(), port=0,
                          limits=ServerLimits(start_timeout_s=5, webrtc_connect_timeout_s=1))
    loop.run_until_complete(server.start())
    closes: Counter[int | None] = Counter()

    async def session(sequence: list[str | bytes]) -> None:
        started = sequence_started(sequence)
        async with connect(f"ws://127.0.0.1:{server.port}/ws", max_size=None) as ws:
            try:
                for message in sequence:
                    await ws.send(message)
                await ws.send(json.dumps({"type": "stop"}))
                async with asyncio.timeout(10):
                    async for reply in ws:
                        if isinstance(reply, str):
                            event = json.loads(reply)
                            if event["type"] == "error":
                                assert event["code"] in DOCUMENTED, event
                        if not started:
                            break  # no session: 'stop' got a recoverable not_started
            except ConnectionClosed:
                pass
        code = ws.close_code
        closes[code] += 1
        assert code is None or code in DOCUMENTED_CLOSES, f"closed with {code}"

    @fuzz("sessions")
    @given(st.lists(client_messages, max_size=8))
    def one(sequence: list[str | bytes]) -> None:
        COUNTS["sessions"] += 1
        loop.run_until_complete(session(sequence))

    try:
        one()
        loop.run_until_complete(asyncio.wait_for(_drained(server), 10))
    finally:
        loop.run_until_complete(server.stop())
    print(f"\nsession close codes: {dict(closes)}")
    assert 1011 not in closes


def sequence_started(sequence: list[str | bytes]) -> bool:
    for message in sequence:
        if isinstance(message, str):
            try:
                if isinstance(parse_text(message), Start):
                    return True
            except ProtocolError as exc:
                if exc.fatal:
                    return True
    return False


async def _drained(server: Any) -> None:
    for _ in range(500):
        if not server.connections:
            return
        await asyncio.sleep(0.02)
