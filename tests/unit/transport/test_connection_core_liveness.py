"""The connection core's liveness and ending rules, without a socket: what a quota's failure
while receiving means per role (``quota_failure``: a listener's idle timer only pings;
``too_slow`` only for a client that still reads), how a finished session closes
(``finished``), what a token claims (``Claims.of``), which connections the metrics count as
sessions (``pipeline_open``), whom a capacity slot counts for (``slot_owner``), whose joins
are rate-limited (``join_limited``) and which of its own pipeline's messages a room member
gets back (``hears_own``). Over a real server:
``test_not_reading.py``, ``test_room_presence.py``, ``test_room_joins.py`` and
``test_quotas.py``."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from speechpipe.transport.auth import Identity
from speechpipe.transport.codes import CloseCode, ErrorCode
from speechpipe.transport.connection_core import (
    AcceptStart,
    CheckReads,
    Claims,
    ConnectionCore,
    Fail,
    StartPlan,
)
from speechpipe.transport.quotas import quota_error


def opened(role: str | None) -> ConnectionCore:
    """A core whose session (in ``role``; None: solo) runs."""
    c = ConnectionCore(max_message_bytes=1 << 17, max_lead_s=5.0)
    fields: dict[str, Any] = {"role": role, "room": "r1"} if role else {}
    [accept] = c.receive(json.dumps({"type": "start", "sample_rate": 16000, **fields}), 0.0)
    assert isinstance(accept, AcceptStart)
    assert isinstance(c.plan_start(accept.start, Claims()), StartPlan)
    c.session_opened(accept.start)
    return c


def idle() -> Any:
    return quota_error(ErrorCode.IDLE_TIMEOUT, "nothing received for 30 s")


def too_slow() -> Any:
    return quota_error(ErrorCode.TOO_SLOW, "audio fell behind real time")


def test_a_listeners_idle_timer_only_pings() -> None:
    decision = opened("listener").quota_failure(idle(), 2.0)
    assert isinstance(decision, CheckReads)
    assert decision.then is None  # it answered: go on receiving
    assert decision.otherwise.code == CloseCode.NOT_READING
    assert decision.otherwise.reason == ErrorCode.NOT_READING
    assert decision.otherwise.error is not None
    assert decision.otherwise.error["message"] == "the listener did not answer a ping"
    assert decision.otherwise.error["fatal"] is True


@pytest.mark.parametrize("role", [None, "speaker", "participant"])
def test_a_speaking_clients_idle_timeout_closes(role: str | None) -> None:
    decision = opened(role).quota_failure(idle(), 2.0)
    assert isinstance(decision, Fail)
    assert (decision.code, decision.reason) == (CloseCode.IDLE_TIMEOUT, ErrorCode.IDLE_TIMEOUT)


@pytest.mark.parametrize("role", [None, "speaker", "participant", "listener"])
def test_too_slow_only_for_a_client_that_still_reads(role: str | None) -> None:
    decision = opened(role).quota_failure(too_slow(), 2.5)
    assert isinstance(decision, CheckReads)
    assert decision.then is not None
    assert (decision.then.code, decision.then.reason) == (CloseCode.TOO_SLOW, ErrorCode.TOO_SLOW)
    assert (decision.otherwise.code, decision.otherwise.reason) == (CloseCode.NOT_READING,
                                                                    ErrorCode.NOT_READING)
    assert decision.otherwise.error is not None
    assert "within 2.5 s" in decision.otherwise.error["message"]


def test_other_quota_failures_close_with_their_code() -> None:
    expired = quota_error(ErrorCode.RATE_LIMITED, "too many messages")
    decision = opened("listener").quota_failure(expired, 2.0)
    assert isinstance(decision, Fail)
    assert decision.reason == ErrorCode.RATE_LIMITED
    assert decision.code == expired.close_code


def test_claims_of_a_token() -> None:
    assert Claims.of(None) == Claims()
    assert Claims.of(Identity(None)) == Claims()  # the one shared token claims nothing
    assert Claims.of(Identity("k1", "alice", room="r1", role="listener")) == Claims(
        "k1", "r1", "listener")


@pytest.mark.parametrize(("role", "counted"), [(None, True), ("speaker", True),
                                               ("participant", True), ("listener", False)])
def test_a_listener_is_no_session_for_the_metrics(role: str | None, counted: bool) -> None:
    c = opened(role)
    assert c.session_open
    assert c.listening is (role == "listener")
    assert c.pipeline_open is counted
    c.closed()
    assert not c.pipeline_open


def test_a_finished_session_closes_normally_or_as_expired() -> None:
    assert ConnectionCore.finished() == Fail(CloseCode.NORMAL, "stopped")
    expired = ConnectionCore.finished(expired=True)
    assert (expired.code, expired.reason, expired.error) == (
        CloseCode.SESSION_EXPIRED, ErrorCode.SESSION_EXPIRED, None)


def test_only_a_listeners_join_is_rate_limited() -> None:
    for role in (None, "speaker", "participant", "listener"):
        c = ConnectionCore(max_message_bytes=1 << 17, max_lead_s=5.0)
        fields: dict[str, Any] = {"role": role, "room": "r1"} if role else {}
        [accept] = c.receive(json.dumps({"type": "start", **fields}), 0.0)
        assert isinstance(accept, AcceptStart)
        plan = c.plan_start(accept.start, Claims())
        assert isinstance(plan, StartPlan)
        assert plan.join_limited is (role == "listener")


@pytest.mark.parametrize("kind", ["source", "target", "audio", "vad", "utterance_end", "status",
                                  "error"])
def test_what_a_member_gets_back_of_its_own_pipeline(kind: str) -> None:
    assert opened("speaker").hears_own(kind)  # a speaker: everything, as a solo session
    assert opened("participant").hears_own(kind) is (kind in ("source", "error"))


def test_a_slot_counts_for_the_declared_client_else_its_address_and_its_tokens_key() -> None:
    c = ConnectionCore(max_message_bytes=1 << 17, max_lead_s=5.0)
    [accept] = c.receive(json.dumps({"type": "start"}), 0.0)
    assert isinstance(accept, AcceptStart)
    plan = c.plan_start(accept.start, Claims.of(Identity("k1")))
    assert isinstance(plan, StartPlan)
    assert plan.slot_owner("10.0.0.7", "c0ffee00") == ("10.0.0.7", "k1")
    assert plan.slot_owner(None, "c0ffee00") == ("c0ffee00", "k1")
    declared = dataclasses.replace(accept.start, request=dataclasses.replace(
        accept.start.request, client_id="kiosk-3"))
    plan = c.plan_start(declared, Claims())
    assert isinstance(plan, StartPlan)
    assert plan.slot_owner("10.0.0.7", "c0ffee00") == ("kiosk-3", "")
