"""The trace: session events as JSON-lines records (the contract in docs/usage.md, "Commands").

Every record has ``event``, ``stream_t`` (seconds of input consumed when it was emitted),
``wall_t`` (seconds since the stream started) and ``utterance``, plus the event's payload.
Text events are ``asr.partial``/``asr.commit`` (source) and ``mt.partial``/``mt.commit``
(target): ``*.commit`` when the committed text grew (or the hypothesis is final).
``tts.audio`` records where the chunk lies on the output timeline (``audio_start``): at the
stream time it was produced, or right after the previous chunk.
``utterance.end`` carries ``faithfulness``: ``invented`` (target words, no source words),
``dropped`` (fewer than half as many target words as source words, with 8 or more source
words), ``ok`` or ``empty``, and the ``source_words``/``target_words`` counts behind it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from speechpipe.stages.coverage import classify_utterance, count_words
from speechpipe.stages.frames import (
    STREAM_RATE,
    ErrorEvent,
    SpeechChunk,
    StatusEvent,
    TextHypothesis,
    UtteranceEnd,
    VadEvent,
)
from speechpipe.transport.file_output import replace_file
from speechpipe.transport.file_replay import ReplayEvent

__all__ = ["TraceBuilder", "write_trace", "read_trace", "source_languages",
           "source_language_confidence"]


def _sec(pts: int) -> float:
    return round(pts / STREAM_RATE, 4)


class TraceBuilder:
    """Turns session events into trace records and lays translated speech on a timeline."""

    def __init__(
        self, output_rate: int, on_speech: Callable[[float, np.ndarray], None] | None = None,
    ) -> None:
        """``on_speech(start_s, samples)``: where laid chunks go (in time order) instead of
        being kept for ``render`` (a file writer, for inputs of any length)."""
        self.output_rate = output_rate
        self.records: list[dict[str, Any]] = []
        self.chunks: list[tuple[float, np.ndarray]] = []  # (laid start seconds, samples)
        self._on_speech = on_speech or (lambda start, samples: self.chunks.append(
            (start, samples)))
        self._committed: dict[tuple[str, int], str] = {}
        self._languages: dict[int, str] = {}  # utterance -> its captions' (detected) language
        self._confidences: dict[int, float] = {}  # ... and how sure the detection was
        self._laid_end = 0.0

    def add(self, item: ReplayEvent) -> dict[str, Any]:
        """Add one event as trace records."""
        event = item.event
        base: dict[str, Any] = {"wall_t": round(item.wall_t, 4)}
        if isinstance(event, VadEvent):
            record = {"event": f"vad.{event.kind}", "stream_t": _sec(event.detected_at),
                      "utterance": event.utterance, "audio_t": _sec(event.pts),
                      "forced": event.forced}
        elif isinstance(event, TextHypothesis):
            prefix = "asr" if event.side == "source" else "mt"
            key = (event.side, event.utterance)
            grew = event.committed != self._committed.get(key, "")
            self._committed[key] = event.committed
            kind = "commit" if grew or event.final else "partial"
            if event.side == "source" and event.language:
                self._languages[event.utterance] = event.language
                if event.language_confidence is not None:
                    self._confidences[event.utterance] = event.language_confidence
            record = {"event": f"{prefix}.{kind}", "stream_t": _sec(event.stream_pts),
                      "utterance": event.utterance, "revision": event.revision,
                      "committed": event.committed, "tentative": event.tentative,
                      "final": event.final, "language": event.language,
                      "source_start": _sec(event.audio_start), "source_end": _sec(event.audio_end),
                      "timings": {t.stage: round(t.seconds, 5) for t in event.timings}}
        elif isinstance(event, SpeechChunk):
            produced = event.stream_pts / STREAM_RATE
            start = max(produced, self._laid_end)
            self._laid_end = start + event.duration
            self._on_speech(start, event.samples)
            record = {"event": "tts.audio", "stream_t": _sec(event.stream_pts),
                      "utterance": event.utterance, "text": event.text,
                      "audio_start": round(start, 4), "audio_dur": round(event.duration, 4),
                      "timings": {t.stage: round(t.seconds, 5) for t in event.timings}}
        elif isinstance(event, UtteranceEnd):
            record = {"event": "utterance.end", "stream_t": _sec(event.stream_pts),
                      "utterance": event.utterance, "source_text": event.source_text,
                      "text": event.target_text,
                      "language": self._languages.get(event.utterance),
                      **({"language_confidence": round(self._confidences[event.utterance], 2)}
                         if event.utterance in self._confidences else {}),
                      **faithfulness_fields(event)}
        elif isinstance(event, StatusEvent):
            record = {"event": "status", "stream_t": _sec(event.stream_pts), "utterance": None,
                      "status": event.status, "message": event.message, **event.detail}
        elif isinstance(event, ErrorEvent):
            record = {"event": "error", "stream_t": _sec(event.stream_pts),
                      "utterance": event.utterance, "code": event.code, "message": event.message}
        else:  # pragma: no cover - OutputEvent is closed
            raise TypeError(f"unknown event {event!r}")
        record = {"event": record.pop("event"), "stream_t": record.pop("stream_t"), **base,
                  **record}
        self.records.append(record)
        return record

    def output_samples(self, input_samples: int) -> int:
        """Length of the rendered timeline: the input's, or the speech's if it runs longer."""
        return int(max([input_samples / STREAM_RATE, self._laid_end]) * self.output_rate) + 1

    def render(self, input_samples: int) -> np.ndarray:
        """The translated speech on the input's timeline (at least as long as the input)."""
        out = np.zeros(self.output_samples(input_samples), np.int16)
        for start, samples in self.chunks:
            i = int(round(start * self.output_rate))
            out[i : i + len(samples)] = samples[: len(out) - i]
        return out


def faithfulness_fields(event: UtteranceEnd) -> dict[str, Any]:
    """``faithfulness`` (``ok``, ``invented``, ``dropped`` or ``empty``, from
    ``stages.coverage.classify_utterance``) with the word counts it was judged on."""
    return {"faithfulness": classify_utterance(event.source_text, event.target_text),
            "source_words": count_words(event.source_text),
            "target_words": count_words(event.target_text)}


def source_languages(records: Iterable[dict[str, Any]]) -> list[str]:
    """The languages the captions were in (given, or detected by Whisper with no source
    language), each once, in the order the utterances ended."""
    return list(source_language_confidence(records))


def source_language_confidence(records: Iterable[dict[str, Any]]) -> dict[str, float | None]:
    """Each language the captions were in, in the order the utterances ended, with the
    detection's confidence in it at the last utterance in it (None: the language was given)."""
    seen: dict[str, float | None] = {}
    for record in records:
        language = record.get("language") if record["event"] == "utterance.end" else None
        if language:
            confidence = record.get("language_confidence")
            seen[language] = confidence if confidence is not None else seen.get(language)
    return seen


def write_trace(path: str | Path, records: Iterable[dict[str, Any]]) -> None:
    """Write trace records as JSON lines, by a temporary file renamed onto ``path``
    (``replace_file``: a failure is ``OutputError``, one line)."""
    with replace_file(path, "the trace") as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")


def read_trace(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSON-lines trace."""
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
