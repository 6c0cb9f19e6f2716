"""Issue 21, items 1-7, on real Ray: a head and two scripted nodes of capacity 1 in a private
network namespace, real WebSocket clients with real signed tokens, driven by
``tests/support/cluster_attacks.py`` (two parts: admission attacks, ledger faults); this test
checks what it recorded. Needs root or user namespaces (``unshare -n``) and Ray."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import ROOT, run_scenario

A, B = "ws://127.0.0.1:8811/ws", "ws://127.0.0.1:8812/ws"


def _run(factory: pytest.TempPathFactory, part: str) -> dict[str, Any]:

    script = ROOT / "tests" / "support" / "cluster_attacks.py"
    return run_scenario(factory, part, script=script)


@pytest.fixture(scope="module")
def admission(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run(tmp_path_factory, "admission")


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run(tmp_path_factory, "ledger")


def test_rogue_registrations_are_refused_without_the_cluster_secret(admission):
    assert admission["rogue_register_answers"] == ["unauthorized", "unauthorized"]
    assert admission["rogue_node_rc"] not in (0, None)
    assert admission["rogue_node_err"] == [
        "speechpipe: the cluster ledger refused this node: its SPEECHPIPE_CLUSTER_SECRET "
        "differs from the ledger's"]
    assert admission["nodes_after_rogues"] == [A, B]
    assert admission["ledger_signed"] is True


def test_waiters_that_vanish_at_their_turn_leak_no_slot(admission):
    assert admission["vanish_setup"] == ["started", "started", B]
    for one in admission["vanish_rounds"]:
        assert one["position"] == 1 and one["turn_over"]
        assert one["node_freed"] and one["node_sessions"] == 0, one
        assert one["ledger"] == {"active": 1, "reserved": 0, "waiting": 0}, one
    assert admission["vanish_rounds"][0]["refill"] == "started"
    assert admission["fair_after_vanish"] == "started"


def test_a_ticket_starts_one_session_once(admission):
    # an active session's id as start.ticket, on a node with room: no session starts on it
    # (one may start as an ordinary new arrival, with its own id)
    assert admission["owner_c"] == "started"
    assert admission["reuse_same_id"] == 0, admission["reuse_sessions"]
    assert admission["reuse_started"] <= 1
    # one redirect ticket, 6 connections at once: one session
    assert admission["hop_first"] == "closed 4020"
    outcomes = admission["claim_outcomes"]
    assert outcomes.count("started") == 1, outcomes
    assert admission["claim_sessions_with_the_ticket"] == 1
    after = admission["after_reuse"]
    assert after == {"ledger_active": 2, "a": 1, "b": 1}, after


def test_resuming_ones_own_live_session_neither_jumps_the_line_nor_passes_the_limits(admission):
    assert admission["filler"] == "started" and admission["waiter_position"] == 1
    outcomes = admission["resume_outcomes"]
    assert outcomes[0] == "queued"  # one may wait on the live session, behind the waiter
    assert all(o.startswith("closed") for o in outcomes[1:]), outcomes  # the rest: refused
    assert admission["waiter_position_after"] == 1
    assert len(admission["line_after_resumes"]) <= 3  # --max-queue
    assert [e["resuming_live"] for e in admission["line_after_resumes"]] == [False, True]
    assert admission["waiter_outcome"] == "started"
    assert admission["resumes_started_while_live"] == 0  # the token's limit (1) held
    assert admission["pending_resumes"] == 1


def test_a_lost_sessions_resume_priority_is_its_holders_only(admission):
    seen = {k: admission.get(k) for k in ("line_cleared", "filler2", "first_position",
                                          "thief_position", "owner_position",
                                          "first_position_after", "thief_position_after",
                                          "accounting", "lost_before_kill")}
    assert admission["line_cleared"], seen
    assert admission["filler2"] == "started" and admission["first_position"] == 1, seen
    assert admission["thief_position"] == 2, seen  # someone else with the id: at the back
    assert admission["owner_position"] == 1, seen  # the holder: ahead, once its node is lost
    assert admission["first_position_after"] == 2, seen
    assert admission["thief_position_after"] == 3, seen
    acct = admission["accounting"]
    # h1b, the one session on a, is lost when a dies (sessions of the earlier steps' nodes
    # may have been counted lost before, on their own schedule: counted from the kill)
    assert acct["lost"] - admission["lost_before_kill"] == 1, seen
    assert acct["resumed"] == 1, seen
    assert acct["admitted"] == acct["ended"] + acct["lost"] + acct["active"]


def test_waiters_keep_their_place_across_a_ledger_restart(ledger):
    assert ledger["holders"] == ["started", "started", B]
    assert ledger["aged"] is True  # the holders aged until both waiters fit the wait limit
    assert ledger["waiters_before"] == [1, 2]
    assert ledger["waiters_after_restart"] == ["waiting", "waiting"], ledger["waiter_codes"]
    assert ledger["waiter_codes"] == []
    assert ledger["restarted"] == {"active": 2, "waiting": 2, "nodes": 2}
    assert ledger["w1_after_h1"] == "started"


def test_nodes_recreate_a_ledger_gone_for_good(ledger):
    assert ledger["recreated"] == {"nodes": 2, "active": 2, "signed": True}
    metrics = ledger["b_metrics_after"]
    assert metrics, ledger
    assert float(metrics["speechpipe_cluster_ledger_reachable"]) == 1
    assert float(metrics["speechpipe_cluster_capacity"]) == 2


def test_cluster_drain_needs_the_cluster_secret(ledger):
    (rc_without, err_without, draining), (rc_with, _) = ledger["drains"]
    assert rc_without != 0 and draining == [False, False]
    assert err_without == ["speechpipe: the ledger refused the drain: set the cluster's "
                           "SPEECHPIPE_CLUSTER_SECRET"]
    assert rc_with == 0
