"""OpenTelemetry session traces of a real session over a real WebSocket (real models, a real
recording), of a text-MT session, and an unreachable OTLP collector (a closed loopback port)
that must not disturb a session.

Spans are collected with the SDK's ``InMemorySpanExporter``; nothing leaves the machine."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk.trace", reason="needs the otel extra (speechpipe[otel])")

from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from speechpipe.server.tracing import SessionTracing  # noqa: E402
from speechpipe.stages.frames import TextHypothesis  # noqa: E402
from speechpipe.transport.session_api import SessionRequest  # noqa: E402
from tests.support.tracing import memory_tracing, tree, words_in_attributes  # noqa: E402


def closed_port() -> int:
    """A loopback port with nothing listening (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.asyncio(loop_scope="session")
async def test_real_session_trace_and_an_unreachable_collector(
    pipeline: Any, spanish_clip: tuple[Any, dict[str, Any]], stream_ws: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from speechpipe.server.serve import ServerApp
    from speechpipe.transport.codes import CloseCode
    from speechpipe.transport.file_replay import read_audio

    app = ServerApp("127.0.0.1", 0, pipeline=pipeline)
    # the CLI's path (--otlp-endpoint) to a port where nothing listens, plus an in-memory copy
    app.tracing = SessionTracing.otlp(
        f"http://127.0.0.1:{closed_port()}/v1/traces",
        on_failure=app.metrics.trace_export_failures.inc, timeout_s=1.0, schedule_delay_s=0.5,
    )
    memory = InMemorySpanExporter()
    app.tracing.provider.add_span_processor(SimpleSpanProcessor(memory))
    path, _ = spanish_clip
    caplog.set_level(logging.WARNING, logger="speechpipe.tracing")
    await app.start()
    try:
        await app.load()
        run = await asyncio.wait_for(stream_ws(
            f"ws://127.0.0.1:{app.server.port}/ws", read_audio(path),
            start={"source_lang": "es"}), 120)
    finally:
        await app.stop(close_pipeline=False)  # shuts tracing down: the last export fails too

    assert run.close_code == CloseCode.NORMAL and run.audio, "the session was unaffected"
    failures = app.metrics.registry.get_sample_value("speechpipe_trace_export_failures_total")
    assert failures and failures >= 1
    warnings = [r for r in caplog.records if r.name == "speechpipe.tracing"]
    assert len(warnings) == 1 and "trace export to http://127.0.0.1:" in warnings[0].message

    spans = memory.get_finished_spans()
    tree(spans)
    names = Counter(s.name for s in spans)
    for name in ("speechpipe.utterance", "vad.segment", "asr.step", "queue.asr", "asr.wait",
                 "asr.encode", "asr.decode", "tts.phrase", "queue.tts", "tts.synthesize"):
        assert names[name] >= 1, (name, names)
    assert names["tts.phrase"] == len(run.audio)
    utterance = next(s for s in spans if s.name == "speechpipe.utterance"
                     and "speechpipe.start_offset_s" in s.attributes)
    assert utterance.attributes["speechpipe.start_offset_s"] > 0
    assert utterance.attributes["speechpipe.phrases"] >= 1
    caption_words: set[str] = set()
    for side in ("source", "target"):
        for event in run.of(side):
            caption_words |= set(re.findall(r"\w+", f"{event['committed']} "
                                                    f"{event['tentative']}".lower()))
    assert len(caption_words) >= 5
    leaked = words_in_attributes(spans) & caption_words
    assert not leaked, f"caption words in span attributes: {leaked}"


@pytest.mark.asyncio(loop_scope="session")
async def test_text_mt_session_has_mt_steps(pipeline: Any, tmp_path: Any) -> None:
    from speechpipe.bench.tiny_mt import build_tiny_mt
    from speechpipe.server.serve import ServerApp
    from speechpipe.stages.frames import AudioFrame
    from speechpipe.transport.file_replay import read_audio
    from tests.helpers import OWN_SAMPLES

    model = build_tiny_mt(tmp_path / "tiny-nllb", "nllb")
    tracing, memory = memory_tracing()
    app = ServerApp("127.0.0.1", 0, pipeline=pipeline, tracing=tracing)
    app._ready = True  # the factory alone: no port, nothing to warm
    audio = read_audio(OWN_SAMPLES / "wav" / "es_gato.wav")
    request = SessionRequest(source_lang="es", mt=f"ct2:{model}", pace="fast",
                             priority="replay")
    async with app.session(request) as session:
        async def feed() -> None:
            for pts in range(0, len(audio) - 320, 320):
                await session.push(AudioFrame(audio[pts : pts + 320], pts))
            await session.finish()

        feeder = asyncio.create_task(feed())
        events = [event async for event in session.events()]
        await feeder
    spans = memory.get_finished_spans()
    tree(spans)
    names = Counter(s.name for s in spans)
    assert names["mt.step"] >= 1 and names["mt.translate"] == names["mt.step"], names
    assert names["speechpipe.utterance"] >= 1
    assert any(isinstance(e, TextHypothesis) and e.side == "target" for e in events)
