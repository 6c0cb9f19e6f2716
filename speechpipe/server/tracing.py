"""OpenTelemetry traces of live sessions: one trace per session, built at the app layer.

Optional (``pip install 'speechpipe[otel]'``: ``opentelemetry-sdk`` and the OTLP/HTTP
exporter), imported only when tracing is on: ``speechpipe serve --otlp-endpoint URL``.

Stages report their timings as data (``StageTiming`` on hypotheses and speech chunks); this
module turns a session's output events into spans, so nothing below the app layer imports
OpenTelemetry. The tree of one session::

    speechpipe.session            the session (start .. end); a new trace
    └── speechpipe.utterance      VAD speech start .. the utterance's end event
        ├── vad.segment           VAD speech start .. VAD end
        ├── asr.step              one ASR decode (partial, pause or final)
        │   ├── queue.asr         audio waiting for the ASR stage
        │   ├── asr.wait          the request waiting in the shared worker's line
        │   └── asr.encode, asr.langid, asr.decode, asr.align (word times), asr.recover
        ├── mt.step               one text-MT call (CTranslate2 backend; Whisper's own
        │   └── mt.translate      translation runs inside asr.decode)
        └── tts.phrase            one synthesized phrase
            ├── queue.tts         committed text waiting for the synthesizer
            └── tts.synthesize

A step's child spans are laid back to back from the durations the stage reported, ending when
the step's output reached the app layer. Attributes hold sizes, durations, counts, codes and
the degrade level: never audio, text or tokens.

Exports go through a ``BatchSpanProcessor`` (its own thread, a bounded queue): an unreachable
collector never slows or breaks a session. Failed exports are counted (``on_failure``) and
logged once. At shutdown the last spans are flushed for at most what is left of the server's
shutdown grace (``SessionTracing.shutdown(timeout_s)``): a collector that accepts the
connection and never answers cannot hold the process past it (what it did not take is
dropped, with one warning).
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from speechpipe.errors import InputError
from speechpipe.stages.frames import (
    STREAM_RATE,
    ErrorEvent,
    OutputEvent,
    SpeechChunk,
    StageTiming,
    StatusEvent,
    TextHypothesis,
    UtteranceEnd,
    VadEvent,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span

    from speechpipe.transport.session_api import SessionRequest

__all__ = ["SessionTracing", "SessionTrace", "check_otlp_endpoint", "require_otel", "OTEL_MISSING"]

log = logging.getLogger("speechpipe.tracing")

OTEL_MISSING = (
    "tracing needs OpenTelemetry: pip install 'speechpipe[otel]' "
    "(opentelemetry-sdk, opentelemetry-exporter-otlp-proto-http)"
)
CHILD_NAMES = {"tts": "tts.synthesize", "mt": "mt.translate"}
NS = 1_000_000_000


def check_otlp_endpoint(endpoint: str) -> str:
    """The endpoint if it is an http(s) URL with a host; raises ``InputError`` otherwise."""
    parsed = urllib.parse.urlsplit(endpoint)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise InputError(
            f"--otlp-endpoint must be an http(s) URL such as "
            f"http://127.0.0.1:4318/v1/traces, not {endpoint!r}"
        )
    return endpoint


def _where(endpoint: str) -> str:
    """scheme://host:port of an endpoint (no credentials, path or query in logs)."""
    parsed = urllib.parse.urlsplit(endpoint)
    port = f":{parsed.port}" if parsed.port else ""
    return f"{parsed.scheme}://{parsed.hostname}{port}"


def require_otel() -> None:
    """Raise ``InputError`` saying what to install when the ``otel`` extra is missing."""
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        raise InputError(OTEL_MISSING) from exc


