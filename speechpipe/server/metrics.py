"""Prometheus metrics for the live server (one ``CollectorRegistry`` per server).

The transport reports through the ``ServerObserver`` hooks and stages report timings as
data (``timings`` on ``TextHypothesis``/``SpeechChunk``); this module turns both into
metrics, so nothing below the app layer imports prometheus-client. Labels only ever hold
bounded, server-chosen values (event types, stage names, error and close codes).
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    ProcessCollector,
    generate_latest,
)

from speechpipe.machine import cpu_info
from speechpipe.models.workers.batching import URGENCIES
from speechpipe.stages.coverage import classify_utterance
from speechpipe.stages.frames import (
    STREAM_RATE,
    ErrorEvent,
    OutputEvent,
    SpeechChunk,
    StatusEvent,
    TextHypothesis,
    UtteranceEnd,
    VadEvent,
)
from speechpipe.transport.codes import SERVER_CLOSE_CODES

__all__ = ["ServerMetrics", "LoadMetrics", "ListenerMetrics", "CONTENT_TYPE_LATEST"]

STAGE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.175, 0.25, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0)
LAG_BUCKETS = (0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16)
LOOP_LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0)
OFFSET_BUCKETS = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 30.0)
WAIT_BUCKETS = (0.01, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)

# Refusals at the HTTP upgrade of ``/ws``, by status (the transport's ``upgrade_refused``).
UPGRADE_REFUSALS = {400: "bad_header", 401: "unauthorized", 403: "origin_not_allowed",
                    429: "too_many_sessions", 503: "not_ready"}
def _event_type(event: OutputEvent) -> str:
    if isinstance(event, TextHypothesis):
        return event.side
    if isinstance(event, SpeechChunk):
        return "audio"
    if isinstance(event, VadEvent):
        return "vad"
    if isinstance(event, UtteranceEnd):
        return "utterance_end"
    if isinstance(event, StatusEvent):
        return "status"
    if isinstance(event, ErrorEvent):
        return "error"
    return "other"


class ServerMetrics:
    """Implements ``transport.ws_connection.ServerObserver``; ``text()`` serves /metrics."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        self.ready = Gauge("speechpipe_ready", "1 once models are loaded and warmed", registry=r)
        # what a decoder step costs depends on the CPU kind (speechpipe.machine): on the
        # dashboard beside the latencies, so two servers' figures are not read as one
        cpu = cpu_info()
        Info("speechpipe_cpu", "The CPU: model, widest int8 instructions, CTranslate2's int8 GEMM",
             registry=r).info({"model": cpu.model, "isa": cpu.isa or "unknown",
                               "gemm": cpu.gemm or "unknown",
                               "repacks_weights": str(cpu.repacks_weights).lower()})
        self.sessions_active = Gauge(
            "speechpipe_sessions_active", "Sessions currently running", registry=r
        )
        self.sessions = Counter("speechpipe_sessions", "Sessions started", registry=r)
        self.session_seconds = Histogram(
            "speechpipe_session_duration_seconds", "Wall-clock length of ended sessions",
            buckets=(1, 5, 15, 30, 60, 120, 300, 900, 1800, 3600), registry=r,
        )
        self.closes = Counter(
            "speechpipe_sessions_closed", "Ended sessions by WebSocket close code", ["code"],
            registry=r,
        )
        self.events = Counter(
            "speechpipe_events", "Session events sent to clients", ["type"], registry=r
        )
        self.errors = Counter(
            "speechpipe_errors", "Error events and fatal errors by code", ["code"], registry=r
        )
        self.stage_seconds = Histogram(
            "speechpipe_stage_seconds", "Wall-clock seconds per unit of stage work", ["stage"],
            buckets=STAGE_BUCKETS, registry=r,
        )
        self.caption_lag = Histogram(
            "speechpipe_caption_lag_seconds",
            "Stream time a hypothesis was emitted minus the end of the audio it covers",
            ["side"], buckets=LAG_BUCKETS, registry=r,
        )
        self.unfaithful = Counter(
            "speechpipe_unfaithful_utterances",
            "Ended utterances whose translation was invented (no source words) or dropped "
            "speech (under half the source words)", ["kind"], registry=r,
        )
        self.speech_seconds = Counter(
            "speechpipe_speech_output_seconds", "Seconds of translated speech produced",
            registry=r,
        )
        self.refusals = Counter(
            "speechpipe_refusals",
            "Connections turned away before a session started: HTTP status at the upgrade "
            "or the close code sent before 'started'",
            ["code", "reason"], registry=r,
        )
        for status, reason in UPGRADE_REFUSALS.items():  # visible (at 0) before the first
            self.refusals.labels(str(status), reason)
        self.connections_closed = Counter(
            "speechpipe_connections_closed",
            "WebSocket connections ended, by the close code the server sent (or 'client')",
            ["code", "reason"], registry=r,
        )
        self.listener = ListenerMetrics(r)  # commit latency, speech Start/EndOffset
        self.load = LoadMetrics(r)  # shared workers, admission, degrade ladder
        self.rooms = Gauge("speechpipe_rooms", "Rooms open", registry=r)
        self.room_listeners = Gauge(
            "speechpipe_room_listeners", "Room listeners connected (over every room)",
            registry=r)
        self.fanout_drops = Counter(
            "speechpipe_room_fanout_drops",
            "Room listeners closed because their outbox overflowed (listener_too_slow)",
            registry=r)
        self.fanout_cpu = Counter(
            "speechpipe_room_fanout_cpu_seconds",
            "CPU seconds the server spent writing room messages to listeners' sockets",
            registry=r)
        self.fanout_delay_seconds = Histogram(
            "speechpipe_room_fanout_delay_seconds",
            "From a room message's publication to its last byte written to a listener's socket",
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0),
            registry=r)
        self.trace_export_failures = Counter(
            "speechpipe_trace_export_failures",
            "Span batches the OTLP exporter failed to deliver (sessions are unaffected)",
            registry=r,
        )
        ProcessCollector(registry=r)  # process_cpu_seconds_total, process_resident_memory_bytes

    # -- ServerObserver --------------------------------------------------------------------
    def rooms_changed(self, rooms: int, listeners: int) -> None:
        self.rooms.set(rooms)
        self.room_listeners.set(listeners)

    def fanout_dropped(self) -> None:
        self.fanout_drops.inc()

    def fanout_delay(self, seconds: float, cpu_s: float = 0.0) -> None:
        self.fanout_delay_seconds.observe(max(0.0, seconds))
        self.fanout_cpu.inc(max(0.0, cpu_s))

    def session_opened(self) -> None:
        """Count a session start."""
        self.sessions.inc()
        self.sessions_active.inc()

    def session_closed(self, seconds: float, close_code: int | None) -> None:
        """Count a session end, its duration and close code."""
        self.sessions_active.dec()
        self.session_seconds.observe(seconds)
        self.closes.labels(str(close_code) if close_code is not None else "client").inc()

    def output_event(self, event: OutputEvent) -> None:
        """Record an event's stage timings, caption lag, speech or error."""
        self.events.labels(_event_type(event)).inc()
        if isinstance(event, TextHypothesis | SpeechChunk):
            for timing in event.timings:
                self.stage_seconds.labels(timing.stage).observe(max(0.0, timing.seconds))
        if isinstance(event, TextHypothesis):
            lag = (event.stream_pts - event.audio_end) / STREAM_RATE
            self.caption_lag.labels(event.side).observe(max(0.0, lag))
        elif isinstance(event, SpeechChunk):
            self.speech_seconds.inc(event.duration)
        elif isinstance(event, ErrorEvent):
            self.errors.labels(event.code).inc()
        elif isinstance(event, UtteranceEnd):
            self.utterance_ended(event)

    def utterance_ended(self, event: UtteranceEnd) -> None:
        """Count an unfaithful translation (``stages.coverage.classify_utterance``); fed by
        every ``UtteranceEnd``, the last one when the session ends."""
        verdict = classify_utterance(event.source_text, event.target_text)
        if verdict in ("invented", "dropped"):
            self.unfaithful.labels(verdict).inc()

    def error(self, code: str) -> None:
        """Count an error sent to a client."""
        self.errors.labels(code).inc()

    def upgrade_refused(self, status: int, reason: str | None = None) -> None:
        """Count a refused WebSocket upgrade by status and reason."""
        self.refusals.labels(str(status), reason or UPGRADE_REFUSALS.get(status, "other")).inc()

    def connection_closed(self, code: int | None, reason: str, *, session: bool) -> None:
        """``code``: the close code the server sent, ``None`` when the client closed or
        vanished first; ``reason``: a server-chosen error code (bounded);
        ``session``: whether a session had started on the connection."""
        label = "client" if code is None else str(code) if code in SERVER_CLOSE_CODES else "other"
        self.connections_closed.labels(label, reason).inc()
        if not session and code is not None and code not in (1000, 1001):
            self.refusals.labels(label, reason).inc()

    # -- exposition ------------------------------------------------------------------------
    def set_ready(self, ready: bool) -> None:
        """Set the readiness gauge."""
        self.ready.set(1 if ready else 0)

    def text(self) -> bytes:
        """The metrics in Prometheus text format."""
        return generate_latest(self.registry)


