"""Peak load, wired: admission gate, degrade ladder, event-loop lag probe and their metrics.

``LoadControl`` belongs to a running server (``speechpipe.server.serve.ServerApp``). At start-up it
fixes the capacity (``--capacity N``, or ``calibrate_capacity``), then every ``tick_s`` it
samples the load — how long ASR requests take (queue wait + compute), the event loop's lag,
sessions vs capacity — feeds the degrade ladder (``speechpipe.server.degrade``), tells the affected
sessions about level changes (``status`` events) and updates the metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from speechpipe.machine import usable_cores
from speechpipe.server.admission import AdmissionCore, AdmissionGate
from speechpipe.server.degrade import DegradeController, LoadSample
from speechpipe.server.options import LoadOptions
from speechpipe.stages.frames import StatusEvent
from speechpipe.stages.ladder import degrade_max_utterance, level_status

if TYPE_CHECKING:
    from speechpipe.models.workers.batching import BatchObserver
    from speechpipe.server.metrics import LoadMetrics
    from speechpipe.session import Pipeline

__all__ = [
    "LoadControl",
    "CapacityEstimate",
    "calibrate_capacity",
]

log = logging.getLogger("speechpipe.load")


@dataclass(frozen=True, slots=True)
class CapacityEstimate:
    """The start-up calibration's estimate of sessions held at real time."""
    sessions: int
    asr_s_per_session_s: float  # ASR worker seconds per second of one live session
    tts_s_per_session_s: float
    detail: dict[str, float]


def calibrate_capacity(pipeline: Pipeline, *, batch: int = 4, audio_s: float = 4.0,
                       speech_duty: float = 0.6) -> CapacityEstimate:
    """A quick start-up estimate of the sessions this machine holds at real time (blocking).

    Times what one live session costs per second of audio *at degrade level 2* (the middle
    of the ladder: admitted sessions may be stepped down that far at peak): a partial decode
    (transcribe + translate of ``audio_s`` of real synthesized speech, level-2 token cap)
    every level-2 step (alone; a batch of ``batch`` is timed too but not credited, see below),
    plus 25 % for pause/final decodes, and Piper's real-time factor times ``speech_duty``.
    The ASR workers get 70 % of one core each (at most one per core); all stages together
    get 70 % of the cores. A conservative model (``docs/design.md``): measure with
    ``speechpipe bench load`` and configure ``--capacity``."""
    import numpy as np

    from speechpipe.models.whisper.engine import DecodeTask, WhisperRequest
    from speechpipe.stages.ladder import degrade_asr
    from speechpipe.voices.registry import resolve_voice
    from speechpipe.voices.tts_worker import resample_int16

    options = pipeline.options
    asr_options = degrade_asr(options.asr, 2)
    voice = resolve_voice(None, "en", options.voice_dirs)
    synthesizer = pipeline.tts_worker(voice).synthesizer
    text = ("The committee will meet again next week to discuss the budget and the new "
            "schedule for the river project.")
    t0 = time.perf_counter()
    speech = synthesizer.synthesize(text, 1.0)
    tts_s = time.perf_counter() - t0
    rtf = tts_s / max(0.1, len(speech) / synthesizer.sample_rate)
    audio16 = resample_int16(speech, synthesizer.sample_rate, 16_000).astype(np.float32) / 32768
    audio = np.zeros(int(audio_s * 16_000), np.float32)
    audio[: min(len(audio), len(audio16))] = audio16[: len(audio)]
    tasks = (DecodeTask("transcribe"), DecodeTask("translate"))
    request = WhisperRequest(audio=audio, language="en", tasks=tasks,
                             max_new_tokens=asr_options.partial_max_new_tokens, partial=True)
    engine = pipeline.engine
    singles = []
    for _ in range(2):
        t0 = time.perf_counter()
        engine.run(request)
        singles.append(time.perf_counter() - t0)
    single = min(singles)
    # Batching is not credited: a batch of identical requests shares one encode bucket, which
    # live sessions rarely do, so crediting it overestimates the capacity (docs/design.md).
    # The batched call is still timed, for the log.
    per_request = single
    batched = 0.0
    if options.batching.enabled and options.batching.max_batch > 1:
        n = min(batch, options.batching.max_batch)
        t0 = time.perf_counter()
        engine.run_batch([request] * n)
        batched = time.perf_counter() - t0
    asr = 1.25 * per_request / max(0.1, asr_options.step_s)
    tts = rtf * speech_duty
    cores = usable_cores()
    by_asr = 0.7 * min(options.batching.workers, cores) / max(asr, 1e-3)
    by_cpu = 0.7 * cores / max(asr + tts + 0.02, 1e-3)
    sessions = max(1, math.floor(min(by_asr, by_cpu)))
    return CapacityEstimate(
        sessions, asr, tts,
        {"single_s": single, "batch_s": batched, "tts_rtf": rtf, "cores": float(cores)},
    )


