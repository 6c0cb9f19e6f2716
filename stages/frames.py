"""The shared vocabulary: what flows between stages and out of a session.

Every frame is a frozen, slotted dataclass. Time is counted in **samples of the 16 kHz
stream** (``pts``), the stream clock; seconds are derived at the edges. Text hypotheses
carry their stability: ``committed`` text is final and only ever grows, ``tentative`` text
may still change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "STREAM_RATE",
    "FRAME_SAMPLES",
    "AudioFrame",
    "VadEvent",
    "TextHypothesis",
    "SpeechChunk",
    "UtteranceEnd",
    "StatusEvent",
    "ErrorEvent",
    "StageTiming",
    "OutputEvent",
]

STREAM_RATE = 16_000
"""Sample rate of the internal stream (mono int16)."""

FRAME_SAMPLES = 320
"""20 ms at ``STREAM_RATE``."""


@dataclass(frozen=True, slots=True)
class AudioFrame:
    """Mono int16 audio at ``STREAM_RATE``; ``pts`` is the index of its first sample."""

    samples: NDArray[np.int16]
    pts: int

    @property
    def end(self) -> int:
        """The stream position just after the frame."""
        return self.pts + len(self.samples)


@dataclass(frozen=True, slots=True)
class VadEvent:
    """Speech boundaries found by VAD: ``start``/``end`` of an utterance, a short ``pause``,
    or a ``hush`` (a silence long enough that a pause may follow: the ASR decodes ahead of
    it, and the stage keeps hush events to itself).

    ``pts`` is where the boundary lies in the stream (the first voiced frame of a start,
    or the end of the last voiced frame); ``detected_at`` is the stream position at which VAD
    could decide (after its hangover).
    """

    kind: Literal["start", "end", "pause", "hush"]
    utterance: int
    pts: int
    detected_at: int
    forced: bool = False  # an ``end`` forced by the max utterance length


@dataclass(frozen=True, slots=True)
class StageTiming:
    """Wall-clock seconds a stage spent on one piece of work (for the latency breakdown)."""

    stage: str
    seconds: float


@dataclass(frozen=True, slots=True)
class TextHypothesis:
    """A partial or final hypothesis of one utterance's text.

    ``side`` is ``source`` (captions in the spoken language) or ``target`` (the translation).
    ``committed`` never shrinks between revisions of the same utterance; ``tentative`` may.
    ``audio_start``/``audio_end`` is the source-audio span (stream samples) it covers;
    ``stream_pts`` is the stream position at which it was emitted (see ``StreamClock``).
    """

    side: Literal["source", "target"]
    utterance: int
    revision: int
    committed: str
    tentative: str
    language: str
    audio_start: int
    audio_end: int
    stream_pts: int
    final: bool = False
    timings: tuple[StageTiming, ...] = ()
    # source side, ``source_lang=auto``: how sure the detection is of ``language`` (the
    # vote's share, 0-1; ``stages.language_vote``); None: the language was given
    language_confidence: float | None = None

    @property
    def text(self) -> str:
        """Committed and tentative text together."""
        return " ".join(part for part in (self.committed, self.tentative) if part)


@dataclass(frozen=True, slots=True)
class SpeechChunk:
    """Translated speech for one phrase: int16 mono at ``sample_rate``."""

    samples: NDArray[np.int16]
    sample_rate: int
    utterance: int
    text: str
    stream_pts: int
    timings: tuple[StageTiming, ...] = ()

    @property
    def duration(self) -> float:
        """Seconds of speech."""
        return len(self.samples) / self.sample_rate


@dataclass(frozen=True, slots=True)
class UtteranceEnd:
    """An utterance is over: its final source and target text."""
    utterance: int
    stream_pts: int
    source_text: str
    target_text: str


@dataclass(frozen=True, slots=True)
class StatusEvent:
    """Something the user should know: ``degraded``, ``queued``, ``ready`` ...

    ``detail`` holds machine-readable fields (e.g. ``{"position": 3}``).
    """

    status: str
    message: str
    stream_pts: int = 0
    detail: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ErrorEvent:
    """A recoverable error in one session: the session goes on (see ``speechpipe.errors``)."""

    code: str
    message: str
    stream_pts: int = 0
    utterance: int | None = None


OutputEvent = VadEvent | TextHypothesis | SpeechChunk | UtteranceEnd | StatusEvent | ErrorEvent
