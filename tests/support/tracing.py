"""OpenTelemetry session traces as the tests read them: an in-memory exporter, and the shape
every session trace has (one root, its utterances, their steps and the steps' children). Needs
the otel extra: the tests that import it skip without it first."""

from __future__ import annotations

import re
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from speechpipe.server.tracing import SessionTracing

STEP_CHILDREN = {
    # asr.align: the word times of a partial that may commit (stages.commit, settling);
    # asr.recover: the translation of audio a final left out
    "asr.step": {"queue.asr", "asr.wait", "asr.encode", "asr.langid", "asr.decode",
                 "asr.align", "asr.recover"},
    "mt.step": {"mt.translate"},
    "tts.phrase": {"queue.tts", "tts.synthesize"},
}


def memory_tracing() -> tuple[SessionTracing, InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return SessionTracing(provider), memory


def tree(spans: tuple[ReadableSpan, ...]) -> dict[str, Any]:
    """Check one trace's shape; return its spans by id and the root."""
    by_id = {s.context.span_id: s for s in spans}
    roots = [s for s in spans if s.parent is None]
    assert len(roots) == 1, [s.name for s in roots]
    root = roots[0]
    assert root.name == "speechpipe.session"
    assert {s.context.trace_id for s in spans} == {root.context.trace_id}, "one trace"
    for span in spans:
        if span is root:
            continue
        parent = by_id[span.parent.span_id]  # every parent is in this trace
        if span.name == "speechpipe.utterance":
            assert parent is root
        elif span.name in ("vad.segment", *STEP_CHILDREN):
            assert parent.name == "speechpipe.utterance", span.name
        else:
            assert parent.name in STEP_CHILDREN, (span.name, parent.name)
            assert span.name in STEP_CHILDREN[parent.name], (span.name, parent.name)
            assert parent.start_time <= span.start_time <= span.end_time <= parent.end_time
    return {"root": root, "by_id": by_id}


def words_in_attributes(spans: tuple[ReadableSpan, ...]) -> set[str]:
    found: set[str] = set()
    for span in spans:
        values = list((span.attributes or {}).values())
        for event in span.events:
            values += list((event.attributes or {}).values())
        for value in values:
            if isinstance(value, str):
                found |= set(re.findall(r"\w+", value.lower()))
    return found
