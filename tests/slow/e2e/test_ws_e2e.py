"""End to end over a real WebSocket: a real Spanish recording streamed at real-time pace
through the real models comes back as English captions and English speech."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import pytest

from speechpipe.transport.codes import CloseCode
from speechpipe.transport.file_replay import read_audio

pytestmark = pytest.mark.asyncio(loop_scope="session")


def ws_url(app: Any) -> str:
    return f"ws://127.0.0.1:{app.server.port}/ws"


def words(text: str) -> set[str]:
    return {w.strip(".,;:!?¿¡\"'").lower() for w in text.split()}


async def test_spanish_clip_streams_to_english_captions_and_speech(
    live_server: Any, spanish_clip: tuple[Any, dict[str, Any]], stream_ws: Any
) -> None:
    path, entry = spanish_clip
    audio = read_audio(path)
    # 48 kHz like a browser: exercises the server's streaming resampler too
    import soxr

    audio48 = np.asarray(soxr.resample(audio, 16000, 48000), dtype=np.int16)
    run = await stream_ws(
        ws_url(live_server), audio48, rate=48000,
        start={"source_lang": "es", "target_lang": "en", "output_sample_rate": 24000},
    )
    assert run.close_code == CloseCode.NORMAL
    assert run.events[-1][1]["type"] == "end"

    source, target = run.text("source"), run.text("target")
    expected_src = words(entry["transcript"])
    expected_en = words(entry["translation_en"])
    assert len(words(source) & expected_src) >= 3, "source captions should be the Spanish"
    assert len(words(target) & expected_en - {"the", "and", "of", "to"}) >= 2, (
        "target captions should be English"
    )
    assert any(e["committed"] for e in run.of("target")), "some target text was committed"
    assert any(not e["final"] and e["tentative"] for e in run.of("source")) or len(
        run.of("source")
    ) > 1, "captions should arrive incrementally"

    assert run.audio, "translated speech arrived"
    pcm = np.concatenate([chunk for _, _, chunk in run.audio]).astype(np.float64)
    assert all(h["sample_rate"] == 24000 for _, h, _ in run.audio)
    assert len(pcm) / 24000 > 1.0, "at least a second of speech"
    assert np.sqrt(np.mean(pcm**2)) > 300, "speech, not silence"
    start_offset, end_offset = run.offsets()
    print(f"\nws e2e: StartOffset {start_offset:.2f} s, EndOffset {end_offset:.2f} s, "
          f"{len(run.audio)} chunks, {len(pcm) / 24000:.1f} s of speech")
    assert live_server.metrics.sessions_active._value.get() == 0
    metrics = live_server.metrics.text().decode()
    assert 'speechpipe_events_total{type="audio"}' in metrics
    assert "speechpipe_stage_seconds_bucket" in metrics


async def test_disconnect_mid_utterance_cancels_the_real_session(
    live_server: Any, spanish_clip: tuple[Any, dict[str, Any]], stream_ws: Any
) -> None:
    path, _ = spanish_clip
    audio = read_audio(path)
    before = set(asyncio.all_tasks())
    run = await stream_ws(
        ws_url(live_server), audio, start={"source_lang": "es"}, abort_after_s=3.0
    )
    assert run.of("vad"), "the speaker was mid-utterance when the client vanished"
    deadline = time.monotonic() + 10
    while live_server.server.connections or (set(asyncio.all_tasks()) - before) - {
        asyncio.current_task()
    }:
        assert time.monotonic() < deadline, [
            t.get_name() for t in set(asyncio.all_tasks()) - before
        ]
        await asyncio.sleep(0.05)
    assert live_server.server.active_sessions == 0
    # the server still serves: a new session starts right away
    again = await stream_ws(ws_url(live_server), audio[:16000], tail_s=0.5)
    assert again.close_code == CloseCode.NORMAL