class _CountingExporter:
    """Wraps the OTLP exporter: failures call ``on_failure`` and are logged once."""

    def __init__(self, inner: SpanExporter, where: str,
                 on_failure: Callable[[], None] | None) -> None:
        self.inner = inner
        self.where = where
        self.on_failure = on_failure
        self.failures = 0
        self.deadline = 0.0  # monotonic: after it (set at shutdown), batches are dropped
        self._lock = threading.Lock()

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        if self.deadline and time.monotonic() > self.deadline:
            return SpanExportResult.FAILURE  # shutting down and out of time: dropped
        try:
            result = self.inner.export(spans)
        except Exception as exc:  # the exporter's thread must go on whatever happens
            result, why = SpanExportResult.FAILURE, type(exc).__name__
        else:
            why = "rejected or unreachable"
        if result is not SpanExportResult.SUCCESS:
            self._failed(why, len(spans))
        return result

    def _failed(self, why: str, spans: int) -> None:
        with self._lock:
            self.failures += 1
            first = self.failures == 1
        if self.on_failure is not None:
            self.on_failure()
        if first:
            log.warning("trace export to %s failed (%s; %d spans dropped); later failures "
                        "are only counted (speechpipe_trace_export_failures_total)",
                        self.where, why, spans)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))


class SessionTracing:
    """Sessions' traces on one ``TracerProvider``; ``begin`` starts a session's trace."""

    def __init__(self, provider: TracerProvider, exporter: _CountingExporter | None = None):
        self.provider = provider
        self.exporter = exporter
        self.tracer = provider.get_tracer("speechpipe")

    @classmethod
    def otlp(
        cls,
        endpoint: str,
        *,
        on_failure: Callable[[], None] | None = None,
        timeout_s: float = 5.0,
        schedule_delay_s: float = 2.0,
    ) -> SessionTracing:
        """Batched OTLP/HTTP export to ``endpoint`` (e.g. ``http://127.0.0.1:4318/v1/traces``)."""
        check_otlp_endpoint(endpoint)
        require_otel()
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        # The exporter logs every failed batch (with retries) at WARNING/ERROR; we log the
        # first failure ourselves and count the rest.
        logging.getLogger("opentelemetry.exporter.otlp").setLevel(logging.CRITICAL)
        exporter = _CountingExporter(
            OTLPSpanExporter(endpoint=endpoint, timeout=timeout_s), _where(endpoint), on_failure
        )
        provider = TracerProvider(  # no atexit flush: ``shutdown`` bounds it instead
            resource=Resource.create({"service.name": "speechpipe"}), shutdown_on_exit=False,
        )
        provider.add_span_processor(BatchSpanProcessor(
            exporter,  # type: ignore[arg-type]
            schedule_delay_millis=schedule_delay_s * 1000,
            export_timeout_millis=timeout_s * 1000,
        ))
        log.info("tracing sessions to %s", _where(endpoint))
        return cls(provider, exporter)

    def begin(self, request: SessionRequest, degrade_level: Callable[[], int]) -> SessionTrace:
        """Start tracing a session."""
        return SessionTrace(self.tracer, request, degrade_level)

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Flush what is queued and stop, waiting at most ``timeout_s``; blocking. False (with a
        warning) when the collector did not take it in time: the rest is dropped, and the
        flush goes on in a daemon thread that does not hold the process's exit."""
        if self.exporter is not None:
            self.exporter.deadline = time.monotonic() + max(0.0, timeout_s)
        done = threading.Event()

        def flush() -> None:
            try:
                self.provider.shutdown()
            except Exception as exc:  # a broken exporter must not break the server's exit
                log.debug("trace shutdown failed: %s", type(exc).__name__)
            finally:
                done.set()

        threading.Thread(target=flush, name="trace-shutdown", daemon=True).start()
        if done.wait(max(0.0, timeout_s)):
            return True
        log.warning("trace export did not finish within %.1f s of shutdown (the collector does "
                    "not answer): the spans still queued are dropped", timeout_s)
        return False


@dataclass
class _Utterance:
    span: Span
    context: Any
    started_ns: int
    speech_start: int = 0  # stream pts
    vad: Span | None = None
    steps: int = 0
    phrases: int = 0
    speech_s: float = 0.0
    attributes: dict[str, Any] = field(default_factory=dict)


