"""Session assembly: models loaded once per process, one pipeline of stages per session.

``Pipeline`` loads the models and owns the shared workers (ASR, the voices, text MT); a
session's stages and channels are built by ``speechpipe.pipeline_build`` from what its
request resolves to, and ``PipelineSession`` only starts them: a session's stages run in one
``asyncio.TaskGroup``; leaving the session cancels and awaits all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

from speechpipe.config import PipelineOptions
from speechpipe.errors import SessionError, WorkerError
from speechpipe.machine import cpu_info
from speechpipe.models.mt.backends import SharedTranslator
from speechpipe.models.mt.pivot import ByLanguage, PivotTranslation
from speechpipe.models.mt.shared import MtWorkers
from speechpipe.models.whisper.engine import WhisperEngine
from speechpipe.models.whisper.prefill import rows_step_choice
from speechpipe.models.whisper.weights import resolve_whisper_model
from speechpipe.models.workers.asr_lanes import lane_engine, urgent_lane_workers
from speechpipe.models.workers.batching import PRIORITY_LIVE, PRIORITY_REPLAY, AsrBatcher
from speechpipe.models.workers.guard import WorkerHealth
from speechpipe.pipeline_build import CountedDetections as _CountedDetections  # noqa: F401 old name
from speechpipe.pipeline_build import SessionParts, build_stages
from speechpipe.routing import (
    ResolvedRequest,
    TextTranslator,
    check_output_rate,
    check_request,
    describe_engines,
    request_route,
)
from speechpipe.stages.asr import AsrStage
from speechpipe.stages.channels import ChannelClosed
from speechpipe.stages.clock import BasisStreamClock, StreamClock, WallStreamClock
from speechpipe.stages.faithfulness import SileroSpeech
from speechpipe.stages.frames import AudioFrame, OutputEvent
from speechpipe.stages.ladder import DegradeState, SessionLadder
from speechpipe.stages.language_vote import LanguageVote
from speechpipe.stages.request import SessionRequest
from speechpipe.stages.translation_memory import TranslationMemory
from speechpipe.stages.vad import VadStage
from speechpipe.voices.registry import VoiceInfo, resolve_voice
from speechpipe.voices.speaker import PhraseCache, Speaker, VoiceWorkers, phrase_namespace
from speechpipe.voices.tts_worker import TtsWorker

__all__ = [
    "Pipeline", "PipelineSession", "ResolvedRequest", "apply_process_limits", "check_output_rate",
    "check_request", "describe_engines", "limit_blas_threads",
]  # ResolvedRequest, check_*, describe_engines: re-exported from ``speechpipe.routing``

log = logging.getLogger("speechpipe.session")


def limit_blas_threads(threads: int = 1) -> None:
    """Cap numpy's BLAS thread pool for the whole process (why: ``docs/design.md``)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=threads, user_api="blas")


def apply_process_limits(options: PipelineOptions) -> None:
    """Apply the options' process-wide limits (BLAS threads). Called by the entry points
    (CLI, server) that own their process; a library host decides for itself."""
    if options.blas_threads is not None:
        limit_blas_threads(options.blas_threads)


def inplace_rows(setting: str) -> int:
    """The most rows a Whisper decoder step multiplies in place for
    ``pipeline.asr_inplace_step`` on this CPU (``models.whisper.prefill.rows_step_choice``)."""
    cpu = cpu_info()
    return rows_step_choice(setting, repacks_weights=cpu.repacks_weights,
                            avx2=cpu.isa == "AVX2")


