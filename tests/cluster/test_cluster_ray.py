"""Real Ray, real WebSocket clients: a head and two scripted nodes (capacity 2 each) inside a
private network namespace this test creates (``unshare -n``; every address in it is
loopback), driven by ``tests/support/cluster.py``; this test checks what it recorded.

The model is not the point here, so the nodes serve the test-only scripted pipeline
(``tests/scripted_serve.py serve``). Needs root (for ``unshare -n``) and Ray.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers import run_scenario

ROOT = Path(__file__).resolve().parents[2]

A, B = "ws://127.0.0.1:8801/ws", "ws://127.0.0.1:8802/ws"


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_scenario(tmp_path_factory)


def test_sessions_spread_over_both_nodes_through_redirects(scenario: dict[str, Any]) -> None:
    spread = scenario["spread"]
    assert [s["outcome"] for s in spread] == ["started"] * 4
    assert [(s["url"], s["redirected"]) for s in spread] == [
        (A, False), (A, False), (B, True), (B, True)]
    assert not any(s["queued"] for s in spread)
    assert scenario["spread_nodes"] == {A: 2, B: 2}
    metrics = dict(line.rsplit(" ", 1) for line in scenario["metrics_b"])
    assert float(metrics["speechpipe_cluster_ledger_reachable"]) == 1
    assert float(metrics["speechpipe_cluster_capacity"]) == 4
    assert float(metrics["speechpipe_cluster_node_sessions"]) == 2
    assert float(metrics['speechpipe_cluster_sessions{state="active"}']) == 4
    # four, and the room's speaker of step 0 (it ended before step 1)
    assert float(metrics['speechpipe_cluster_ledger_count{kind="admitted"}']) == 5


def test_a_room_lives_on_one_node_and_a_listener_elsewhere_is_redirected(
    scenario: dict[str, Any],
) -> None:
    assert scenario["room_speaker"] == "started"
    assert "room on ws://127.0.0.1:8801/ws: 1 speakers" in scenario["room_status"]
    assert not scenario["room_id_in_status"], "room ids are capabilities: not in the status"
    assert scenario["room_listener_first"] == "closed 4020"
    assert scenario["room_redirect_url"] == A
    assert scenario["room_listener_moved"] == "started"
    assert scenario["room_listener_targets"] > 0 and scenario["room_listener_speaker"]
    assert scenario["room_closes"] == [1000, 1000]
    assert scenario["room_gone"], "the room ended with its members"


def test_fifth_to_seventh_wait_in_one_line_and_the_eighth_is_refused(scenario):
    assert (scenario["c5_position"], scenario["c6_position"]) == (1, 2)  # on b, then on a
    assert scenario["c6b_position"] == 3  # --max-queue 3: the line is full now
    assert scenario["c5_wait_s"] is not None and scenario["c5_wait_s"] > 0
    assert scenario["c7_outcome"] == "closed 1013"
    assert scenario["c7_retry_after_s"] >= 5


def test_a_session_ending_on_a_admits_the_waiter_from_b_by_redirect(scenario):
    assert scenario["c1_close"] == 1000
    assert scenario["c5_first"] == "closed 4020"
    hop = scenario["c5_redirect"]
    assert hop["url"] == A and hop["ticket"] and 0 < hop["expires_in_s"] <= 10
    assert scenario["c5_moved"] == "started" and scenario["c5_moved_url"] == A
    assert scenario["c5_moved_queued_again"] is False
    assert scenario["c6_position_after"] == 1


def test_killing_the_ledger_drops_no_session_and_double_books_no_slot(scenario):
    after = scenario["after_ledger_restart"]
    assert after["active"] == 4 and after["capacity"] == 4
    assert after["nodes"] == {A: 2, B: 2}
    assert sorted(after["still_open"]) == ["c2", "c3", "c4", "c5"]
    assert sorted(after["targets_grew"]) == ["c2", "c3", "c4", "c5"]  # audio still flowing
    assert scenario["c8_first_after_restart"] == "queued"  # full: not admitted twice


def test_a_killed_node_s_clients_resume_on_the_other_node_ahead_of_the_line(scenario):
    assert sorted(scenario["on_b"]) == ["c3", "c4"]
    assert scenario["line_before_resumes"] == 1  # c6 alone: room for the two resumes
    assert scenario["b_close_codes"] == [1006, 1006]  # the process died: no close frame
    assert scenario["resume_positions"] == [1, 2]  # ahead of c6, who waited before them
    assert scenario["c6_position_behind_resumes"] == 3
    lost = scenario["after_node_loss"]
    assert lost["lost"] == 2 and lost["capacity"] == 2
    assert lost["nodes"][B] == [False, 0]
    assert scenario["resumed_outcomes"] == ["started", "started"]
    acct = scenario["accounting"]
    assert acct["admitted"] == acct["ended"] + acct["lost"] + acct["active"]


def test_drain_closes_the_rest_with_4021_and_a_resume_id_then_the_node_exits(scenario):
    assert scenario["drain_rc"] == 0
    closes = scenario["drained_close"]
    assert len(closes) == 2
    for code, errors in closes:
        assert code == 4021
        assert errors and errors[0]["code"] == "node_drained" and errors[0]["resume"]
    assert scenario["a_exit"] == 0
    assert scenario["status_rc"] == 0 and "lost" in scenario["status_text"]


@pytest.fixture(scope="module")
def real_scenario(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    clip = ROOT.parent / "shared" / "samples" / "wav" / "es_enh_12411_cv.wav"
    if not clip.is_file():
        pytest.skip(f"needs ../shared/samples (real recordings, not in the repo): {clip}")
    return run_scenario(tmp_path_factory, "--real-models")


def test_one_real_session_per_node_translates_speech(real_scenario: dict[str, Any]) -> None:
    assert real_scenario["r1_first"] == "started"
    assert real_scenario["r2_first"] == "closed 4020"  # a was full: redirected to b
    assert real_scenario["r2_moved"] == "started"
    sessions = real_scenario["real"]
    assert [s["url"] for s in sessions] == [A, B]
    for session in sessions:
        assert session["close"] == 1000
        assert session["audio_bytes"] > 16000  # translated speech came back
        words = set(session["target"].lower().replace(",", " ").replace(".", " ").split())
        assert words & {"prince", "planet", "universe"}, session["target"]
