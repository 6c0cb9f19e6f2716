"""The connection core's room rules, without a socket: what a ``start`` becomes (solo,
speaker, participant, listener), the token's ``room``/``role`` claims, where it enters a room,
the refusals' close codes and error events, the WebRTC preconditions of an ``offer`` and what
a listener may send. The same rules run over a real server in ``test_room_access.py``,
``test_room_rights.py`` and ``test_room_webrtc.py``."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from speechpipe.errors import AdmissionError, SessionError, SessionRedirect
from speechpipe.transport.codes import CloseCode, ErrorCode
from speechpipe.transport.connection_core import (
    CAPTION_TARGET,
    AcceptStart,
    AddIce,
    Claims,
    ConnectionCore,
    Fail,
    FlushInput,
    OpenPeer,
    PushAudio,
    ReportPlayout,
    SendError,
    StartPlan,
    StopInput,
    listener_too_slow,
    room_redirect,
    room_refusal,
    session_refused,
    too_many_joins,
)
from speechpipe.transport.room import Role, RoomRegistry
from speechpipe.transport.room_access import Join, Open

PCM = np.zeros(320, np.int16).tobytes()
OFFER = json.dumps({"type": "offer", "sdp": "v=0"})
ICE = json.dumps({"type": "ice", "candidate": ""})
NO_CLAIMS = Claims()


def core(**options: Any) -> ConnectionCore:
    return ConnectionCore(max_message_bytes=1 << 17, max_lead_s=5.0, **options)


def accept(c: ConnectionCore, **fields: Any) -> AcceptStart:
    [action] = c.receive(json.dumps({"type": "start", "sample_rate": 16000, **fields}), 0.0)
    assert isinstance(action, AcceptStart)
    return action


def plan(claims: Claims = NO_CLAIMS, *, tokens_required: bool = False,
         **fields: Any) -> tuple[ConnectionCore, StartPlan | Fail]:
    c = core()
    return c, c.plan_start(accept(c, **fields).start, claims, tokens_required=tokens_required)


def opened(role: str | None, **options: Any) -> ConnectionCore:
    """A core whose session (in ``role``) runs."""
    c = core(**options)
    start = accept(c, **({"role": role, "room": "r1"} if role else {})).start
    assert isinstance(c.plan_start(start, Claims()), StartPlan)
    c.session_opened(start)
    return c


def codes(actions: list[Any]) -> list[str]:
    return [a.code if isinstance(a, SendError | Fail) else type(a).__name__ for a in actions]


def error_of(f: Fail) -> tuple[int, str, dict[str, Any]]:
    assert f.error is not None and f.error["fatal"] is True
    return f.code, str(f.reason), f.error


# -- start -> solo / speaker / participant / listener ----------------------------------------
def test_a_start_without_role_is_a_solo_session() -> None:
    c, p = plan(target_lang="de")
    assert isinstance(p, StartPlan) and p.role is None and p.entry is None
    assert not p.listener and p.room_id is None and c.role is None
    assert p.request.target_lang == "de"


def test_a_speaker_opens_a_room_or_joins_the_named_one() -> None:
    _, p = plan(role="speaker")
    assert isinstance(p, StartPlan) and p.role is Role.SPEAKER and p.entry is not None
    assert p.room_id is None and p.room_options() == {
        "opener_key": None, "conversation": False, "listener_history": False}
    _, named = plan(role="speaker", room="abc", invite="inv")
    assert isinstance(named, StartPlan) and named.room_id == "abc"
    assert named.entry is not None and named.entry.invite == "inv"


def test_a_participant_translates_into_the_caption_target_and_opens_a_conversation() -> None:
    c, p = plan(role="participant", target_lang="de", history=True)
    assert isinstance(p, StartPlan) and p.role is Role.PARTICIPANT and c.role is Role.PARTICIPANT
    assert p.request.target_lang == CAPTION_TARGET  # its pipeline: the captions' source
    assert p.member_target == "de"  # it hears the room in its own language
    assert p.room_options()["conversation"] is True
    assert p.room_options()["listener_history"] is True


def test_a_listener_runs_no_pipeline() -> None:
    c, p = plan(role="listener", room="abc")
    assert isinstance(p, StartPlan) and p.listener and c.role is Role.LISTENER
    assert p.room_id == "abc"


# -- token claims ---------------------------------------------------------------------------
@pytest.mark.parametrize("claim,fields", [
    ("listener", {"role": "speaker"}),
    ("listener", {}),  # a listener token cannot speak, at all: not even solo
    ("speaker", {"role": "listener", "room": "abc"}),
    ("participant", {"role": "speaker"}),
])
def test_a_role_claim_is_for_that_role_only(claim: str, fields: dict[str, Any]) -> None:
    _, p = plan(Claims(key="k", role=claim), **fields)
    assert isinstance(p, Fail)
    code, reason, error = error_of(p)
    assert (code, reason) == (CloseCode.UNAUTHORIZED, ErrorCode.UNAUTHORIZED)
    assert error["message"] == f"this token is for a {claim}"


def test_the_claims_reach_the_room_entry() -> None:
    _, p = plan(Claims(key="k", room="abc", role="speaker"), tokens_required=True,
                role="speaker")
    assert isinstance(p, StartPlan) and p.entry is not None
    assert (p.entry.key, p.entry.claim_room, p.entry.claim_role) == ("k", "abc", "speaker")
    assert p.entry.tokens_required and p.room_id == "abc"  # the claim names the room
    assert p.room_options()["opener_key"] == "k"


def test_a_room_claim_for_another_room_is_refused() -> None:
    c, p = plan(Claims(key="k", room="abc", role="listener"), role="listener", room="xyz")
    assert isinstance(p, StartPlan)
    refused = c.enter(p, None)
    assert isinstance(refused, Fail) and refused.code == CloseCode.UNAUTHORIZED
    assert error_of(refused)[2]["message"] == "this token is for another room"


# -- entering a room --------------------------------------------------------------------------
def test_entry_opens_joins_or_refuses() -> None:
    registry = RoomRegistry()
    room = registry.create(0.0, "abc", opener_key="opener")
    c, p = plan(role="speaker")
    assert isinstance(p, StartPlan) and c.enter(p, None) == Open()
    c, p = plan(role="listener", room="abc")
    assert isinstance(p, StartPlan) and c.enter(p, room) == Join("abc")
    c, p = plan(role="listener", room="gone")
    assert isinstance(p, StartPlan)
    gone = c.enter(p, None)
    assert isinstance(gone, Fail) and (gone.code, gone.reason) == (CloseCode.NO_ROOM,
                                                                   ErrorCode.NO_ROOM)
    c, p = plan(Claims(key="k", room="new", role="speaker"), role="speaker")
    assert isinstance(p, StartPlan) and c.enter(p, None) == Open("new")  # the issuer's id


def test_speaking_needs_a_right_in_the_room() -> None:
    room = RoomRegistry().create(0.0, "abc", opener_key="opener")
    for tokens, code in ((False, CloseCode.NOT_A_SPEAKER), (True, CloseCode.UNAUTHORIZED)):
        c, p = plan(tokens_required=tokens, role="speaker", room="abc")
        assert isinstance(p, StartPlan)
        refused = c.enter(p, room)
        assert isinstance(refused, Fail) and refused.code == code
    c, p = plan(role="participant", room="abc", invite=room.invite)
    assert isinstance(p, StartPlan) and c.enter(p, room) == Join("abc")
    c, p = plan(Claims(key="opener"), role="speaker", room="abc")  # the opener, back
    assert isinstance(p, StartPlan) and c.enter(p, room) == Join("abc")


def test_refusals_close_by_the_code_table() -> None:
    code, reason, error = error_of(room_refusal("room_full", "full", limit=1))
    assert (code, reason, error["limit"]) == (CloseCode.ROOM_FULL, ErrorCode.ROOM_FULL, 1)
    code, reason, _ = error_of(room_refusal("room_exists", "that room exists already"))
    assert (code, reason) == (CloseCode.NO_ROOM, ErrorCode.NO_ROOM)  # not a transport code
    code, reason, error = error_of(too_many_joins(0.123456))
    assert (code, reason, error["retry_after_s"]) == (CloseCode.TOO_MANY_JOINS,
                                                      ErrorCode.TOO_MANY_JOINS, 0.13)
    # a wait of a few milliseconds is told as a hundredth, never as 0; a whole one as is
    assert [error_of(too_many_joins(s))[2]["retry_after_s"] for s in (0.003, 0.1, 1.1)] \
        == [0.01, 0.1, 1.1]
    code, reason, error = error_of(room_redirect("ws://other/ws"))
    assert (code, reason) == (CloseCode.REDIRECT, ErrorCode.REDIRECT)
    assert (error["url"], error["ticket"], error["expires_in_s"]) == ("ws://other/ws", None, None)
    slow = listener_too_slow()
    assert (slow.code, slow.reason, slow.error) == (CloseCode.LISTENER_TOO_SLOW,
                                                    ErrorCode.LISTENER_TOO_SLOW, None)


def test_session_refusals_carry_their_fields() -> None:
    code, _, error = error_of(session_refused(AdmissionError("full", retry_after_s=2.5)))
    assert code == CloseCode.TRY_AGAIN and error["retry_after_s"] == 2.5
    code, _, error = error_of(session_refused(
        SessionRedirect("elsewhere", url="ws://b/ws", ticket="t", expires_in_s=9.87)))
    assert code == CloseCode.REDIRECT and (error["url"], error["ticket"],
                                           error["expires_in_s"]) == ("ws://b/ws", "t", 9.9)
    code, _, error = error_of(session_refused(SessionError("no such language")))
    assert code == CloseCode.UNSUPPORTED_REQUEST and "retry_after_s" not in error


# -- WebRTC preconditions ----------------------------------------------------------------------
@pytest.mark.parametrize("role", [None, "speaker", "participant", "listener"])
def test_offer_preconditions(role: str | None) -> None:
    c = opened(role, max_sdp_bytes=100)
    assert isinstance(c.receive(OFFER, 0.0)[0], OpenPeer)
    assert codes(c.receive(OFFER, 0.0, peer=True)) == ["webrtc_active"]
    big = json.dumps({"type": "offer", "sdp": "v=0" + "x" * 200})
    assert codes(c.receive(big, 0.0)) == ["sdp_too_large"]
    assert codes(opened(role, webrtc=False).receive(OFFER, 0.0)) == ["webrtc_failed"]
    assert codes(c.receive(ICE, 0.0)) == ["bad_message"]  # 'ice' before 'offer'
    assert isinstance(c.receive(ICE, 0.0, peer=True)[0], AddIce)


def test_offer_preconditions_in_order() -> None:
    c = opened("speaker", webrtc=False, max_sdp_bytes=1)
    [active] = c.receive(OFFER, 0.0, peer=True)
    assert isinstance(active, SendError) and active.code == "webrtc_active"
    assert active.message == "a WebRTC peer is already connected"
    [off] = c.receive(OFFER, 0.0)
    assert isinstance(off, SendError) and off.message == "WebRTC is disabled on this server"
    assert c.stop()
    assert codes(c.receive(OFFER, 0.0, peer=True)) == ["stopping"]


# -- what a listener may send ------------------------------------------------------------------
def test_a_listener_sends_no_audio_flush_or_playout() -> None:
    c = opened("listener")
    [audio] = c.receive(PCM, 0.0)
    assert isinstance(audio, SendError) and audio.code == ErrorCode.LISTENER_CANNOT_SPEAK
    assert audio.message == "a listener sends no audio: binary ignored"
    assert codes(c.receive(b"\x00", 0.0)) == ["bad_frame"]  # still validated first
    assert codes(c.receive(PCM, 0.0, peer=True)) == ["webrtc_active"]
    assert c.receive('{"type": "flush"}', 0.0) == []
    assert c.receive('{"type": "playout", "played_s": 1.0}', 0.0) == []
    assert isinstance(c.receive('{"type": "stop"}', 0.0)[0], StopInput)


def test_a_listener_far_ahead_of_real_time_is_closed_as_a_speaker_is() -> None:
    c = opened("listener")
    second = np.zeros(16000, np.int16).tobytes()
    last = [c.receive(second, 0.0)[0] for _ in range(7)][-1]
    assert isinstance(last, Fail) and last.code == 1008 and last.reason == "too_fast"


def test_the_echo_guard_hears_only_a_participant() -> None:
    playout = '{"type": "playout", "played_s": 1.5}'
    [report] = opened("participant").receive(playout, 0.0)
    assert isinstance(report, ReportPlayout) and report.played_s == 1.5
    assert opened("speaker").receive(playout, 0.0) == []
    assert opened(None).receive(playout, 0.0) == []


@pytest.mark.parametrize("role", [None, "speaker", "participant"])
def test_speaking_roles_send_audio_and_flush(role: str | None) -> None:
    c = opened(role)
    assert isinstance(c.receive(PCM, 0.0)[0], PushAudio)
    assert isinstance(c.receive('{"type": "flush"}', 0.0)[0], FlushInput)