class Pipeline:
    """Models and shared workers; ``pipeline.session`` is a ``SessionFactory``."""

    def __init__(self, options: PipelineOptions, engine: WhisperEngine) -> None:
        self.options = options
        self.engine = engine
        # the urgent lane's own model (models.workers.asr_lanes): first words and commits overtake
        lane_workers = urgent_lane_workers(options.batching.urgent_workers)  # none off Linux
        self.urgent_engine = lane_engine(engine, lane_workers) if lane_workers else None
        self.whisper = AsrBatcher(engine, options.batching,  # shared, micro-batching
                                  urgent_engine=self.urgent_engine)
        self.degrade = DegradeState()  # the server's degrade level (speechpipe.server.degrade)
        self.live_sessions: set[PipelineSession] = set()
        self.voices = VoiceWorkers(self._check_open)  # a worker and phrase cache per voice
        self.text_mt = MtWorkers(self._check_open)  # a worker per route hop
        # its table and lock under their old names (decoder_path and the fault drills read them)
        self._text_mt, self._text_mt_lock = self.text_mt.workers, self.text_mt.lock
        self.mt_memory = TranslationMemory(options.translation_memory_items)
        # the commit guard's speech check (stages.faithfulness), shared by all sessions
        self.speech = SileroSpeech() if options.faithful.guard else None
        self.sessions_started = 0
        self._closed = False  # stop_workers() ran: no new workers

    @classmethod
    def load(cls, options: PipelineOptions | None = None) -> Pipeline:
        """Load the models (blocking); ``options`` default to ``PipelineOptions()``."""
        options = options or PipelineOptions()
        model_dir = resolve_whisper_model(options.asr_model)
        engine = WhisperEngine(model_dir, cpu_threads=options.asr_threads,
                               num_workers=options.batching.workers,
                               encode_bucket_s=options.asr_encode_bucket_s,
                               trailing_silence_s=options.asr_trailing_silence_s,
                               restricted_budget_bytes=options.asr_restricted_cache_mb << 20,
                               rows_step=inplace_rows(options.asr_inplace_step))
        return cls(options, engine)

    def warm_up(self) -> None:
        """Run one inference through each model so the first session is not slow (blocking)."""
        self.engine.warm_up()  # includes a batched inference
        self.whisper.warm_up()  # and one through the shared worker's thread
        voice = resolve_voice(None, "en", self.options.voice_dirs)
        self.tts_worker(voice).warm_up()
        self.text_mt.warm(self.options)  # the hops named to start with the server

    def stop_workers(self) -> None:
        """Stop accepting work and join every worker thread (ASR, TTS, text MT); calls in
        progress finish first. Blocking, idempotent; any thread may call it."""
        self._closed = True
        self.whisper.close()
        self.voices.close()
        self.text_mt.close()

    def release_models(self) -> None:
        """Drop this pipeline's references to the loaded models, after ``stop_workers``.

        Call it on the main thread: the last reference decides which thread runs a model's
        native destructor, and CTranslate2's aborts the process when that is a worker thread
        at interpreter shutdown."""
        self.engine.release()
        if self.urgent_engine is not None:
            self.urgent_engine.release()
        self.voices.clear()
        self.text_mt.clear()

    def close(self) -> None:
        """Stop and join the workers, then release the models (on the calling thread:
        the main one, in the CLI). Safe to call twice. A Ctrl-C during the teardown does
        not cut it short (a worker left running would abort the process at exit); it is
        raised once the teardown is done."""
        interrupted: KeyboardInterrupt | None = None
        for _ in range(3):  # a user pressing Ctrl-C again and again still gets out
            try:
                self.stop_workers()
                break
            except KeyboardInterrupt as exc:
                interrupted = exc
        self.release_models()
        if interrupted is not None:
            raise interrupted

    def _check_open(self) -> None:
        if self._closed:
            raise WorkerError("the pipeline is shut down")

    async def aclose(self) -> None:
        """``close`` for an event loop: the workers are joined off the loop, the models are
        released on the loop's thread (the main one in every speechpipe command)."""
        await asyncio.to_thread(self.stop_workers)
        self.release_models()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Pipeline:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- requests ------------------------------------------------------------------------
    def resolve(self, request: SessionRequest) -> ResolvedRequest:
        """Validate a request; raises ``InputError`` subclasses with one clear message."""
        source, target = check_request(request)
        if source != "auto":
            self.engine.check_language(source)  # the loaded model's own languages
        self.whisper.guard.refuse_if_down()  # WorkerUnavailable: close 1013, retry later
        route = request_route(request, source, target)
        text_mt: TextTranslator | None = None
        if route.kind == "text":
            text_mt = self.text_mt_worker(route.hops[0])
            text_mt.check_languages(source, target)
        elif route.kind == "whisper+text":
            pivot_mt = self.text_mt_worker(route.hops[0])
            pivot_mt.check_languages("en", target)
            text_mt = pivot_mt
            if route.direct:  # auto: a detected language's own captions where a pair is
                text_mt = ByLanguage(pivot_mt, {lang: self.text_mt_worker(hop)
                                                for lang, hop in route.direct})
        elif route.kind == "text+text":
            first, second = (self.text_mt.ct2(hop, self.options) for hop in route.hops)
            first.check_languages(source, "en")
            second.check_languages("en", target)
            text_mt = PivotTranslation(first, second)
        if route.kind != "whisper" or request.mt == "auto":
            log.info("MT route: %s", route.describe(source, target))
        voice = (resolve_voice(request.voice, target, self.options.voice_dirs)
                 if request.speech else None)
        asr = self.options.asr
        if request.mode == "fast":
            asr = _replace(asr, step_s=max(asr.step_s, 1.0), final_beam_size=1)
        elif request.mode == "quality":
            asr = _replace(asr, beam_size=max(asr.beam_size, 2))
        return ResolvedRequest(request, None if source == "auto" else source, voice, asr,
                               text_mt, route)

    def worker_health(self) -> list[WorkerHealth]:
        """Every shared worker's breaker, deadline and counters (``models.workers.guard``):
        ``/readyz`` and the metrics read it."""
        mt = self.text_mt.loaded()
        return [self.whisper.guard.health(), *(w.guard.health() for w in self.voices.loaded()),
                *(w.guard.health() for w in mt)]

    def text_mt_worker(self, hop: str) -> SharedTranslator:
        """The shared worker for a route's hop (``models.mt.shared``: a backend's, such as an
        Apertium pair ``apertium:MODE``, or a CTranslate2 model; started once; blocking)."""
        return self.text_mt.worker(hop, self.options)

    def tts_worker(self, voice: VoiceInfo) -> TtsWorker:
        """The shared TTS worker for ``voice`` (loaded on first use; blocking)."""
        # an engine's options: the group its registry entry names (voices.engines)
        return self.voices.worker(voice, lambda entry: entry.options_in(self.options),
                                  self.options.phrase_cache_items)

    def phrase_cache(self, voice: VoiceInfo) -> PhraseCache:
        """The shared cache of synthesized phrases for ``voice``, keyed by (namespace, text,
        rate, speed); a session's namespace is ``phrase_namespace``'s."""
        self.tts_worker(voice)
        return self.voices.cache(voice)

    def phrase_namespace(self, request: SessionRequest) -> str:
        """A new session's namespace in the phrase caches (``voices.speaker``): the
        request's own, else one of its own under ``options.phrase_cache_per_session``, else
        the shared ``""``."""
        return phrase_namespace(request.phrase_cache, self.options.phrase_cache_per_session)

    def speaker(self, resolved: ResolvedRequest) -> Speaker | None:
        """A new session's ``Speaker`` (its voice loaded on first use; blocking); None for
        captions only."""
        if resolved.voice is None:
            return None
        namespace = self.phrase_namespace(resolved.request)
        worker = self.tts_worker(resolved.voice)
        return Speaker(worker, self.phrase_cache(resolved.voice), namespace=namespace,
                       rate=resolved.request.output_sample_rate,
                       deadline_order=self.options.tts_deadline_order)

    def prepare_decoder(self, resolved: ResolvedRequest) -> None:
        """Load the decoder of the session's vocabulary now, not in its first decode
        (blocking)."""
        words = resolved.asr.vocabulary_words
        prepare = getattr(self.engine, "decoder", None)
        if words and resolved.source_lang and prepare is not None:
            prepare(resolved.source_lang, words)

    async def lend(self, resolved: ResolvedRequest, clock: StreamClock,
                   detections: LanguageVote) -> SessionParts:
        """What a new session runs on: its speaker and ASR client, the shared state."""
        speaker = await asyncio.to_thread(self.speaker, resolved)
        await asyncio.to_thread(self.prepare_decoder, resolved)
        priority = PRIORITY_LIVE if resolved.request.priority == "live" else PRIORITY_REPLAY
        return SessionParts(self.whisper.client(priority), clock, self.degrade, detections,
                            self.mt_memory, self.speech, speaker)

    def session(self, request: SessionRequest) -> PipelineSession:
        """A new session for ``request`` (a ``LiveSession``); use it with ``async with``."""
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
        self._stack: contextlib.AsyncExitStack | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._next_pts = 0
        self.vad: VadStage | None = None
        self.asr: AsrStage | None = None
        self.ladder: SessionLadder | None = None  # set on entry; the degrade ladder reads it
        self._detections = LanguageVote()  # every language detection (language_candidates)
        self.engines: dict[str, str] | None = None  # describe_engines, once resolved

    async def __aenter__(self) -> PipelineSession:
        pipeline = self.pipeline
        self.resolved = resolved = await asyncio.to_thread(pipeline.resolve, self.request)
        self.engines = describe_engines(resolved)
        parts = await pipeline.lend(resolved, self.clock, self._detections)
        built = build_stages(resolved, pipeline.options, parts)
        self.input, self._events = built.input, built.events
        self.vad, self.asr, self.ladder = built.vad, built.asr, built.ladder
        self._stack = contextlib.AsyncExitStack()
        group = await self._stack.enter_async_context(asyncio.TaskGroup())
        self._tasks = [group.create_task(stage.run(), name=name)
                       for name, stage in built.stages.items()]
        pipeline.sessions_started += 1
        pipeline.live_sessions.add(self)
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.pipeline.live_sessions.discard(self)
        for task in self._tasks:
            task.cancel()
        if self._stack is not None:  # the stages' task group (and whatever joins it later)
            stack, self._stack = self._stack, None
            await stack.__aexit__(exc_type, exc, tb)

    # -- LiveSession -----------------------------------------------------------------------
    async def push(self, frame: AudioFrame) -> None:
        """Queue 16 kHz mono int16 audio; frames must be contiguous (``pts`` increasing)."""
        if frame.pts != self._next_pts:
            raise SessionError(
                f"audio is not contiguous: expected pts {self._next_pts}, got {frame.pts}",
                code="bad_audio",
            )
        self._next_pts = frame.end
        self.clock.begin()
        await self.input.put(frame)

    def flush(self) -> None:
        """End the current utterance now, as if the speaker paused."""
        assert self.vad is not None
        self.vad.request_flush()
        with contextlib.suppress(asyncio.QueueFull):
            self.input.put_nowait(AudioFrame(np.zeros(0, np.int16), self._next_pts))

    async def finish(self) -> None:
        """No more audio: the stages drain and ``events()`` ends after the last event."""
        self.input.close()

    def language_candidates(self, kept: int = 3) -> tuple[tuple[str, float], ...]:
        """``source_lang=auto``: the ``kept`` languages every detection of this session so
        far weighed most (Whisper's probabilities, each detection worth the seconds of audio
        it heard: ``stages.language_vote``), with their shares, largest first. Empty when the
        language was given."""
        return self._detections.ranking(kept)

    def set_max_utterance_s(self, seconds: float) -> None:
        """Change the VAD's forced-cut length from now on (the server's degrade ladder)."""
        if self.vad is not None:
            self.vad.set_max_utterance_s(seconds)

    def post(self, event: OutputEvent) -> bool:
        """Add an event from outside the stages (e.g. a ``status``); False if it cannot be
        queued now (full or finished): such notices are best-effort."""
        try:
            self._events.put_nowait(event)
        except (asyncio.QueueFull, ChannelClosed):
            return False
        return True

    async def events(self) -> AsyncIterator[OutputEvent]:
        """Events in the order produced; ends after ``finish`` has drained the stages."""
        async for event in self._events:
            yield event
