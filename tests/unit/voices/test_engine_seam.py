"""The TTS engine seam: a test-only engine (``tests/support/scripted_tts.py``), registered
here, is found, loaded, spoken through the shared worker and guarded by the privacy rule, with
no other change to the code (a live client hearing it: the slow tier)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from speechpipe.voices.engines import ENGINES, load_synthesizer, register_engine, unregister_engine
from speechpipe.voices.registry import list_voices, resolve_voice
from speechpipe.voices.tts_worker import TtsWorker
from tests.support import scripted_tts


@pytest.fixture
def scripted(tmp_path: Path) -> Iterator[Path]:
    register_engine(scripted_tts.ENGINE)  # the one registration
    scripted_tts.write_voice(tmp_path)
    try:
        yield tmp_path
    finally:
        unregister_engine(scripted_tts.ENGINE.name)


def test_its_voices_are_found_and_name_their_engine(scripted: Path) -> None:
    voice = resolve_voice("scripted-en", "en", [scripted])
    assert voice.engine == "scripted" and voice.sample_rate == 16_000 and voice.lang == "en"
    assert "scripted-en" in {v.name for v in list_voices([scripted])}
    piper = resolve_voice(None, "en", [scripted])  # the built-in voice still wins by default
    assert piper.engine == "piper"


def test_without_the_registration_its_voices_are_not_voices(tmp_path: Path) -> None:
    scripted_tts.write_voice(tmp_path)
    assert "scripted" not in ENGINES
    assert "scripted-en" not in {v.name for v in list_voices([tmp_path])}


async def test_the_shared_worker_speaks_it(scripted: Path) -> None:
    voice = resolve_voice("scripted-en", "en", [scripted])
    synthesizer = load_synthesizer(voice)
    assert isinstance(synthesizer, scripted_tts.ToneSynthesizer)
    async with TtsWorker(synthesizer, voice.name) as worker:
        speech = await worker.synthesize("hello there", 22_050)
    assert synthesizer.spoken == ["hello there"]
    expected = len("hello there") * scripted_tts.SECONDS_PER_CHAR * 22_050
    assert abs(len(speech) - expected) < 0.1 * expected  # resampled to the asked rate


def test_its_text_logger_is_guarded(scripted: Path) -> None:
    from speechpipe.transport.privacy import content_loggers, guard_library_logs

    logger = logging.getLogger(scripted_tts.LOGGER)
    logger.setLevel(logging.DEBUG)
    try:
        assert scripted_tts.LOGGER in content_loggers() and "piper" in content_loggers()
        guard_library_logs()
        assert logger.level == logging.INFO
    finally:
        logger.setLevel(logging.NOTSET)


async def test_aclose_never_blocks_the_event_loop() -> None:
    """Closing the worker while a synthesis runs: the loop keeps running until it ends."""
    import asyncio
    import threading

    started, release = threading.Event(), threading.Event()

    class Blocking:
        sample_rate = 16_000

        def synthesize(self, text: str, speed: float = 1.0) -> np.ndarray:
            started.set()
            release.wait(10)
            return np.full(160, 1000, np.int16)  # loud: nothing is trimmed

    worker = TtsWorker(Blocking(), "blocking")
    job = asyncio.create_task(worker.synthesize("x", 16_000))
    assert await asyncio.to_thread(started.wait, 10)
    closing = asyncio.create_task(worker.aclose())
    await asyncio.sleep(0)  # aclose runs up to its first wait
    ticked = asyncio.Event()
    asyncio.get_running_loop().call_soon(ticked.set)
    await asyncio.wait_for(ticked.wait(), 5)  # the loop is alive while the worker joins
    assert not closing.done()
    release.set()
    await asyncio.wait_for(closing, 10)
    assert len(await job) == 160


def test_a_session_s_phrase_namespace() -> None:
    """``Pipeline.phrase_namespace``: the request's own; else, with the option, one per
    session that no other session and no caller's name can be; else the shared ``""``."""
    from types import SimpleNamespace

    from speechpipe.config import PipelineOptions
    from speechpipe.session import Pipeline
    from speechpipe.stages.request import SessionRequest

    def namespaces(per_session: bool, request: SessionRequest, n: int = 3) -> list[str]:
        fake = SimpleNamespace(options=PipelineOptions(phrase_cache_per_session=per_session))
        return [Pipeline.phrase_namespace(fake, request) for _ in range(n)]  # type: ignore[arg-type]

    assert namespaces(False, SessionRequest()) == ["", "", ""]
    own = namespaces(True, SessionRequest())
    assert len(set(own)) == 3 and all(own) and all(ns.startswith("\0") for ns in own)
    for per_session in (False, True):
        assert namespaces(per_session, SessionRequest(phrase_cache="compare 1")) == (
            ["compare 1"] * 3)


def test_the_bench_servers_give_each_session_its_own_phrase_cache() -> None:
    """``ServerProcess`` starts ``serve`` with ``BENCH_SERVE_ARGS``; those flags set the option
    (the start message no longer can), and ``serve`` without them leaves it off."""
    from speechpipe.bench.server_process import BENCH_SERVE_ARGS
    from speechpipe.cli import build_parser
    from speechpipe.server.serve import serve_config

    parser = build_parser()
    bench = serve_config(parser.parse_args(["serve", *BENCH_SERVE_ARGS]))
    assert bench.pipeline.phrase_cache_per_session is True
    assert serve_config(parser.parse_args(["serve"])).pipeline.phrase_cache_per_session is False
