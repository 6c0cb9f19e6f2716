"""The TTS engine seam: a test-only engine (``tests/support/scripted_tts.py``), registered
here, heard by a live client, and the phrase cache's namespaces per engine and session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from speechpipe.voices.engines import register_engine, unregister_engine
from tests.support import scripted_tts


@pytest.fixture
def scripted(tmp_path: Path) -> Iterator[Path]:
    register_engine(scripted_tts.ENGINE)  # the one registration
    scripted_tts.write_voice(tmp_path)
    try:
        yield tmp_path
    finally:
        unregister_engine(scripted_tts.ENGINE.name)


async def test_a_live_client_hears_it(scripted: Path, pipeline: Any, stream_ws: Any,
                                      spanish_clip: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real models, a real server and client: a session that asks for the scripted voice
    gets its tone as the translated speech."""
    from speechpipe.server.serve import ServerApp
    from speechpipe.transport.file_replay import read_audio

    monkeypatch.setenv("SPEECHPIPE_HOME", str(scripted.parent / "home"))
    scripted_tts.write_voice(scripted.parent / "home" / "voices")
    path, row = spanish_clip
    audio = read_audio(path)  # 16 kHz mono int16
    app = ServerApp("127.0.0.1", 0, pipeline=pipeline)
    await app.start()
    try:
        await app.load()
        run = await stream_ws(f"ws://127.0.0.1:{app.server.port}/ws", audio[: 16_000 * 6],
                              start={"source_lang": row["lang"], "voice": "scripted-en",
                                     "output_sample_rate": 16_000})
    finally:
        await app.stop(close_pipeline=False)
    assert run.close_code == 1000 and run.audio, run.of("error")
    pcm = np.concatenate([chunk for _, _, chunk in run.audio]).astype(np.float32)
    spectrum = np.abs(np.fft.rfft(pcm))
    peak_hz = np.argmax(spectrum) * 16_000 / len(pcm)
    assert abs(peak_hz - scripted_tts.TONE_HZ) < 5  # the tone, not a Piper voice


async def _replay(pipeline: Any, path: Path, lang: str, namespace: str = "") -> None:
    """One fast-paced session of ``path`` on the scripted voice, to its end."""
    import asyncio

    from speechpipe.stages.request import SessionRequest
    from speechpipe.transport.file_replay import frames_of, stream_audio

    request = SessionRequest(source_lang=lang, voice="scripted-en", pace="fast",
                             priority="replay", phrase_cache=namespace)
    async with pipeline.session(request) as session:
        async def feed() -> None:
            for frame in frames_of(stream_audio(path)):
                await session.push(frame)
            await session.finish()

        async with asyncio.TaskGroup() as group:
            group.create_task(feed())
            async with asyncio.timeout(120):
                async for _ in session.events():
                    pass


def _scripted_spoken(scripted: Path, pipeline: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the scripted voice was asked to speak (its voice installed in a test home)."""
    from speechpipe.stages.request import SessionRequest

    monkeypatch.setenv("SPEECHPIPE_HOME", str(scripted.parent / "home"))
    scripted_tts.write_voice(scripted.parent / "home" / "voices")
    voice = pipeline.resolve(SessionRequest(target_lang="en", voice="scripted-en")).voice
    return pipeline.tts_worker(voice).synthesizer.spoken


async def test_phrase_cache_namespaces(scripted: Path, pipeline: Any, spanish_clip: Any,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process callers: sessions reuse synthesized phrases within one
    ``SessionRequest.phrase_cache`` namespace only (the scripted engine counts what it is asked
    to speak). Fast pace: the same text each run."""
    spoken = _scripted_spoken(scripted, pipeline, monkeypatch)
    path, row = spanish_clip
    await _replay(pipeline, path, row["lang"], "ns-a")
    first = len(spoken)
    assert first > 0
    await _replay(pipeline, path, row["lang"], "ns-a")
    assert len(spoken) == first  # every phrase came from the namespace's cache
    await _replay(pipeline, path, row["lang"], "ns-b")
    assert len(spoken) > first  # another namespace: synthesized again


async def test_the_server_option_gives_each_session_its_own_phrase_cache(
    scripted: Path, pipeline: Any, spanish_clip: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sessions as the server makes them (no namespace of their own: the start message has
    none): by default two sessions on a voice share its phrase cache, the second synthesizing
    nothing; with ``pipeline.phrase_cache_per_session`` (the bench servers) each synthesizes
    every phrase itself."""
    import dataclasses

    spoken = _scripted_spoken(scripted, pipeline, monkeypatch)
    path, row = spanish_clip
    await _replay(pipeline, path, row["lang"])  # fills the shared cache (if not full yet)
    shared = len(spoken)
    await _replay(pipeline, path, row["lang"])
    assert len(spoken) == shared  # the default: all served from the shared cache

    monkeypatch.setattr(pipeline, "options", dataclasses.replace(
        pipeline.options, phrase_cache_per_session=True))
    await _replay(pipeline, path, row["lang"])
    own = len(spoken) - shared
    assert own > 0  # the shared cache had them all: this session did not use it
    await _replay(pipeline, path, row["lang"])
    assert len(spoken) - shared == 2 * own  # nor the session before it
