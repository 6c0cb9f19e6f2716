"""Never invent, never drop: the pure rules that keep a translation faithful to the speech.

Three concerns, each a small pure function or core (no models, no asyncio):

- **Speech evidence** (``SpeechEvidence``): a second opinion on "is this speech?" from a
  neural VAD (Silero, bundled with faster-whisper). webrtcvad, which cuts utterances, takes
  music for speech, while Silero does not (docs/design.md, "Never invent"; figures in
  docs/benchmarks.md). So webrtcvad keeps cutting the stream (it is fast and decides frame
  by frame) and Silero decides whether a span may commit words.
- **The commit guard** (``guard_decodes``): a decode's words for a span without speech are
  dropped, on both sides; the translation never holds more words than the source side heard
  can justify (no source words: no target words).
- **Coverage** (``coverage_gap``, ``classify_utterance``, re-exported from
  ``stages.coverage`` because the engine uses them too): a translation much shorter than its
  captions left speech out; the gap says where the uncovered part starts, so the engine can
  translate that audio on its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

import numpy as np
from numpy.typing import NDArray

from speechpipe.stages.coverage import (
    Verdict,
    classify_utterance,
    count_words,
    coverage_gap,
    sentence_starts,
)
from speechpipe.stages.faithfulness_options import FaithfulnessOptions

if TYPE_CHECKING:
    from speechpipe.stages.model_api import DecodeResult as _Decode

__all__ = [
    "FaithfulnessOptions", "SpeechEvidence", "SpeechClassifier", "SileroSpeech", "count_words",
    "guard_decodes", "coverage_gap", "classify_utterance", "Verdict", "sentence_starts",
]

SPEECH_WINDOW = 512  # Silero's window at 16 kHz (32 ms)


@dataclass
class SpeechEvidence:
    """Speech probabilities for one utterance's audio, computed incrementally.

    ``add`` queues samples (cheap); ``update`` classifies every complete 32 ms window queued
    so far (the model call: run it off the event loop; the classifier's recurrent state is
    carried between calls, so pieces score as one long call would); ``seconds`` answers how
    much speech lies in a span of the utterance.
    """

    start_pts: int
    classify: SpeechClassifier
    threshold: float = 0.5
    _pending: list[NDArray[np.int16]] = field(default_factory=list)
    _pending_samples: int = 0
    _probabilities: list[NDArray[np.float32]] = field(default_factory=list)
    _classified: int = 0  # samples classified so far (a multiple of SPEECH_WINDOW)
    _state: object = None  # the classifier's state after the last window

    def add(self, samples: NDArray[np.int16]) -> None:
        """Queue audio for classification (see ``update``)."""
        if len(samples):
            self._pending.append(samples)
            self._pending_samples += len(samples)

    def update(self) -> None:
        """Classify every whole ``SPEECH_WINDOW`` of the queued audio; keep the rest queued."""
        usable = self._pending_samples // SPEECH_WINDOW * SPEECH_WINDOW
        if not usable:
            return
        audio = np.concatenate(self._pending)
        head, tail = audio[:usable], audio[usable:]
        self._pending = [tail] if len(tail) else []
        self._pending_samples = len(tail)
        probabilities, self._state = self.classify(head.astype(np.float32) / 32768.0,
                                                   self._state)
        self._probabilities.append(np.asarray(probabilities, np.float32).reshape(-1))
        self._classified += usable

    def seconds(self, start_pts: int, end_pts: int) -> float:
        """Seconds of speech between two stream positions (classified windows only)."""
        if not self._probabilities:
            return 0.0
        probabilities = np.concatenate(self._probabilities)
        if len(self._probabilities) > 1:
            self._probabilities = [probabilities]
        a = max(0, (start_pts - self.start_pts) // SPEECH_WINDOW)
        b = max(0, -(-(end_pts - self.start_pts) // SPEECH_WINDOW))
        voiced = int(np.count_nonzero(probabilities[a:b] >= self.threshold))
        return voiced * SPEECH_WINDOW / 16_000


class SpeechClassifier(Protocol):
    """A neural VAD: speech probabilities per window, with state carried between calls."""
    def __call__(
        self, audio: NDArray[np.float32], state: object
    ) -> tuple[NDArray[np.float32], object]:
        """Speech probability per ``SPEECH_WINDOW`` of ``audio`` (a multiple of it), and the
        state to pass with the audio that follows (None to start)."""
        ...


class SileroSpeech:
    """Silero VAD v6 (the ONNX model bundled with faster-whisper) as a streaming
    ``SpeechClassifier``: 16 kHz float audio in 32 ms windows, each with 4 ms of context
    and the recurrent state carried over. One instance serves many streams (the state lives
    with each stream); ONNX Runtime sessions allow concurrent ``run`` calls."""

    CONTEXT = 64

    def __init__(self) -> None:
        from faster_whisper.vad import get_vad_model

        self._session = get_vad_model().session

    def __call__(
        self, audio: NDArray[np.float32], state: object
    ) -> tuple[NDArray[np.float32], object]:
        if not len(audio):
            return np.zeros(0, np.float32), state
        if state is None:
            h = np.zeros((1, 1, 128), np.float32)
            c = np.zeros((1, 1, 128), np.float32)
            context = np.zeros(self.CONTEXT, np.float32)
        else:
            h, c, context = state  # type: ignore[misc]
        windows = audio.reshape(-1, SPEECH_WINDOW)
        contexts = np.concatenate([context[None], windows[:-1, -self.CONTEXT:]], axis=0)
        batch = np.ascontiguousarray(np.concatenate([contexts, windows], axis=1))
        out, h, c = self._session.run(None, {"input": batch, "h": h, "c": c})
        return np.asarray(out, np.float32).reshape(-1), (h, c, windows[-1, -self.CONTEXT:])


def guard_decodes(
    decodes: Sequence[_Decode],
    speech_s: float | None,
    source_words_before: int,
    target_words_before: int,
    options: FaithfulnessOptions = FaithfulnessOptions(),
) -> list[_Decode]:
    """Apply the commit guard to one decode result's (transcribe, translate) decodes.

    ``speech_s``: seconds of speech in the span the decode adds words for (None: unknown,
    the speech rules are skipped). ``*_words_before``: words already committed per side.
    - no speech in the span: no side adds words;
    - each side adds at most ``words_per_speech_s`` per speech second (+``extra_words``);
    - the translation holds at most ``target_per_source_word`` words per source word heard
      (committed plus this decode's continuation, when the decode has a source side), plus
      ``target_extra_words``; with no source word, none.
    Returns new decodes (``continuation`` shortened, ``guarded`` set where words went).
    """
    if not options.guard:
        return list(decodes)
    out: list[_Decode] = []
    source = next((d for d in decodes if d.task == "transcribe"), None)
    source_heard = None
    if source is not None:
        source_heard = source_words_before
        if speech_s is None or speech_s >= options.min_speech_s:
            source_heard += count_words(source.continuation)
    for decode in decodes:
        allowed: float = math.inf
        if speech_s is not None:
            allowed = (0 if speech_s < options.min_speech_s
                       else options.words_per_speech_s * speech_s + options.extra_words)
        if decode.task == "translate" and source_heard is not None:
            cap = (0 if source_heard == 0 else options.target_per_source_word * source_heard
                   + options.target_extra_words)
            allowed = min(allowed, max(0, cap - target_words_before))
        out.append(_limit(decode, int(allowed) if allowed != math.inf else None))
    return out


def _limit(decode: _Decode, allowed: int | None) -> _Decode:
    if allowed is None:
        return decode
    words = decode.continuation.split()
    if allowed == 0:  # nothing may be said: not even "..." or a glued fragment
        if not decode.continuation and not decode.glued:
            return decode
        return replace(decode, continuation="", glued="", guarded=True)
    if count_words(decode.continuation) <= allowed:
        return decode
    kept: list[str] = []
    for word in words:
        if count_words(" ".join([*kept, word])) > allowed:
            break
        kept.append(word)
    return replace(decode, continuation=" ".join(kept), guarded=True)

