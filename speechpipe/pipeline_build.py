"""A session's pipeline, built: its named stages and the channels between them, from what
its request resolved to (``routing.ResolvedRequest``), the options, and the shared parts the
``Pipeline`` lends it (``SessionParts``). Nothing here starts a task, loads a model or blocks:
``PipelineSession.__aenter__`` (``speechpipe.session``) starts what ``build_stages`` returns.

::

    push() ─► [input] ─► vad ─► [labeled] ─► asr ─► [source] ─► mt ─► [target] ─► tts
                                              │                        │            │
                                              └──────────────── [events] ◄──────────┘

Every stage keeps one contract, ``run(inbox, outbox, events)`` (``stages.stage``): it closes
its outbox when its inbox is drained, so closing the input drains the chain in order, and
the TTS stage's outbox is the events channel. ``CHANNELS`` says what each channel is at each
pace: input audio COALESCE at real-time pace (BLOCK when replaying as fast as the machine
goes, so every decode step is taken), labeled audio COALESCE, text BLOCK, events BLOCK
(committed text and audio are never dropped).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from speechpipe.config import PipelineOptions
from speechpipe.models.workers.batching import SessionAsr
from speechpipe.routing import ResolvedRequest, mt_policy
from speechpipe.stages.asr import AsrStage
from speechpipe.stages.channels import Channel, Overflow
from speechpipe.stages.clock import StreamClock
from speechpipe.stages.faithfulness import SileroSpeech
from speechpipe.stages.frames import STREAM_RATE, AudioFrame, OutputEvent, TextHypothesis
from speechpipe.stages.ladder import MODE_FLOOR, DegradeState, SessionLadder
from speechpipe.stages.language_vote import LanguageVote
from speechpipe.stages.model_api import WhisperRequest, WhisperResult
from speechpipe.stages.mt import SpeechTranslationPassthrough
from speechpipe.stages.stage import Stage
from speechpipe.stages.text_mt import TextMtStage
from speechpipe.stages.translation_memory import TranslationMemory
from speechpipe.stages.tts import CaptionsOnly, TtsStage
from speechpipe.stages.vad import VadStage, merge_labeled
from speechpipe.voices.speaker import Speaker

__all__ = ["CHANNELS", "CHAIN", "BuiltPipeline", "ChannelPolicy", "CountedDetections",
           "PlacedStage", "SessionParts", "build_stages", "make_channels"]


def merge_frames(first: AudioFrame, second: AudioFrame) -> AudioFrame:
    """Two contiguous input frames as one (the input channel's COALESCE)."""
    return AudioFrame(np.concatenate([first.samples, second.samples]), first.pts)


@dataclass(frozen=True, slots=True)
class ChannelPolicy:
    """What one channel is: its capacity (a number, or the ``PipelineOptions`` field that
    holds it), what ``put`` does when it is full, and how COALESCE merges two items."""

    capacity: int | str
    overflow: Overflow = Overflow.BLOCK
    merge: Callable[[Any, Any], Any] | None = None

    def make(self, name: str, options: PipelineOptions) -> Channel[Any]:
        """The channel, its capacity read from ``options`` when named."""
        capacity = (getattr(options, self.capacity) if isinstance(self.capacity, str)
                    else self.capacity)
        return Channel(capacity, self.overflow, merge=self.merge, name=name)


_TEXT = ChannelPolicy(64)
# name -> (at real-time pace, replaying as fast as the machine goes)
CHANNELS: dict[str, tuple[ChannelPolicy, ChannelPolicy]] = {
    "input": (ChannelPolicy("input_capacity_frames", Overflow.COALESCE, merge_frames),
              ChannelPolicy("fast_input_capacity_frames")),  # the producer waits
    # replaying, every hop blocks, so the ASR sees the audio in small steps, as it would live
    "labeled": (ChannelPolicy("input_capacity_frames", Overflow.COALESCE, merge_labeled),
                ChannelPolicy(1)),
    "source": (_TEXT, _TEXT),
    "target": (_TEXT, _TEXT),
    "events": (ChannelPolicy(512), ChannelPolicy(512)),
}

# the chain, in order: stage -> (inbox, outbox); every stage also gets the events channel
CHAIN: dict[str, tuple[str, str]] = {
    "vad": ("input", "labeled"),
    "asr": ("labeled", "source"),
    "mt": ("source", "target"),
    "tts": ("target", "events"),
}


def make_channels(options: PipelineOptions, pace: str) -> dict[str, Channel[Any]]:
    """The session's channels for ``pace`` (``realtime`` or ``fast``), by name."""
    live = pace == "realtime"
    return {name: policies[0 if live else 1].make(name, options)
            for name, policies in CHANNELS.items()}


@dataclass(frozen=True, slots=True)
class SessionParts:
    """What the ``Pipeline`` lends one session: the shared workers and state it runs on."""

    asr: SessionAsr  # the shared ASR worker's client at the session's priority
    clock: StreamClock
    degrade: DegradeState  # the server's degrade level
    detections: LanguageVote  # every language detection of the session
    memory: TranslationMemory
    speech: SileroSpeech | None  # the commit guard's speech check
    speaker: Speaker | None  # None: captions only


@dataclass(frozen=True, slots=True)
class PlacedStage:
    """A stage with the channels it runs between."""

    stage: Stage
    inbox: Channel[Any]
    outbox: Channel[Any]
    events: Channel[OutputEvent]

    def run(self) -> Coroutine[Any, Any, None]:
        """The stage's ``run`` over its channels (a coroutine to start)."""
        return self.stage.run(self.inbox, self.outbox, self.events)


@dataclass(frozen=True, slots=True)
class BuiltPipeline:
    """A session's stages in order (``CHAIN``), its channels, and the handles the session
    keeps (the VAD and ASR stages, the degrade ladder)."""

    stages: dict[str, PlacedStage]
    channels: dict[str, Channel[Any]]
    vad: VadStage
    asr: AsrStage
    ladder: SessionLadder

    @property
    def input(self) -> Channel[AudioFrame]:
        """Where the session's audio goes in."""
        return self.channels["input"]

    @property
    def events(self) -> Channel[OutputEvent]:
        """What the session's client reads."""
        return self.channels["events"]


class _WithoutTargetText:
    """The events channel as the ASR stage sees it under the pivot: Whisper's English
    (target-side hypotheses) is dropped there, the rest goes through. The ASR only ``put``s."""

    def __init__(self, events: Channel[OutputEvent]) -> None:
        self._events = events

    async def put(self, event: OutputEvent) -> None:
        if isinstance(event, TextHypothesis) and event.side == "target":
            return
        await self._events.put(event)


class CountedDetections:
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


def _mt_stage(resolved: ResolvedRequest, options: PipelineOptions,
              parts: SessionParts) -> SpeechTranslationPassthrough | TextMtStage:
    """Whisper's own translation passed through, or the text MT of the route."""
    if resolved.text_mt is None:
        return SpeechTranslationPassthrough()
    pivot = resolved.route.kind == "whisper+text"
    return TextMtStage(
        resolved.text_mt.translate,
        source_lang="en" if pivot else resolved.source_lang or "auto",
        target_lang=resolved.request.target_lang,
        clock=parts.clock,
        memory=parts.memory,
        forward_source=True,
        options=mt_policy(resolved.text_mt, options.text_mt),
        translate_side="target" if pivot else "source",
        direct_languages=getattr(resolved.text_mt, "languages", frozenset()),
    )


def build_stages(resolved: ResolvedRequest, options: PipelineOptions,
                 parts: SessionParts) -> BuiltPipeline:
    """The session's stages and channels for ``resolved`` (nothing started)."""
    request = resolved.request
    channels = make_channels(options, request.pace)
    events = cast("Channel[OutputEvent]", channels["events"])
    asr_client = CountedDetections(parts.asr, parts.detections)
    pivot = resolved.route.kind == "whisper+text"
    ladder = SessionLadder(resolved.asr, parts.degrade, floor=MODE_FLOOR.get(request.mode, 0))
    vad = VadStage(options.vad)
    asr = AsrStage(
        asr_client,
        parts.clock,
        options=ladder,
        language=resolved.source_lang,
        translate=resolved.route.whisper_translates,
        # the pivot: Whisper's English is the text MT's source
        target_language="en" if pivot else request.target_lang,
        # live: stale partials are superseded
        queue=asr_client if request.pace == "realtime" else None,
        faithfulness=options.faithful,
        speech=parts.speech,
    )
    tts: TtsStage | CaptionsOnly = CaptionsOnly()
    if parts.speaker is not None:
        tts = TtsStage(parts.speaker.speak, parts.clock, request.output_sample_rate,
                       options.phrases, catch_up=options.catch_up)
    stages: dict[str, Stage] = {"vad": vad, "asr": asr,
                                "mt": _mt_stage(resolved, options, parts), "tts": tts}
    # with the pivot, Whisper's English is not the client's target: it stays off events
    views = {"asr": cast("Channel[OutputEvent]", _WithoutTargetText(events))} if pivot else {}
    placed = {name: PlacedStage(stages[name], channels[inbox], channels[outbox],
                                views.get(name, events))
              for name, (inbox, outbox) in CHAIN.items()}
    return BuiltPipeline(placed, channels, vad, asr, ladder)