class LoadControl:
    """Admission + degrade ladder + lag probe for one server (see the module docs)."""

    def __init__(self, options: LoadOptions | None = None,
                 metrics: LoadMetrics | None = None) -> None:
        self.options = options or LoadOptions()
        self.metrics = metrics
        self.gate = AdmissionGate(
            AdmissionCore(self.options.admission),
            on_admitted=None if metrics is None else metrics.admission_wait.observe,
        )
        self.controller = DegradeController(self.options.degrade)
        self.pipeline: Pipeline | None = None
        self.estimate: CapacityEstimate | None = None
        self.loop_lag_s = 0.0
        self._turnarounds: deque[tuple[float, float]] = deque(maxlen=512)  # (when, seconds)
        self._task: asyncio.Task[None] | None = None
        self._refused_seen = 0
        self._previous_observer: BatchObserver | None = None

    # -- life -------------------------------------------------------------------------------
    async def start(self, pipeline: Pipeline) -> None:
        """Fix the capacity (calibrating if not configured), then start sampling."""
        self.pipeline = pipeline
        # The pipeline may be shared (tests, embedders): restore whoever observed it before.
        self._previous_observer = pipeline.whisper.observer
        pipeline.whisper.observer = self
        if self.options.admission.capacity is None:
            self.estimate = await asyncio.to_thread(calibrate_capacity, pipeline)
            # the calibration's own batches (several seconds of audio at once) are no
            # session's load: counted, they stepped a fresh idle server up the ladder for
            # its first ~10-20 s ("fast mode" for the first session; the first hour, issue 47)
            self._turnarounds.clear()
            self.gate.set_capacity(self.estimate.sessions)
            log.info("capacity: %d sessions (calibrated; ASR %.2f s/s, TTS %.2f s/s per session)",
                     self.estimate.sessions, self.estimate.asr_s_per_session_s,
                     self.estimate.tts_s_per_session_s)
        else:
            log.info("capacity: %d sessions (configured)", self.gate.capacity)
        if self.metrics is not None:
            self.metrics.capacity.set(self.gate.capacity)
            self.metrics.degrade_max_level.set(self.options.degrade.max_level)
        if self._task is None:
            self._task = asyncio.create_task(self._monitor(), name="load-control")

    def describe(self) -> str:
        """One line for the log: capacity and how it was found."""
        how = "configured" if self.estimate is None else "calibrated at start-up"
        return f"speechpipe: capacity {self.gate.capacity} sessions ({how})"

    async def stop(self) -> None:
        """Stop sampling the load."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.pipeline is not None:  # the pipeline may outlive this server (tests, embedders)
            self.pipeline.degrade.level = 0
            if self.pipeline.whisper.observer is self:
                self.pipeline.whisper.observer = self._previous_observer

    # -- BatchObserver (the ASR worker's thread) --------------------------------------------
    def batch_done(self, requests: int, waits: list[float], seconds: float,
                   urgencies: Sequence[str] = (), lane: str = "usual") -> None:
        """The ASR worker finished a batch (feeds the latency signal)."""
        now = time.monotonic()
        for wait in waits:
            self._turnarounds.append((now, wait + seconds))
        if self.metrics is not None:
            self.metrics.batch_done(requests, waits, seconds, urgencies, lane)

    def dropped(self, reason: str) -> None:
        """The ASR worker dropped a queued request without computing it."""
        if self.metrics is not None:
            self.metrics.dropped(reason)

    # -- sampling ---------------------------------------------------------------------------
    async def _monitor(self) -> None:
        loop = asyncio.get_running_loop()
        tick = self.options.tick_s
        while True:
            t0 = loop.time()
            await asyncio.sleep(tick)
            lag = max(0.0, loop.time() - t0 - tick)
            try:
                self.tick(lag, time.monotonic())
            except Exception:  # a metrics or notice hiccup must not stop load control
                log.exception("load control tick failed")

    def sample(self, loop_lag_s: float, now: float) -> LoadSample:
        """The load at ``now``: ASR turnaround, event-loop lag, sessions vs capacity."""
        assert self.pipeline is not None
        batcher = self.pipeline.whisper
        window = self.options.latency_window_s
        recent = sorted(s for t, s in list(self._turnarounds) if now - t <= window)
        recent_p90 = recent[int(0.9 * (len(recent) - 1))] if recent else 0.0
        core = self.gate.core
        return LoadSample(
            asr_latency_s=max(batcher.oldest_wait(), recent_p90),
            loop_lag_s=loop_lag_s,
            load_ratio=len(self.pipeline.live_sessions) / max(1, core.capacity),
            sessions=len(self.pipeline.live_sessions),
        )

    def tick(self, loop_lag_s: float, now: float) -> int:
        """One sampling step (public for tests): returns the degrade level."""
        assert self.pipeline is not None
        self.loop_lag_s = loop_lag_s
        sample = self.sample(loop_lag_s, now)
        before = self.controller.level
        level = self.controller.update(sample, now) if self.options.degrade_enabled else 0
        if level != before:
            log.info("degrade level %d -> %d (asr %.2f s, loop lag %.3f s, load %.2f)",
                     before, level, sample.asr_latency_s, sample.loop_lag_s, sample.load_ratio)
        self.pipeline.degrade.level = level
        self._announce()
        self._export(sample, level, level != before)
        return level

    def _announce(self) -> None:
        """Tell each session whose effective level changed; apply the VAD's cut length."""
        assert self.pipeline is not None
        base_max = self.pipeline.options.vad.max_utterance_s
        for session in list(self.pipeline.live_sessions):
            ladder = session.ladder
            if ladder is None:
                continue
            level = ladder.level()
            if level == ladder.announced:
                continue
            session.set_max_utterance_s(degrade_max_utterance(base_max, level))
            if level > ladder.floor or ladder.announced > ladder.floor:
                status, message, detail = level_status(level)
                stream_pts = session.clock.stamp(0) if session.clock.wall_seconds() else 0
                if not session.post(StatusEvent(status, message, stream_pts, detail)):
                    continue  # try again next tick
            ladder.announced = level

    def _export(self, sample: LoadSample, level: int, changed: bool) -> None:
        metrics = self.metrics
        if metrics is None or self.pipeline is None:
            return
        core = self.gate.core
        metrics.asr_queue_depth.set(self.pipeline.whisper.queue_depth)
        metrics.loop_lag.observe(sample.loop_lag_s)
        metrics.capacity.set(core.capacity)
        metrics.sessions_admitted.set(len(core.active))
        metrics.sessions_queued.set(len(core.waiting))
        if core.refused > self._refused_seen:
            metrics.sessions_refused.inc(core.refused - self._refused_seen)
            self._refused_seen = core.refused
        metrics.degrade_level.set(level)
        if changed:
            metrics.degrade_transitions.inc()
