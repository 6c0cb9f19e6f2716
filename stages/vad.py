"""Voice activity detection: webrtcvad on 20 ms frames, with start/end hysteresis.

``VadCore`` is pure and synchronous (frames in, boundary events out); ``VadStage`` is the
async shell that labels the audio stream with those events for the ASR. All audio is passed
on (the ASR keeps its own pre-roll), so the stream clock never jumps.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from speechpipe.stages.channels import Channel, ChannelClosed
from speechpipe.stages.frames import FRAME_SAMPLES, STREAM_RATE, AudioFrame, OutputEvent, VadEvent
from speechpipe.stages.vad_options import VadOptions

__all__ = ["VadOptions", "VadCore", "VadStage", "LabeledAudio", "merge_labeled"]


@dataclass(frozen=True, slots=True)
class LabeledAudio:
    """Contiguous audio plus the VAD events decided while it arrived (mergeable)."""

    samples: NDArray[np.int16]
    pts: int
    voiced_samples: int
    events: tuple[VadEvent, ...]
    arrived: float  # time.monotonic() when the newest frame in it arrived

    @property
    def end(self) -> int:
        """The stream position just after the audio."""
        return self.pts + len(self.samples)


def merge_labeled(first: LabeledAudio, second: LabeledAudio) -> LabeledAudio:
    """COALESCE merge for the VAD->ASR channel: concatenate audio, keep every event."""
    return LabeledAudio(
        samples=np.concatenate([first.samples, second.samples]),
        pts=first.pts,
        voiced_samples=first.voiced_samples + second.voiced_samples,
        events=first.events + second.events,
        arrived=max(first.arrived, second.arrived),
    )


class VadCore:
    """Frame-by-frame hysteresis over a voiced/unvoiced decision.

    ``classify`` is injectable so the hysteresis is unit-testable with scripted decisions.
    """

    def __init__(self, options: VadOptions = VadOptions(), classify=None) -> None:
        self.options = options
        if classify is None:
            import webrtcvad

            vad = webrtcvad.Vad(options.aggressiveness)

            def classify(frame: NDArray[np.int16]) -> bool:
                return bool(vad.is_speech(frame.tobytes(), STREAM_RATE))

        self._classify = classify
        frame_ms = FRAME_SAMPLES * 1000 // STREAM_RATE
        # (voiced, pts) of the last frames, for the start decision
        self._window: deque[tuple[bool, int]] = deque(
            maxlen=max(1, options.start_window_ms // frame_ms)
        )
        self._pause_frames = max(1, options.pause_ms // frame_ms)
        self._hush_frames = options.hush_ms // frame_ms  # 0: no hush events
        self._hangover_frames = max(1, options.hangover_ms // frame_ms)
        self._max_samples = int(options.max_utterance_s * STREAM_RATE)
        self.in_speech = False
        self.utterance = -1
        self._utterance_start = 0
        self._silent_run = 0
        self._last_voiced_end = 0
        self._paused = False

    def set_max_utterance_s(self, seconds: float) -> None:
        """Change the forced-cut length from now on (a server's degrade ladder)."""
        self._max_samples = int(seconds * STREAM_RATE)

    def process(self, frame: NDArray[np.int16], pts: int) -> tuple[bool, list[VadEvent]]:
        """Classify one 20 ms frame at stream position ``pts``; return (voiced, events)."""
        voiced = self._classify(frame)
        end = pts + len(frame)
        events: list[VadEvent] = []
        self._window.append((voiced, pts))
        if not self.in_speech:
            n_voiced = sum(v for v, _ in self._window)
            if len(self._window) == self._window.maxlen and (
                n_voiced >= self.options.start_ratio * len(self._window)
            ):
                first_voiced = next(p for v, p in self._window if v)
                self._begin(first_voiced, end, events)
                self._last_voiced_end = end
            return voiced, events
        if voiced:
            self._silent_run = 0
            self._paused = False
            self._last_voiced_end = end
        else:
            self._silent_run += 1
            if self._silent_run == self._hush_frames and not self._paused:
                events.append(VadEvent("hush", self.utterance, self._last_voiced_end, end))
            if self._silent_run == self._pause_frames and not self._paused:
                self._paused = True
                if self._long_enough_to_cut(end):
                    return voiced, self._end_at_pause(end, events)
                events.append(VadEvent("pause", self.utterance, self._last_voiced_end, end))
            if self._silent_run >= self._hangover_frames:
                events.append(VadEvent("end", self.utterance, self._last_voiced_end, end))
                self.in_speech = False
                self._window.clear()
                return voiced, events
        if end - self._utterance_start >= self._max_samples:
            events.append(VadEvent("end", self.utterance, end, end, forced=True))
            if voiced or self._silent_run < self._pause_frames:
                self._begin(end, end, events)
            else:
                self.in_speech = False
                self._window.clear()
        return voiced, events

    def _long_enough_to_cut(self, end: int) -> bool:
        """Past ``soft_max_utterance_s``, a pause is a good place to end the utterance:
        every decode re-reads the whole utterance, so shorter ones cost less, and a
        translation of a shorter span is less likely to leave speech out."""
        soft = min(self.options.soft_max_utterance_s * STREAM_RATE, self._max_samples)
        return end - self._utterance_start >= soft

    def _end_at_pause(self, end: int, events: list[VadEvent]) -> list[VadEvent]:
        events.append(VadEvent("end", self.utterance, self._last_voiced_end, end))
        self.in_speech = False
        self._window.clear()
        return events

    def flush(self, pts: int) -> list[VadEvent]:
        """End the current utterance now (client ``flush``, or end of input)."""
        if not self.in_speech:
            return []
        self.in_speech = False
        self._window.clear()
        return [VadEvent("end", self.utterance, max(self._last_voiced_end, 0), pts)]

    def _begin(self, start: int, detected_at: int, events: list[VadEvent]) -> None:
        self.in_speech = True
        self.utterance += 1
        self._utterance_start = start
        self._silent_run = 0
        self._paused = False
        events.append(VadEvent("start", self.utterance, start, detected_at))


class VadStage:
    """Async shell: re-frames incoming audio to 20 ms and labels it for the ASR."""

    def __init__(self, options: VadOptions = VadOptions(), classify=None) -> None:
        self.core = VadCore(options, classify)
        self.busy_seconds = 0.0
        self._pending = np.zeros(0, np.int16)
        self._pending_pts = 0
        self._flush_requested = False

    def request_flush(self) -> None:
        """End the current utterance at the next frame."""
        self._flush_requested = True

    def set_max_utterance_s(self, seconds: float) -> None:
        """Change the forced-cut length from now on."""
        self.core.set_max_utterance_s(seconds)

    async def run(self, inbox: Channel[AudioFrame], outbox: Channel[LabeledAudio],
                  events: Channel[OutputEvent] | None = None) -> None:
        """Label audio from ``inbox`` as speech or not, with VAD events, into ``outbox``
        (the stage contract, ``stages.stage``; it writes no events)."""
        try:
            while True:
                try:
                    frames = await inbox.get_batch()
                except ChannelClosed:
                    break
                await outbox.put(self._label(frames))
            tail = self._label([])
            end = tail.end
            flushed = tuple(self.core.flush(end))
            if len(tail.samples) or flushed or tail.events:
                await outbox.put(
                    LabeledAudio(tail.samples, tail.pts, tail.voiced_samples,
                                 tail.events + flushed, tail.arrived)
                )
        finally:
            outbox.close()

    def _label(self, frames: list[AudioFrame]) -> LabeledAudio:
        t0 = time.perf_counter()
        if frames:
            if not len(self._pending):
                self._pending_pts = frames[0].pts
            self._pending = np.concatenate([self._pending, *(f.samples for f in frames)])
        start_pts = self._pending_pts
        usable = len(self._pending) // FRAME_SAMPLES * FRAME_SAMPLES
        events: list[VadEvent] = []
        voiced_samples = 0
        for offset in range(0, usable, FRAME_SAMPLES):
            frame = self._pending[offset : offset + FRAME_SAMPLES]
            voiced, frame_events = self.core.process(frame, start_pts + offset)
            voiced_samples += FRAME_SAMPLES if voiced else 0
            events.extend(frame_events)
        if self._flush_requested:
            self._flush_requested = False
            events.extend(self.core.flush(start_pts + usable))
        samples = self._pending[:usable]
        self._pending = self._pending[usable:]
        self._pending_pts = start_pts + usable
        if not frames:  # end of input: pass the sub-frame tail on too
            samples = np.concatenate([samples, self._pending])
            self._pending = np.zeros(0, np.int16)
        self.busy_seconds += time.perf_counter() - t0
        return LabeledAudio(samples, start_pts, voiced_samples, tuple(events), time.monotonic())