class ListenerMetrics:
    """What the listener experiences, per utterance of every session (stream seconds);
    fed by ``speechpipe.server.observe.ListenerLatency``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.commit_latency = Histogram(
            "speechpipe_commit_latency_seconds",
            "Stream time committed text grew minus the end of the audio it covers",
            ["side"], buckets=LAG_BUCKETS, registry=r,
        )
        self.start_offset = Histogram(
            "speechpipe_speech_start_offset_seconds",
            "Per utterance: first translated speech minus the start of the source speech",
            buckets=OFFSET_BUCKETS, registry=r,
        )
        self.end_offset = Histogram(
            "speechpipe_speech_end_offset_seconds",
            "Per utterance: end of the translated speech (laid back to back) minus the end "
            "of the source speech",
            buckets=OFFSET_BUCKETS, registry=r,
        )


class LoadMetrics:
    """Peak-load metrics: the shared ASR worker (a ``models.workers.batching.BatchObserver``; called
    on its thread), admission and the degrade ladder (set by ``speechpipe.server.load_control``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.asr_queue_depth = Gauge(
            "speechpipe_asr_queue_depth", "ASR requests waiting for the shared worker",
            registry=r,
        )
        self.asr_queue_wait = Histogram(
            "speechpipe_asr_queue_wait_seconds",
            "Time an ASR request waited before its batch, by urgency: commit (a pause or "
            "final decode), first_words (nothing committed yet), refresh (tentative text)",
            ["urgency"], buckets=STAGE_BUCKETS, registry=r,
        )
        for label in URGENCIES:  # every class has its series from the start, at zero
            self.asr_queue_wait.labels(label)
        self.asr_batch_size = Histogram(
            "speechpipe_asr_batch_size", "Requests per engine call of the shared ASR worker",
            buckets=BATCH_BUCKETS, registry=r,
        )
        self.asr_batch_seconds = Histogram(
            "speechpipe_asr_batch_seconds", "Wall-clock seconds per engine call",
            buckets=STAGE_BUCKETS, registry=r,
        )
        # a commit that a usual worker took while the lane was busy runs at the partials'
        # priority: on a full machine 2.3x the lane's time (docs/design.md, "The urgent lane")
        self.asr_call_seconds = Histogram(
            "speechpipe_asr_call_seconds",
            "Wall-clock seconds of the engine call that computed an ASR request, by urgency "
            "and by lane: urgent (the lane, at the process's priority) or usual (the workers)",
            ["urgency", "lane"], buckets=STAGE_BUCKETS, registry=r,
        )
        self.asr_dropped = Counter(
            "speechpipe_asr_dropped", "ASR requests dropped before they were computed",
            ["reason"], registry=r,
        )
        self.capacity = Gauge(
            "speechpipe_capacity_sessions", "Sessions admitted at once (admission control)",
            registry=r,
        )
        self.sessions_admitted = Gauge(
            "speechpipe_sessions_admitted", "Sessions holding a capacity slot", registry=r
        )
        self.sessions_queued = Gauge(
            "speechpipe_sessions_queued", "Sessions waiting for a capacity slot", registry=r
        )
        self.admission_wait = Histogram(
            "speechpipe_admission_wait_seconds",
            "Time an admitted session waited in line for a slot (<= 0.01: admitted at once)",
            buckets=WAIT_BUCKETS, registry=r,
        )
        self.sessions_refused = Counter(
            "speechpipe_sessions_refused", "Sessions refused for capacity (close 1013)",
            registry=r,
        )
        self.degrade_level = Gauge(
            "speechpipe_degrade_level", "Degrade ladder level (0 = normal)", registry=r
        )
        self.degrade_max_level = Gauge(
            "speechpipe_degrade_max_level", "The degrade ladder's bottom rung", registry=r
        )
        self.degrade_transitions = Counter(
            "speechpipe_degrade_transitions", "Degrade level changes", registry=r
        )
        self.loop_lag = Histogram(
            "speechpipe_event_loop_lag_seconds", "Lateness of a periodic event-loop timer",
            buckets=LOOP_LAG_BUCKETS, registry=r,
        )

    # -- BatchObserver ---------------------------------------------------------------------
    def batch_done(self, requests: int, waits: list[float], seconds: float,
                   urgencies: Sequence[str] = (), lane: str = "usual") -> None:
        """Record an ASR batch: its size, duration and each request's queue wait and call
        time, labelled with its urgency class (``models.workers.batching.urgency``; ``unknown`` when
        not given) and the lane that ran it (``urgent`` or ``usual``)."""
        self.asr_batch_size.observe(requests)
        self.asr_batch_seconds.observe(seconds)
        labels = [u if u in URGENCIES else "unknown" for u in urgencies]  # a bounded set
        labels += ["unknown"] * (len(waits) - len(labels))
        lane = "urgent" if lane == "urgent" else "usual"
        for wait, label in zip(waits, labels, strict=False):
            self.asr_queue_wait.labels(label).observe(wait)
            self.asr_call_seconds.labels(label, lane).observe(seconds)

    def dropped(self, reason: str) -> None:
        """Count an ASR request dropped for ``reason``."""
        self.asr_dropped.labels(reason).inc()
