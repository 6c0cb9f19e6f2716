"""OpenTelemetry session traces: the span tree of scripted events, and the OTLP endpoint's
checks (a real session: the slow tier; the lazy import: the cli tier).

Spans are collected with the SDK's ``InMemorySpanExporter``; nothing leaves the machine."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

pytest.importorskip("opentelemetry.sdk.trace", reason="needs the otel extra (speechpipe[otel])")

from opentelemetry.sdk.trace import ReadableSpan  # noqa: E402

from speechpipe.server.tracing import check_otlp_endpoint  # noqa: E402
from speechpipe.stages.frames import (  # noqa: E402
    SpeechChunk,
    StageTiming,
    TextHypothesis,
    UtteranceEnd,
    VadEvent,
)
from speechpipe.transport.session_api import SessionRequest  # noqa: E402
from tests.support.tracing import memory_tracing, tree, words_in_attributes  # noqa: E402

RATE = 16_000


def children(spans: tuple[ReadableSpan, ...], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None
            and s.parent.span_id == parent.context.span_id]


def hyp(side: str, committed: str, tentative: str, end_s: float, timings: tuple = ()) -> Any:
    return TextHypothesis(side, 0, 1, committed, tentative, "es",  # type: ignore[arg-type]
                          int(0.5 * RATE), int(end_s * RATE), int((end_s + 0.3) * RATE),
                          timings=timings)


def test_span_tree_from_scripted_events() -> None:
    tracing, memory = memory_tracing()
    trace = tracing.begin(SessionRequest(source_lang="es"), degrade_level=lambda: 2)
    asr = (StageTiming("queue.asr", 0.01), StageTiming("asr.wait", 0.02),
           StageTiming("asr.encode", 0.05), StageTiming("asr.decode", 0.2))
    events = [
        VadEvent("start", 0, int(0.5 * RATE), int(0.8 * RATE)),
        hyp("source", "hola", "mundo", 1.5, asr),
        hyp("target", "hello", "world", 1.5),  # Whisper's translation: no step of its own
        hyp("target", "hello", "world", 1.5, (StageTiming("mt", 0.04),)),
        VadEvent("pause", 0, int(1.6 * RATE), int(1.9 * RATE)),
        SpeechChunk(np.zeros(2205, np.int16), 22050, 0, "hello",
                    int(2.0 * RATE),
                    timings=(StageTiming("queue.tts", 0.01), StageTiming("tts", 0.08))),
        VadEvent("end", 0, int(2.5 * RATE), int(2.9 * RATE)),
        UtteranceEnd(0, int(3.0 * RATE), "hola mundo", "hello world"),
        VadEvent("start", 1, int(4.0 * RATE), int(4.3 * RATE)),  # never finished
    ]
    now = 1_000_000_000_000
    for i, event in enumerate(events):
        if isinstance(event, UtteranceEnd):
            trace.observe(0, "end_offset_s", 1.25)
        trace.event(event, now_ns=now + i * 100_000_000)
    trace.end()
    spans = memory.get_finished_spans()
    shape = tree(spans)
    names = Counter(s.name for s in spans)
    assert names == Counter({"speechpipe.session": 1, "speechpipe.utterance": 2,
                             "vad.segment": 2, "asr.step": 1, "queue.asr": 1, "asr.wait": 1,
                             "asr.encode": 1, "asr.decode": 1, "mt.step": 1,
                             "mt.translate": 1, "tts.phrase": 1, "queue.tts": 1,
                             "tts.synthesize": 1})
    step = next(s for s in spans if s.name == "asr.step")
    assert [c.name for c in sorted(children(spans, step), key=lambda c: c.start_time)] == [
        "queue.asr", "asr.wait", "asr.encode", "asr.decode"]
    assert step.end_time - step.start_time == pytest.approx(0.28e9, abs=10)
    assert step.attributes["speechpipe.degrade_level"] == 2
    assert step.attributes["speechpipe.committed_words"] == 1
    utterances = sorted((s for s in spans if s.name == "speechpipe.utterance"),
                        key=lambda s: s.start_time)
    assert utterances[0].attributes["speechpipe.end_offset_s"] == 1.25
    assert utterances[0].attributes["speechpipe.unfinished"] is False
    assert utterances[1].attributes["speechpipe.unfinished"] is True
    assert shape["root"].attributes["speechpipe.utterances"] == 2
    assert not words_in_attributes(spans) & {"hola", "mundo", "hello", "world"}


def test_otlp_endpoint_must_be_an_http_url() -> None:
    from speechpipe.errors import InputError

    assert check_otlp_endpoint("http://127.0.0.1:4318/v1/traces")
    for bad in ("127.0.0.1:4318", "ftp://host/x", "http://", "grpc://collector:4317"):
        with pytest.raises(InputError, match="--otlp-endpoint"):
            check_otlp_endpoint(bad)


def test_serve_with_a_bad_otlp_endpoint_is_one_line(capsys: pytest.CaptureFixture) -> None:
    from speechpipe.cli import main

    assert main(["serve", "--otlp-endpoint", "collector:4318", "--capacity", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--otlp-endpoint must be an http(s) URL" in err[0]
