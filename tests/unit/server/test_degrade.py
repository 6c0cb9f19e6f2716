"""The degrade ladder: transitions under a scripted overload (pure core, virtual time), the
options each level gives a session, the announcements, and the ASR stage reading its options
per decode."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np
import pytest

from speechpipe.models.whisper.engine import DecodeResult, WhisperRequest, WhisperResult
from speechpipe.server.admission import AdmissionOptions
from speechpipe.server.degrade import DegradeController, DegradeOptions, LoadSample
from speechpipe.server.load_control import LoadControl
from speechpipe.server.options import LoadOptions
from speechpipe.stages.asr import AsrOptions, AsrStage
from speechpipe.stages.channels import Channel
from speechpipe.stages.clock import BasisStreamClock
from speechpipe.stages.frames import STREAM_RATE, StatusEvent, VadEvent
from speechpipe.stages.ladder import (
    MAX_LEVEL,
    DegradeState,
    SessionLadder,
    degrade_asr,
    degrade_max_utterance,
)
from speechpipe.stages.vad import LabeledAudio

OVER = LoadSample(asr_latency_s=1.5)
CALM = LoadSample(asr_latency_s=0.2, loop_lag_s=0.01, load_ratio=0.5)
BETWEEN = LoadSample(asr_latency_s=0.7)


def run_script(controller: DegradeController, script: list[tuple[float, LoadSample]],
               tick: float = 0.5, start: float = 0.0) -> list[tuple[float, int]]:
    """Feed (duration, sample) phases every ``tick`` seconds; return (time, level) changes."""
    changes = []
    now = start
    for duration, sample in script:
        end = now + duration
        while now < end - 1e-9:
            before = controller.level
            if controller.update(sample, now) != before:
                changes.append((round(now, 2), controller.level))
            now += tick
    return changes


def test_overload_steps_up_one_level_per_period_and_recovers_slowly():
    controller = DegradeController(DegradeOptions(up_after_s=2.0, down_after_s=10.0))
    changes = run_script(controller, [(5, CALM), (12, OVER), (5, BETWEEN), (45, CALM)])
    ups = [c for c in changes if c[0] < 22]
    downs = [c for c in changes if c[0] >= 22]
    # overload starts at t=5: level 1 at 7, then one level every 2 s up to the top
    assert ups == [(7.0, 1), (9.0, 2), (11.0, 3), (13.0, 4)]
    # between the thresholds (t=17..22) nothing moves; calm from 22: one level per 10 s
    assert downs == [(32.0, 3), (42.0, 2), (52.0, 1), (62.0, 0)]
    assert controller.transitions == 8


def test_no_flapping_on_a_load_that_comes_and_goes():
    controller = DegradeController(DegradeOptions(up_after_s=2.0, down_after_s=10.0))
    script = [(0.5, OVER), (0.5, CALM)] * 40  # a 1 s on/off blip for 40 s
    assert run_script(controller, script) == []
    # sustained overload, then a short calm blip does not step down
    script = [(3, OVER), *[(1.0, CALM), (1.0, BETWEEN)] * 15]
    assert run_script(controller, script, start=100.0) == [(102.0, 1)]


def test_severe_overload_steps_two_levels_at_a_time():
    controller = DegradeController(DegradeOptions(up_after_s=2.0))
    assert run_script(controller, [(5, LoadSample(asr_latency_s=3.0))]) == [(2.0, 2), (4.0, 4)]


@pytest.mark.parametrize(("sample", "expected"), [
    (LoadSample(loop_lag_s=0.4), [(1.0, 1), (2.0, 2)]),
    # over the capacity: busy (level 2 at once), and overloaded (one more level a period)
    (LoadSample(load_ratio=1.5), [(0.0, 2), (1.0, 3), (2.0, 4)]),
])
def test_loop_lag_and_sessions_over_capacity_count_as_overload(sample, expected):
    controller = DegradeController(DegradeOptions(up_after_s=1.0))
    assert run_script(controller, [(3, sample)]) == expected


def test_a_burst_of_sessions_puts_the_ladder_ahead_of_the_queue():
    """Sessions past half the capacity: level 2 from the first sample, before any ASR
    turnaround grew; held while they last, however calm; then down a level a period (the
    first at once when the load was calm all along)."""
    controller = DegradeController(DegradeOptions(up_after_s=2.0, down_after_s=10.0))
    busy_calm = LoadSample(asr_latency_s=0.2, loop_lag_s=0.01, load_ratio=0.9)
    changes = run_script(controller, [(5, CALM), (30, busy_calm), (25, CALM)])
    assert changes == [(5.0, 2), (35.0, 1), (45.0, 0)]  # calm all along: one step at once
    # overloaded on top of busy: the reactive steps go on from the floor
    controller = DegradeController(DegradeOptions(up_after_s=2.0))
    busy_over = LoadSample(asr_latency_s=1.5, load_ratio=0.9)
    assert run_script(controller, [(5, busy_over)]) == [(0.0, 2), (2.0, 3), (4.0, 4)]


def test_a_lone_session_is_no_burst():
    controller = DegradeController()
    alone = LoadSample(asr_latency_s=0.2, loop_lag_s=0.01, load_ratio=1.0, sessions=1)
    assert run_script(controller, [(30, alone)]) == []
    two = LoadSample(asr_latency_s=0.2, loop_lag_s=0.01, load_ratio=1.0, sessions=2)
    assert run_script(controller, [(1, two)], start=30.0) == [(30.0, 2)]


@pytest.mark.parametrize("options", [DegradeOptions(busy_load_ratio=0.0),
                                     DegradeOptions(busy_level=0)])
def test_the_busy_floor_can_be_switched_off(options):
    controller = DegradeController(options)
    busy_calm = LoadSample(asr_latency_s=0.2, loop_lag_s=0.01, load_ratio=0.9)
    assert run_script(controller, [(30, busy_calm)]) == []


def test_the_busy_level_must_be_on_the_ladder():
    with pytest.raises(ValueError, match="busy_level"):
        DegradeOptions(busy_level=MAX_LEVEL + 1)


def test_each_level_sheds_more_work():
    base = AsrOptions(beam_size=2, final_beam_size=5)  # a "quality" session
    levels = [degrade_asr(base, n) for n in range(MAX_LEVEL + 1)]
    assert levels[0] is base
    # level 1: greedy partials, the decodes that commit everything keep their beam
    assert levels[1].beam_size == 1 and levels[1].final_beam_size == 5
    assert levels[1].step_s == base.step_s
    assert levels[2].step_s == 1.5
    assert levels[2].beam_size == 1 and levels[2].final_beam_size == 1
    assert levels[2].partial_max_new_tokens == 10 and levels[2].source_partials
    assert levels[3].source_partials is False and levels[3].step_s == 2.0
    assert degrade_max_utterance(15.0, 3) == 15.0 and degrade_max_utterance(15.0, 4) == 8.0
    # the first words keep a cadence of at most 1 s on every level (0.5 s on level 0)
    assert [lv.early_step_s for lv in levels] == [0.5, 0.5, 1.0, 1.0, 1.0]
    assert all(lv.early_step_s <= lv.step_s for lv in levels)


def test_session_ladder_takes_the_higher_of_mode_floor_and_server_level():
    state = DegradeState()
    fast = SessionLadder(AsrOptions(), state, floor=2)
    balanced = SessionLadder(AsrOptions(), state)
    assert (fast.level(), balanced.level()) == (2, 0)
    assert balanced.current() == AsrOptions()
    state.level = 3
    assert (fast.level(), balanced.level()) == (3, 3)
    assert balanced.current().source_partials is False
    assert balanced.current() is balanced.current()  # computed once per level


# -- announcements (LoadControl with a scripted pipeline) -----------------------------------

@dataclass
class FakeWorker:
    wait: float = 0.0
    queue_depth: int = 0
    observer: object = None

    def oldest_wait(self) -> float:
        return self.wait


@dataclass
class FakeSession:
    ladder: SessionLadder
    max_utterance_s: list[float] = field(default_factory=list)  # every cut length set
    clock: BasisStreamClock = field(default_factory=BasisStreamClock)
    posted: list[StatusEvent] = field(default_factory=list)

    def post(self, event: StatusEvent) -> bool:
        self.posted.append(event)
        return True

    def set_max_utterance_s(self, seconds: float) -> None:
        self.max_utterance_s.append(seconds)


@dataclass
class FakePipeline:
    whisper: FakeWorker = field(default_factory=FakeWorker)
    degrade: DegradeState = field(default_factory=DegradeState)
    live_sessions: set = field(default_factory=set)
    options: object = None


def test_sessions_hear_degraded_then_normal_and_fast_clients_hear_nothing_at_their_floor():
    from speechpipe.config import PipelineOptions

    pipeline = FakePipeline(options=PipelineOptions())
    balanced = FakeSession(SessionLadder(AsrOptions(), pipeline.degrade))
    fast = FakeSession(SessionLadder(AsrOptions(), pipeline.degrade, floor=2))
    pipeline.live_sessions = {id(balanced): balanced, id(fast): fast}.values()  # type: ignore
    control = LoadControl(LoadOptions(admission=AdmissionOptions(capacity=8),
                                      degrade=DegradeOptions(up_after_s=1.0, down_after_s=2.0)))
    control.pipeline = pipeline  # type: ignore[assignment]
    levels = []
    now = 0.0
    for wait in [1.5] * 12 + [0.0] * 24:  # 6 s of overload, then 12 s calm
        pipeline.whisper.wait = wait
        levels.append(control.tick(0.0, now))
        now += 0.5
    assert max(levels) == MAX_LEVEL and levels[-1] == 0
    statuses = [(e.status, e.detail["level"]) for e in balanced.posted]
    assert statuses[0] == ("degraded", 1) and statuses[-1] == ("normal", 0)
    assert balanced.posted[0].message == "fast mode: translation may be less accurate"
    assert [s for s, _ in statuses].count("normal") == 1
    # the fast client was told when the server went beyond its own floor, and back to it
    assert [e.detail["level"] for e in fast.posted] == [3, 4, 3, 2]
    assert fast.posted[-1].status == "degraded"
    assert min(balanced.max_utterance_s) < 15.0  # shortened on the way up the ladder
    assert balanced.max_utterance_s[-1] == 15.0  # restored after level 4


# -- the ASR stage reads its options per decode ---------------------------------------------

class Recorder:
    def __init__(self) -> None:
        self.requests: list[WhisperRequest] = []

    async def __call__(self, request: WhisperRequest) -> WhisperResult:
        self.requests.append(request)
        decodes = tuple(DecodeResult(t.task, "hola", -0.2, 0.01) for t in request.tasks)
        return WhisperResult("es", 1.0, decodes, 0.0, 0.0)


async def test_asr_stage_reads_its_options_per_decode():
    state = DegradeState()
    # settle_margin_s=0: the scripted one-word hypotheses commit by agreement alone, so the
    # first words are out and the cadence is the ladder's (what this test reads)
    ladder = SessionLadder(AsrOptions(step_s=0.5, min_voiced_s=0.3, settle_margin_s=0.0), state)
    recorder = Recorder()
    stage = AsrStage(recorder, BasisStreamClock(), options=ladder, language="es")
    inbox: Channel[LabeledAudio] = Channel(1)
    outbox: Channel = Channel(1000)
    events: Channel = Channel(1000)

    def chunk(start: float, end: float, events_=()) -> LabeledAudio:
        n = int((end - start) * STREAM_RATE)
        return LabeledAudio(np.full(n, 100, np.int16), int(start * STREAM_RATE), n,
                            tuple(events_), 0.0)

    async def produce() -> None:
        await inbox.put(chunk(0, 0.2, [VadEvent("start", 0, 0, 3200)]))
        for t in range(2, 60):
            if t == 30:
                state.level = 3  # overload: partials translate only, every 2 s
            await inbox.put(chunk(t / 10, (t + 1) / 10))
        inbox.close()

    async with asyncio.TaskGroup() as group:
        group.create_task(produce())
        group.create_task(stage.run(inbox, outbox, events))
    before = [r for r in recorder.requests if r.partial and len(r.audio) < 3.0 * STREAM_RATE]
    after = [r for r in recorder.requests if r.partial and len(r.audio) > 3.2 * STREAM_RATE]
    assert before and all(len(r.tasks) == 2 for r in before)
    assert after and all([t.task for t in r.tasks] == ["translate"] for r in after)
    final = recorder.requests[-1]
    assert not final.partial and len(final.tasks) == 2  # captions catch up at the end
    gaps = np.diff([len(r.audio) / STREAM_RATE for r in after])
    assert all(g >= 1.9 for g in gaps)


async def test_the_start_up_calibration_is_not_counted_as_load(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the newcomer run (issue 47): a session started ~6 s after `serve` on an idle machine
    # heard "fast mode": the calibration's batch (4 x 4 s of audio) was observed as an ASR
    # turnaround of several seconds, and the ladder stepped up on it
    import time

    from speechpipe.config import PipelineOptions
    from speechpipe.server import load_control

    pipeline = FakePipeline(options=PipelineOptions())

    def calibrate(pipe: FakePipeline) -> load_control.CapacityEstimate:
        pipe.whisper.observer.batch_done(4, [0.0] * 4, 3.0)  # type: ignore[attr-defined]
        return load_control.CapacityEstimate(4, 0.2, 0.05, {})

    monkeypatch.setattr(load_control, "calibrate_capacity", calibrate)
    control = LoadControl(LoadOptions(tick_s=60.0))  # no ticks of its own in this test
    await control.start(pipeline)  # type: ignore[arg-type]
    try:
        assert control.gate.capacity == 4
        now = time.monotonic()
        levels = [control.tick(0.0, now + 0.5 * i) for i in range(6)]  # inside the window
        assert levels == [0] * 6
        # a real batch as slow as that, after the start, still counts
        pipeline.whisper.observer.batch_done(1, [0.0], 3.0)  # type: ignore[attr-defined]
        now = time.monotonic()
        assert max(control.tick(0.0, now + 0.5 * i) for i in range(6)) > 0
    finally:
        await control.stop()
