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
import itertools
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, cast

import numpy as np

from speechpipe.config import PipelineOptions
from speechpipe.errors import LanguageError, SessionError, WorkerError
from speechpipe.machine import cpu_info
from speechpipe.models.mt.apertium import ApertiumPair, ApertiumTranslator
from speechpipe.models.mt.ct2_translator import Ct2TextTranslator
from speechpipe.models.mt.ct2_worker import Ct2TranslationWorker
from speechpipe.models.mt.pivot import ByLanguage, PivotTranslation
from speechpipe.models.whisper.engine import WhisperEngine
from speechpipe.models.whisper.prefill import rows_step_choice
from speechpipe.models.whisper.weights import resolve_whisper_model
from speechpipe.models.workers.asr_lanes import lane_engine, urgent_lane_workers
from speechpipe.models.workers.batching import (
    PRIORITY_LIVE,
    PRIORITY_REPLAY,
    AsrBatcher,
    SessionAsr,
)
from speechpipe.models.workers.guard import WorkerHealth
from speechpipe.routing import (
    ResolvedRequest,
    TextTranslator,
    apertium_pair,
    check_output_rate,
    check_request,
    describe_engines,
    mt_policy,
    request_route,
)
from speechpipe.stages.asr import AsrStage
from speechpipe.stages.cache import LruCache
from speechpipe.stages.channels import Channel, ChannelClosed, Overflow
from speechpipe.stages.clock import BasisStreamClock, StreamClock, WallStreamClock
from speechpipe.stages.faithfulness import SileroSpeech
from speechpipe.stages.frames import STREAM_RATE, AudioFrame, OutputEvent, TextHypothesis
from speechpipe.stages.ladder import MODE_FLOOR, DegradeState, SessionLadder
from speechpipe.stages.language_vote import LanguageVote
from speechpipe.stages.model_api import WhisperRequest, WhisperResult
from speechpipe.stages.mt import SpeechTranslationPassthrough
from speechpipe.stages.request import SessionRequest
from speechpipe.stages.text_mt import TextMtStage
from speechpipe.stages.translation_memory import TranslationMemory
from speechpipe.stages.tts import TtsStage
from speechpipe.stages.vad import LabeledAudio, VadStage, merge_labeled
from speechpipe.voices.engines import ENGINES, load_synthesizer
from speechpipe.voices.registry import VoiceInfo, resolve_voice
from speechpipe.voices.tts_worker import TtsWorker

__all__ = [
    "Pipeline", "PipelineSession", "ResolvedRequest", "apply_process_limits", "check_output_rate",
    "check_request", "describe_engines", "limit_blas_threads",
]  # ResolvedRequest, check_*, describe_engines: re-exported from ``speechpipe.routing``

log = logging.getLogger("speechpipe.session")

def _merge_frames(first: AudioFrame, second: AudioFrame) -> AudioFrame:
    return AudioFrame(np.concatenate([first.samples, second.samples]), first.pts)


