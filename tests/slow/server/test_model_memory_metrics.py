"""The ASR model's memory on ``/metrics`` (``speechpipe.server.model_metrics``): the shared
model by its size, the restricted decoders' own bytes and count, read from the real engine
after restricted decodes in two languages, on the live server."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from speechpipe.stages.model_api import DecodeTask, WhisperRequest
from tests.helpers import http_request, load_16k, raw_http

live = pytest.mark.asyncio(loop_scope="session")


def _value(body: str, name: str, labels: str = "") -> float:
    match = re.search(rf"^{re.escape(name + labels)} (\S+)$", body, re.M)
    assert match, f"{name}{labels} not on /metrics"
    return float(match.group(1))


@live
async def test_metrics_show_the_shared_model_and_the_restricted_decoders(
        live_server: Any, pipeline: Any) -> None:
    engine = pipeline.engine
    if engine.prefill() is None:
        pytest.skip("the native decoder is not built here")
    audio = load_16k("es_enh_11375_cv")[: 16000 * 2]
    for language in ("es", "de"):
        await asyncio.to_thread(engine.run, WhisperRequest(
            audio=audio, language=language, tasks=(DecodeTask("transcribe"),),
            vocabulary_words=30000))
    port = live_server.server.port
    status, raw = await asyncio.to_thread(
        raw_http, port, http_request("/metrics", [("Host", f"127.0.0.1:{port}")]))
    assert status == 200
    body = raw.partition(b"\r\n\r\n")[2].decode()
    memory = engine.restricted_memory()
    assert memory["decoders"] >= 2 and memory["languages"] >= 2
    shared = (engine.model_dir / "model.bin").stat().st_size
    assert _value(body, "speechpipe_asr_model_bytes", '{kind="shared"}') == shared
    restricted = _value(body, "speechpipe_asr_model_bytes", '{kind="restricted"}')
    assert 0 < restricted <= max(memory["budget_bytes"], memory["bytes"])
    # rows, not models: each decoder holds gathered output rows, far less than the model;
    # the total may pass the model's size when the suite's earlier tests left decoders on
    # several worker threads (each thread evicts only its own: models.whisper.prefill)
    held = _value(body, "speechpipe_asr_restricted_decoders")
    assert held >= 2
    assert restricted / held < shared / 2
    assert _value(body, "speechpipe_asr_restricted_budget_bytes") == 128 << 20
    assert _value(body, "speechpipe_asr_restricted_built_total") >= 2
