"""Issue 46: the echo guard follows the participant's reported playout clock (``playout``),
with the fixed tail as the fallback when a client reports nothing; hostile reports are a
recoverable ``bad_message`` and change nothing."""

from __future__ import annotations

import math

import pytest

from speechpipe.transport.connection_core import (
    Claims,
    ConnectionCore,
    ReportPlayout,
    SendError,
    StartPlan,
)
from speechpipe.transport.echo_guard import EchoGuard
from speechpipe.transport.protocol import Playout, Start, parse_text

# -- the rule, without sockets ---------------------------------------------------------------


def test_without_reports_the_fixed_tail_after_back_to_back_playback() -> None:
    guard = EchoGuard(tail_s=0.5)
    assert not guard.hears_itself(0.0)
    guard.sent(2.0, now=10.0)
    guard.sent(1.0, now=10.5)  # queued behind the first: ends at 13.0
    assert guard.closed_until() == pytest.approx(13.5)
    assert guard.hears_itself(13.4) and not guard.hears_itself(13.6)


def test_a_late_client_keeps_its_microphone_closed_until_its_reported_end() -> None:
    guard = EchoGuard(tail_s=0.5, report_tail_s=0.25)
    guard.sent(2.0, now=10.0)  # the server alone would open at 12.5
    guard.report(0.5, now=11.5)  # 1.5 s still to play: it runs 1 s late
    assert guard.lag_s == pytest.approx(1.0)
    assert guard.closed_until() == pytest.approx(13.25)
    assert guard.hears_itself(13.0)  # the fixed tail would have opened at 12.5
    guard.sent(1.0, now=20.0)  # later speech: the learned lag applies at once
    assert guard.closed_until() == pytest.approx(22.25)


def test_an_early_client_opens_its_microphone_sooner() -> None:
    guard = EchoGuard(tail_s=0.5, report_tail_s=0.25)
    guard.sent(2.0, now=10.0)
    guard.report(2.0, now=10.1)  # played it all (or skipped it)
    assert guard.closed_until() == pytest.approx(10.35)
    assert not guard.hears_itself(10.4)


def test_the_reported_lag_is_bounded() -> None:
    guard = EchoGuard(tail_s=0.5, report_tail_s=0.0, max_lag_s=3.0)
    guard.sent(100.0, now=0.0)
    guard.report(0.0, now=90.0)  # "still 100 s to play" 90 s later: at most 3 s of lag
    assert guard.lag_s == 3.0
    assert guard.closed_until() == pytest.approx(103.0)


@pytest.mark.parametrize("bad", ["1", None, True, [], {}, -0.1, math.nan, math.inf, 1e308,
                                 2.2, 10**400])
def test_a_hostile_report_is_refused_and_changes_nothing(bad: object) -> None:
    guard = EchoGuard(tail_s=0.5)
    guard.sent(2.0, now=10.0)
    before = guard.closed_until()
    with pytest.raises(ValueError):
        guard.report(bad, now=10.0)
    assert guard.closed_until() == before and not guard.reported


def test_a_report_never_goes_back() -> None:
    guard = EchoGuard()
    guard.sent(2.0, now=0.0)
    guard.report(1.5, now=1.0)
    with pytest.raises(ValueError, match="went back"):
        guard.report(0.5, now=1.1)
    guard.report(1.49, now=1.2)  # rounding: taken as no progress
    assert guard.played_s == 1.5


def test_playout_parses_and_the_core_hands_it_over() -> None:
    assert parse_text('{"type": "playout", "played_s": 1.5}') == Playout(1.5)
    core = ConnectionCore(max_message_bytes=1 << 17, max_lead_s=5.0)
    assert isinstance(core.receive('{"type": "playout"}', 0.0)[0], SendError)  # no start yet
    start = parse_text('{"type": "start", "role": "participant"}')  # the guard's one role
    assert isinstance(start, Start)
    assert isinstance(core.plan_start(start, Claims()), StartPlan)
    core.session_opened(start)
    assert core.receive('{"type": "playout", "played_s": 2.5}', 0.0) == [ReportPlayout(2.5)]
    hostile = core.receive('{"type": "playout", "played_s": NaN}', 0.0)  # the guard refuses
    assert isinstance(hostile[0], ReportPlayout) and math.isnan(hostile[0].played_s)  # type: ignore[arg-type]