def limit_blas_threads(threads: int = 1) -> None:
    """Cap numpy's BLAS thread pool for the whole process (why: ``docs/design.md``)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=threads, user_api="blas")


def apply_process_limits(options: PipelineOptions) -> None:
    """Apply the options' process-wide limits (BLAS threads). Called by the entry points
    (CLI, server) that own their process; a library host decides for itself."""
    if options.blas_threads is not None:
        limit_blas_threads(options.blas_threads)


# the phrase-cache namespaces of sessions that get one of their own (``phrase_namespace``)
_SESSION_NAMESPACES = itertools.count(1)


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
        self._tts: dict[str, TtsWorker] = {}
        self._phrase_caches: dict[str, LruCache[tuple[str, str, int, float], np.ndarray]] = {}
        self._tts_lock = threading.Lock()
        self._text_mt: dict[str, Ct2TranslationWorker | ApertiumTranslator] = {}
        self._text_mt_lock = threading.Lock()
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
        self.warm_apertium()

    def warm_apertium(self) -> None:
        """Start the Apertium pairs named in ``apertium.warm`` (``en-es``) now (blocking); an
        unknown or uninstalled pair is refused with ``LanguageError``."""
        from speechpipe.models.mt.apertium import installed_pairs

        installed = installed_pairs()
        for name in self.options.apertium.warm:
            source, _, target = name.partition("-")
            pair = installed.get((source, target))
            if pair is None:
                raise LanguageError(f"apertium.warm: no Apertium pair {name[:32]!r} is "
                                    "installed")
            self._apertium_worker(pair)

    def stop_workers(self) -> None:
        """Stop accepting work and join every worker thread (ASR, TTS, text MT); calls in
        progress finish first. Blocking, idempotent; any thread may call it."""
        self._closed = True
        self.whisper.close()
        with self._tts_lock:
            tts_workers = list(self._tts.values())
        for worker in tts_workers:
            worker.close()
        with self._text_mt_lock:
            mt_workers = list(self._text_mt.values())
        for mt_worker in mt_workers:
            mt_worker.close()

    def release_models(self) -> None:
        """Drop this pipeline's references to the loaded models, after ``stop_workers``.

        Call it on the main thread: the last reference decides which thread runs a model's
        native destructor, and CTranslate2's aborts the process when that is a worker thread
        at interpreter shutdown."""
        self.engine.release()
        if self.urgent_engine is not None:
            self.urgent_engine.release()
        with self._tts_lock:
            self._tts.clear()
            self._phrase_caches.clear()
        with self._text_mt_lock:
            self._text_mt.clear()

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
            first, second = (self._ct2_worker(hop) for hop in route.hops)
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
        with self._tts_lock:
            tts = list(self._tts.values())
        with self._text_mt_lock:
            mt = list(self._text_mt.values())
        return [self.whisper.guard.health(), *(w.guard.health() for w in tts),
                *(w.guard.health() for w in mt)]

    def text_mt_worker(self, spec: str) -> Ct2TranslationWorker | ApertiumTranslator:
        """The shared worker for a route's hop: an Apertium pair (``apertium:MODE``) or a
        CTranslate2 MT model (loaded or started once; blocking)."""
        if spec.startswith("apertium:"):
            return self._apertium_worker(apertium_pair(spec))
        return self._ct2_worker(spec)

    def _apertium_worker(self, pair: ApertiumPair) -> ApertiumTranslator:
        with self._text_mt_lock:
            worker = self._text_mt.get(pair.name)
            if worker is None:
                self._check_open()
                worker = ApertiumTranslator(pair, self.options.apertium)
                worker.warm_up()  # started on first use: the first session waits ~0.1 s once
                self._text_mt[pair.name] = worker
        assert isinstance(worker, ApertiumTranslator)
        return worker

    def _ct2_worker(self, spec: str) -> Ct2TranslationWorker:
        """The shared worker for a CTranslate2 MT model (loaded once; blocking)."""
        from speechpipe.models.mt.registry import resolve_mt_model

        path = resolve_mt_model(spec.removeprefix("ct2:"))
        with self._text_mt_lock:
            worker = self._text_mt.get(str(path))
            if worker is None:
                self._check_open()
                translator = Ct2TextTranslator(path, model_id=str(path),
                                               intra_threads=self.options.mt_threads,
                                               prefill=self.options.mt_prefill)
                worker = Ct2TranslationWorker(translator)
                self._text_mt[str(path)] = worker
            assert isinstance(worker, Ct2TranslationWorker)
            return worker

    def tts_worker(self, voice: VoiceInfo) -> TtsWorker:
        """The shared TTS worker for ``voice`` (loaded on first use; blocking)."""
        with self._tts_lock:
            worker = self._tts.get(voice.name)
            if worker is None:
                self._check_open()
                # an engine's options are the pipeline group its registry entry names
                # (options.piper, options.espeak)
                entry = ENGINES.get(voice.engine)
                group = (entry.options_group if entry is not None else "") or voice.engine
                engine_options = getattr(self.options, group, None)
                worker = TtsWorker(load_synthesizer(voice, engine_options), voice.name)
                self._tts[voice.name] = worker
                self._phrase_caches[voice.name] = LruCache(self.options.phrase_cache_items)
            return worker

    def phrase_cache(
        self, voice: VoiceInfo,
    ) -> LruCache[tuple[str, str, int, float], np.ndarray]:
        """The shared cache of synthesized phrases for ``voice``, keyed by (namespace, text,
        rate, speed); a session's namespace is ``phrase_namespace``'s."""
        self.tts_worker(voice)
        return self._phrase_caches[voice.name]

    def phrase_namespace(self, request: SessionRequest) -> str:
        """A new session's namespace in the phrase caches: the request's own when it names one
        (in-process callers: ``--compare``'s variants, ``bench cost``), else one no other
        session has had when ``options.phrase_cache_per_session`` (the bench servers), else
        ``""``, the one every session shares."""
        if request.phrase_cache:
            return request.phrase_cache
        if self.options.phrase_cache_per_session:
            # NUL first: no name a caller gives is one of these
            return f"\0session {next(_SESSION_NAMESPACES)}"
        return ""

    def session(self, request: SessionRequest) -> PipelineSession:
        """A new session for ``request`` (a ``LiveSession``); use it with ``async with``."""
        return PipelineSession(self, request)


async def _captions_only(inbox: Channel[TextHypothesis], events: Channel[OutputEvent]) -> None:
    """The TTS stage's place without speech (``SessionRequest.speech`` off): the captions
    reached ``events`` from the ASR and MT stages already; drain the target channel, then
    close ``events`` as the TTS stage does (the stage contract)."""
    try:
        while True:
            try:
                await inbox.get()
            except ChannelClosed:
                return
    finally:
        events.close()


class _WithoutTargetText:
    """The events channel as the ASR stage sees it under the pivot: Whisper's English
    (target-side hypotheses) is dropped there, the rest goes through. The ASR only ``put``s."""

    def __init__(self, events: Channel[OutputEvent]) -> None:
        self._events = events

    async def put(self, event: OutputEvent) -> None:
        if isinstance(event, TextHypothesis) and event.side == "target":
            return
        await self._events.put(event)


def _replace(options: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(options, **changes)


class _CountedDetections:
    """A session's ASR client that also counts every language detection (a request without
    a language) in ``vote``, each worth the seconds of audio it heard: what the session's
    ``language_candidates`` are read from. The futures are the client's own, untouched."""

    def __init__(self, client: SessionAsr, vote: LanguageVote) -> None:
        self.client = client
        self.vote = vote

    def _count(self, request: WhisperRequest,
               pending: Awaitable[WhisperResult] | None) -> Awaitable[WhisperResult] | None:
        if pending is None or request.language is not None:
            return pending
        future = asyncio.ensure_future(pending)  # the client's future itself

        def counted(done: asyncio.Future[WhisperResult]) -> None:
            if done.cancelled() or done.exception() is not None:
                return
            result = done.result()
            self.vote.add(result.language_probs or ((result.language, result.language_prob),),
                          len(request.audio) / STREAM_RATE)

        future.add_done_callback(counted)
        return future

    def __call__(self, request: WhisperRequest) -> Awaitable[WhisperResult]:
        pending = self._count(request, self.client(request))
        assert pending is not None
        return pending

    def replace(self, old: WhisperRequest, new: WhisperRequest) -> Awaitable[WhisperResult] | None:
        return self._count(new, self.client.replace(old, new))

    def withdraw(self, old: WhisperRequest) -> bool:
        return self.client.withdraw(old)


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
        options = pipeline.options
        rate = self.request.output_sample_rate
        namespace = pipeline.phrase_namespace(self.request)
        voice = resolved.voice
        if voice is not None:
            tts_worker = await asyncio.to_thread(pipeline.tts_worker, voice)
            cache = pipeline.phrase_cache(voice)
        words = resolved.asr.vocabulary_words
        prepare = getattr(pipeline.engine, "decoder", None)
        if words and resolved.source_lang and prepare is not None:
            # the decoder of this language's vocabulary loads here, not in the first decode
            await asyncio.to_thread(prepare, resolved.source_lang, words)

        async def speak(text: str, speed: float = 1.0, due: float | None = None) -> np.ndarray:
            key = (namespace, text, rate, speed)
            cached = cache.get(key)
            if cached is not None:
                return cached
            if not options.tts_deadline_order:
                due = None  # first in, first out
            samples = await tts_worker.synthesize(text, rate, speed, due)
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
        self.vad = vad = VadStage(options.vad)
        live = self.request.pace == "realtime"
        asr_client = _CountedDetections(pipeline.whisper.client(
            PRIORITY_LIVE if self.request.priority == "live" else PRIORITY_REPLAY
        ), self._detections)
        pivot = resolved.route.kind == "whisper+text"
        # with the pivot, Whisper's English is not the client's target: it stays off events
        asr_events = (cast("Channel[OutputEvent]", _WithoutTargetText(self._events)) if pivot
                      else self._events)
        self.ladder = SessionLadder(resolved.asr, pipeline.degrade,
                                    floor=MODE_FLOOR.get(self.request.mode, 0))
        self.asr = asr = AsrStage(
            asr_client,
            self.clock,
            options=self.ladder,
            language=resolved.source_lang,
            translate=resolved.route.whisper_translates,
            # the pivot: Whisper's English is the text MT's source
            target_language="en" if pivot else self.request.target_lang,
            queue=asr_client if live else None,  # live: stale partials are superseded
            faithfulness=options.faithful,
            speech=pipeline.speech,
        )
        tts = TtsStage(speak, self.clock, rate, options.phrases, catch_up=options.catch_up)
        mt: SpeechTranslationPassthrough | TextMtStage
        if resolved.text_mt is None:
            mt = SpeechTranslationPassthrough()
        else:
            mt = TextMtStage(
                resolved.text_mt.translate,
                source_lang="en" if pivot else resolved.source_lang or "auto",
                target_lang=self.request.target_lang,
                clock=self.clock,
                memory=pipeline.mt_memory,
                forward_source=True,
                options=mt_policy(resolved.text_mt, options.text_mt),
                events=self._events,
                translate_side="target" if pivot else "source",
                direct_languages=getattr(resolved.text_mt, "languages", frozenset()),
            )
        # The pipeline, in order: every stage runs ``run(inbox, outbox)`` and closes its
        # outbox when its inbox is drained, so closing the input drains the whole chain. The
        # ASR stage also writes events (errors, the trace) straight to the client's channel:
        # its own contract, ``run(inbox, outbox, events)``, is left as it is while the ASR
        # commit code is rewritten (issue 22).
        stages: list[tuple[str, Callable[[], Coroutine[Any, Any, None]]]] = [
            ("vad", lambda: vad.run(self.input, labeled)),
            ("asr", lambda: asr.run(labeled, source, asr_events)),
            ("mt", lambda: mt.run(source, target)),
            ("tts", lambda: tts.run(target, self._events) if voice is not None
             else _captions_only(target, self._events)),
        ]
        self._stack = contextlib.AsyncExitStack()
        group = await self._stack.enter_async_context(asyncio.TaskGroup())
        self._tasks = [group.create_task(run(), name=name) for name, run in stages]
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
