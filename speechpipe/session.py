"""Session assembly: models loaded once per process, one pipeline of stages per session.

::

    push() ─► [input] ─► VadStage ─► [labeled] ─► AsrStage ─► [source] ─► MT ─► [target] ─► TtsStage
                                                      │                                   │
                                                      └──────────── events ◄──────────────┘

Channel policies: input audio COALESCE at real-time pace (BLOCK when replaying as fast as the
machine goes, so every decode step is taken), labeled audio COALESCE, text BLOCK, events
BLOCK (committed text and audio are never dropped). A session's stages run in one
``asyncio.TaskGroup``; leaving the session cancels and awaits all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from speechpipe.config import PipelineOptions
from speechpipe.errors import InputError, LanguageError, SessionError
from speechpipe.models.batching import PRIORITY_LIVE, PRIORITY_REPLAY, AsrBatcher
from speechpipe.models.ct2_translator import Ct2TextTranslator
from speechpipe.models.ct2_worker import Ct2TranslationWorker
from speechpipe.models.whisper_engine import WhisperEngine
from speechpipe.models.whisper_weights import resolve_whisper_model
from speechpipe.server.degrade import MODE_FLOOR, DegradeState, SessionLadder
from speechpipe.stages.asr import AsrOptions, AsrStage
from speechpipe.stages.cache import LruCache
from speechpipe.stages.channels import Channel, ChannelClosed, Overflow
from speechpipe.stages.clock import BasisStreamClock, StreamClock, WallStreamClock
from speechpipe.stages.frames import AudioFrame, OutputEvent, TextHypothesis
from speechpipe.stages.mt import SpeechTranslationPassthrough
from speechpipe.stages.text_mt import TextMtStage
from speechpipe.stages.translation_memory import TranslationMemory
from speechpipe.stages.tts import TtsStage
from speechpipe.stages.vad import LabeledAudio, VadStage, merge_labeled
from speechpipe.transport.session_api import SessionRequest
from speechpipe.voices.piper_engine import PiperOptions, PiperSynthesizer
from speechpipe.voices.registry import VoiceInfo, resolve_voice
from speechpipe.voices.tts_worker import TtsWorker

__all__ = ["Pipeline", "PipelineSession", "ResolvedRequest"]

log = logging.getLogger("speechpipe.session")

MIN_OUTPUT_RATE = 8_000
MAX_OUTPUT_RATE = 48_000


def _merge_frames(first: AudioFrame, second: AudioFrame) -> AudioFrame:
    return AudioFrame(np.concatenate([first.samples, second.samples]), first.pts)


@dataclass(frozen=True, slots=True)
class ResolvedRequest:
    request: SessionRequest
    source_lang: str | None  # None: detect per utterance
    voice: VoiceInfo
    asr: AsrOptions
    text_mt: Ct2TranslationWorker | None = None  # None: Whisper speech translation


def limit_blas_threads(threads: int = 1) -> None:
    """Cap numpy's BLAS thread pool for the whole process.

    Whisper's log-mel features (``faster_whisper.FeatureExtractor``: a filter-bank matmul)
    run on every decode in the ASR worker threads. OpenBLAS gives each such call its own pool
    of one thread per core, which then competes with the other ASR worker, Piper and the
    event loop. Measured here (2 cores, two ASR calls at once, separate processes): 228 ms
    per call with the default pool, 161 ms with one BLAS thread (154 ms alone)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=threads, user_api="blas")