class SessionTrace:
    """One session's spans, built from its output events in order (see the module docs).

    Call ``event`` for every output event as it reaches the app layer, ``observe`` for the
    listener latency of an utterance before its ``UtteranceEnd`` event, then ``end``."""

    def __init__(self, tracer: Any, request: SessionRequest,
                 degrade_level: Callable[[], int]) -> None:
        from opentelemetry import context as otel_context
        from opentelemetry import trace

        self._trace = trace
        self._tracer = tracer
        self._level = degrade_level
        self.root = tracer.start_span(
            "speechpipe.session",
            context=otel_context.Context(),  # no parent: a new trace per session
            kind=trace.SpanKind.SERVER,
            attributes={
                "speechpipe.mode": request.mode,
                "speechpipe.pace": request.pace,
                "speechpipe.mt_backend": "ct2" if request.mt.startswith("ct2:") else "whisper",
                "speechpipe.output_sample_rate": request.output_sample_rate,
                "speechpipe.source_lang_auto": request.source_lang == "auto",
            },
        )
        self._root_context = trace.set_span_in_context(self.root)
        self._utterances: dict[int, _Utterance] = {}
        self.utterances = 0
        self.speech_s = 0.0
        self._ended = False

    # -- events ------------------------------------------------------------------------------
    def event(self, event: OutputEvent, now_ns: int | None = None) -> None:
        """Record an output event in the session's trace."""
        now = time.time_ns() if now_ns is None else now_ns
        if isinstance(event, VadEvent):
            self._vad(event, now)
        elif isinstance(event, TextHypothesis):
            if event.timings:
                self._hypothesis(event, now)
        elif isinstance(event, SpeechChunk):
            self._phrase(event, now)
        elif isinstance(event, UtteranceEnd):
            utterance = self._utterances.pop(event.utterance, None)
            if utterance is not None:
                self._end_utterance(utterance, now, unfinished=False)
        elif isinstance(event, ErrorEvent):
            target = self._utterances.get(event.utterance) if event.utterance is not None else None
            span = target.span if target is not None else self.root
            span.add_event("error", {"speechpipe.code": event.code})
        elif isinstance(event, StatusEvent):
            self.root.add_event("status", {"speechpipe.status": event.status,
                                           "speechpipe.degrade_level": self._safe_level()})

    def observe(self, utterance: int, name: str, seconds: float) -> None:
        """Attach a listener-latency figure (``start_offset_s`` ...) to an utterance span."""
        current = self._utterances.get(utterance)
        if current is not None:
            current.attributes[f"speechpipe.{name}"] = round(seconds, 4)

    def end(self, error_code: str | None = None) -> None:
        """End the trace, closing unfinished utterances; idempotent."""
        if self._ended:
            return
        self._ended = True
        now = time.time_ns()
        for utterance in list(self._utterances.values()):
            self._end_utterance(utterance, now, unfinished=True)
        self._utterances.clear()
        self.root.set_attributes({
            "speechpipe.utterances": self.utterances,
            "speechpipe.speech_output_s": round(self.speech_s, 3),
            "speechpipe.degrade_level": self._safe_level(),
        })
        if error_code is not None:
            self.root.set_attribute("speechpipe.error_code", error_code)
            self.root.set_status(self._trace.Status(self._trace.StatusCode.ERROR))
        self.root.end(end_time=now)

    # -- builders ----------------------------------------------------------------------------
    def _safe_level(self) -> int:
        try:
            return int(self._level())
        except Exception:  # a level we cannot read is no reason to lose the span
            return -1

    def _utterance(self, index: int, start_ns: int) -> _Utterance:
        current = self._utterances.get(index)
        if current is None:
            span = self._tracer.start_span(
                "speechpipe.utterance", context=self._root_context, start_time=start_ns,
                attributes={"speechpipe.utterance": index},
            )
            current = _Utterance(span, self._trace.set_span_in_context(span), start_ns)
            self._utterances[index] = current
            self.utterances += 1
        return current

    def _vad(self, event: VadEvent, now: int) -> None:
        if event.kind == "start":
            delay_s = max(0, event.detected_at - event.pts) / STREAM_RATE
            start = now - int(delay_s * NS)
            utterance = self._utterance(event.utterance, start)
            utterance.speech_start = event.pts
            utterance.vad = self._tracer.start_span(
                "vad.segment", context=utterance.context, start_time=start,
                attributes={"speechpipe.vad.decision_delay_s": round(delay_s, 4)},
            )
            return
        current = self._utterances.get(event.utterance)
        if current is None or current.vad is None:
            return
        if event.kind == "pause":
            current.vad.add_event("pause", timestamp=now)
            return
        speech_s = max(0, event.pts - current.speech_start) / STREAM_RATE
        current.vad.set_attributes({"speechpipe.speech_s": round(speech_s, 3),
                                    "speechpipe.vad.forced": event.forced})
        current.vad.end(end_time=now)
        current.vad = None

    def _hypothesis(self, hyp: TextHypothesis, now: int) -> None:
        utterance = self._utterance(hyp.utterance, now)
        utterance.steps += 1
        self._step(
            "asr.step" if hyp.side == "source" else "mt.step", utterance.context, now,
            hyp.timings,
            {
                "speechpipe.utterance": hyp.utterance,
                "speechpipe.revision": hyp.revision,
                "speechpipe.final": hyp.final,
                "speechpipe.audio_s": round((hyp.audio_end - hyp.audio_start) / STREAM_RATE, 3),
                "speechpipe.lag_s": round((hyp.stream_pts - hyp.audio_end) / STREAM_RATE, 3),
                "speechpipe.committed_words": len(hyp.committed.split()),
                "speechpipe.tentative_words": len(hyp.tentative.split()),
                "speechpipe.degrade_level": self._safe_level(),
            },
        )

    def _phrase(self, chunk: SpeechChunk, now: int) -> None:
        utterance = self._utterance(chunk.utterance, now)
        utterance.phrases += 1
        utterance.speech_s += chunk.duration
        self.speech_s += chunk.duration
        self._step(
            "tts.phrase", utterance.context, now, chunk.timings,
            {
                "speechpipe.utterance": chunk.utterance,
                "speechpipe.words": len(chunk.text.split()),
                "speechpipe.samples": len(chunk.samples),
                "speechpipe.sample_rate": chunk.sample_rate,
                "speechpipe.audio_s": round(chunk.duration, 3),
                "speechpipe.degrade_level": self._safe_level(),
            },
        )

    def _step(self, name: str, parent: Any, end_ns: int, timings: Sequence[StageTiming],
              attributes: dict[str, Any]) -> None:
        durations = [max(0, int(t.seconds * NS)) for t in timings]
        start = end_ns - sum(durations)
        span = self._tracer.start_span(name, context=parent, start_time=start,
                                       attributes=attributes)
        context = self._trace.set_span_in_context(span)
        t = start
        for timing, duration in zip(timings, durations, strict=True):
            child = self._tracer.start_span(
                CHILD_NAMES.get(timing.stage, timing.stage), context=context, start_time=t,
                attributes={"speechpipe.seconds": round(max(0.0, timing.seconds), 6)},
            )
            t += duration
            child.end(end_time=t)
        span.end(end_time=end_ns)

    def _end_utterance(self, utterance: _Utterance, now: int, *, unfinished: bool) -> None:
        if utterance.vad is not None:
            utterance.vad.end(end_time=now)
            utterance.vad = None
        utterance.span.set_attributes({
            **utterance.attributes,
            "speechpipe.steps": utterance.steps,
            "speechpipe.phrases": utterance.phrases,
            "speechpipe.speech_output_s": round(utterance.speech_s, 3),
            "speechpipe.degrade_level": self._safe_level(),
            "speechpipe.unfinished": unfinished,
        })
        utterance.span.end(end_time=max(now, utterance.started_ns))