class Pipeline:
    """Models and shared workers; ``pipeline.session`` is a ``SessionFactory``."""

    def __init__(self, options: PipelineOptions, engine: WhisperEngine) -> None:
        self.options = options
        self.engine = engine
        self.whisper = AsrBatcher(engine, options.batching)  # shared, micro-batching
        self.degrade = DegradeState()  # the server's degrade level (speechpipe.server.degrade)
        self.live_sessions: set[PipelineSession] = set()
        self._tts: dict[str, TtsWorker] = {}
        self._phrase_caches: dict[str, LruCache[tuple[str, int, float], np.ndarray]] = {}
        self._tts_lock = threading.Lock()
        self._text_mt: dict[str, Ct2TranslationWorker] = {}
        self._text_mt_lock = threading.Lock()
        self.mt_memory = TranslationMemory(options.translation_memory_items)
        self.sessions_started = 0

    @classmethod
    def load(cls, options: PipelineOptions | None = None) -> Pipeline:
        options = options or PipelineOptions()
        limit_blas_threads()
        model_dir = resolve_whisper_model(options.asr_model)
        engine = WhisperEngine(model_dir, cpu_threads=options.asr_threads,
                               num_workers=options.batching.workers,
                               encode_bucket_s=options.asr_encode_bucket_s)
        return cls(options, engine)

    def warm_up(self) -> None:
        self.engine.warm_up()  # includes a batched inference
        self.whisper.warm_up()  # and one through the shared worker's thread
        voice = resolve_voice(None, "en", self.options.voice_dirs)
        self._tts_worker(voice).warm_up()

    def close(self) -> None:
        self.whisper.close()
        for worker in self._tts.values():
            worker.shutdown()
        for mt_worker in self._text_mt.values():
            mt_worker.shutdown()

    # -- requests ------------------------------------------------------------------------
    def resolve(self, request: SessionRequest) -> ResolvedRequest:
        """Validate a request; raises ``InputError`` subclasses with one clear message."""
        source = request.source_lang.strip().lower()
        if source != "auto":
            self.engine.check_language(source)
        target = request.target_lang.strip().lower()
        text_mt = None
        if request.mt == "whisper":
            if target != "en":
                raise LanguageError(
                    f"target language {target!r} needs a text MT model: the embedded default "
                    "translates to English only (bring one with --mt ct2:MODEL)"
                )
        elif request.mt.startswith("ct2:"):
            text_mt = self.text_mt_worker(request.mt)
            text_mt.check_languages(source, target)
        else:
            raise InputError(f"unknown MT backend {request.mt!r} (use whisper or ct2:MODEL)")
        if not MIN_OUTPUT_RATE <= request.output_sample_rate <= MAX_OUTPUT_RATE:
            raise InputError(
                f"output sample rate {request.output_sample_rate} outside "
                f"{MIN_OUTPUT_RATE}..{MAX_OUTPUT_RATE} Hz"
            )
        voice = resolve_voice(request.voice, target, self.options.voice_dirs)
        asr = self.options.asr
        if request.mode == "fast":
            asr = _replace(asr, step_s=max(asr.step_s, 1.0), final_beam_size=1)
        elif request.mode == "quality":
            asr = _replace(asr, beam_size=max(asr.beam_size, 2))
        return ResolvedRequest(request, None if source == "auto" else source, voice, asr, text_mt)

    def text_mt_worker(self, spec: str) -> Ct2TranslationWorker:
        """The shared worker for a CTranslate2 MT model (loaded once; blocking)."""
        from speechpipe.models.mt_registry import resolve_mt_model

        path = resolve_mt_model(spec.removeprefix("ct2:"))
        with self._text_mt_lock:
            worker = self._text_mt.get(str(path))
            if worker is None:
                translator = Ct2TextTranslator(path, model_id=str(path),
                                               intra_threads=self.options.mt_threads)
                worker = Ct2TranslationWorker(translator)
                self._text_mt[str(path)] = worker
            return worker

    def _tts_worker(self, voice: VoiceInfo) -> TtsWorker:
        with self._tts_lock:
            worker = self._tts.get(voice.name)
            if worker is None:
                piper_options = PiperOptions(length_scale=self.options.tts_length_scale)
                worker = TtsWorker(PiperSynthesizer(voice, piper_options), voice.name)
                self._tts[voice.name] = worker
                self._phrase_caches[voice.name] = LruCache(self.options.phrase_cache_items)
            return worker

    def phrase_cache(self, voice: VoiceInfo) -> LruCache[tuple[str, int, float], np.ndarray]:
        self._tts_worker(voice)
        return self._phrase_caches[voice.name]

    def session(self, request: SessionRequest) -> PipelineSession:
        return PipelineSession(self, request)


def _replace(options: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(options, **changes)


class PipelineSession:
    """One running pipeline (implements ``transport.session_api.LiveSession``)."""

    def __init__(self, pipeline: Pipeline, request: SessionRequest) -> None:
        self.pipeline = pipeline
        self.request = request
        self.resolved: ResolvedRequest | None = None
        self.clock: StreamClock = (
            WallStreamClock() if request.pace == "realtime" else BasisStreamClock()
        )
        self._group: asyncio.TaskGroup | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._next_pts = 0
        self.vad: VadStage | None = None
        self.asr: AsrStage | None = None

    async def __aenter__(self) -> PipelineSession:
        pipeline = self.pipeline
        self.resolved = resolved = await asyncio.to_thread(pipeline.resolve, self.request)
        options = pipeline.options
        tts_worker = await asyncio.to_thread(pipeline._tts_worker, resolved.voice)
        cache = pipeline.phrase_cache(resolved.voice)
        rate = self.request.output_sample_rate

        async def speak(text: str, speed: float = 1.0) -> np.ndarray:
            key = (text, rate, speed)
            cached = cache.get(key)
            if cached is not None:
                return cached
            samples = await tts_worker.synthesize(text, rate, speed)
            cache.put(key, samples)
            return samples

        if self.request.pace == "realtime":
            self.input: Channel[AudioFrame] = Channel(
                options.input_capacity_frames, Overflow.COALESCE, merge=_merge_frames, name="input"
            )
        else:
            self.input = Channel(options.fast_input_capacity_frames, Overflow.BLOCK, name="input")
        if self.request.pace == "realtime":
            labeled: Channel[LabeledAudio] = Channel(
                options.input_capacity_frames, Overflow.COALESCE, merge=merge_labeled,
                name="labeled",
            )
        else:  # every hop blocks, so the ASR sees the audio in small steps, as it would live
            labeled = Channel(1, Overflow.BLOCK, name="labeled")
        source: Channel[TextHypothesis] = Channel(64, name="source")
        target: Channel[TextHypothesis] = Channel(64, name="target")
        self._events: Channel[OutputEvent] = Channel(512, name="events")
        self.vad = VadStage(options.vad)
        live = self.request.pace == "realtime"
        asr_client = pipeline.whisper.client(
            PRIORITY_LIVE if self.request.priority == "live" else PRIORITY_REPLAY
        )
        self.ladder = SessionLadder(resolved.asr, pipeline.degrade,
                                    floor=MODE_FLOOR.get(self.request.mode, 0))
        self.asr = AsrStage(
            asr_client,
            self.clock,
            options=self.ladder,
            language=resolved.source_lang,
            translate=resolved.text_mt is None,
            target_language=self.request.target_lang,
            queue=asr_client if live else None,  # live: stale partials are superseded
        )
        tts = TtsStage(speak, self.clock, rate, options.phrases, catch_up=options.catch_up)
        if resolved.text_mt is None:
            passthrough = SpeechTranslationPassthrough()

            async def run_mt() -> None:
                await passthrough.run(source, target)
        else:
            text_mt = TextMtStage(
                resolved.text_mt.translate,
                source_lang=resolved.source_lang or "auto",
                target_lang=self.request.target_lang,
                clock=self.clock,
                memory=pipeline.mt_memory,
                forward_source=True,
            )

            async def run_mt() -> None:
                try:
                    await text_mt.run(source, target, self._events)
                finally:
                    target.close()

        async def run_tts() -> None:
            try:
                await tts.run(target, self._events)
            finally:
                self._events.close()

        async def run_asr() -> None:
            await self.asr.run(labeled, source, self._events)  # type: ignore[union-attr]

        self._group = asyncio.TaskGroup()
        await self._group.__aenter__()
        self._tasks = [
            self._group.create_task(self.vad.run(self.input, labeled), name="vad"),
            self._group.create_task(run_asr(), name="asr"),
            self._group.create_task(run_mt(), name="mt"),
            self._group.create_task(run_tts(), name="tts"),
        ]
        pipeline.sessions_started += 1
        pipeline.live_sessions.add(self)
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.pipeline.live_sessions.discard(self)
        for task in self._tasks:
            task.cancel()
        if self._group is not None:
            group, self._group = self._group, None
            await group.__aexit__(exc_type, exc, tb)

    # -- LiveSession -----------------------------------------------------------------------
    async def push(self, frame: AudioFrame) -> None:
        if frame.pts != self._next_pts:
            raise SessionError(
                f"audio is not contiguous: expected pts {self._next_pts}, got {frame.pts}",
                code="bad_audio",
            )
        self._next_pts = frame.end
        self.clock.begin()
        await self.input.put(frame)

    def flush(self) -> None:
        assert self.vad is not None
        self.vad.request_flush()
        with contextlib.suppress(asyncio.QueueFull):
            self.input.put_nowait(AudioFrame(np.zeros(0, np.int16), self._next_pts))

    async def finish(self) -> None:
        self.input.close()

    def post(self, event: OutputEvent) -> bool:
        """Add an event from outside the stages (e.g. a ``status``); False if it cannot be
        queued now (full or finished): such notices are best-effort."""
        try:
            self._events.put_nowait(event)
        except (asyncio.QueueFull, ChannelClosed):
            return False
        return True

    async def events(self):  # type: ignore[no-untyped-def]
        async for event in self._events:
            yield event
