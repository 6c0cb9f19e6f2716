"""Latency and quality figures computed from a trace (pure functions).

Latency follows SimulEval's definitions, in seconds of source stream time:
- ``start_offset``: first translated audio produced − start of source speech;
- ``end_offset``: end of the translated audio laid back to back (each chunk starts when it
  was produced or right after the previous one) − end of source speech;
- text start/end offsets: the same for committed target text;
- AL and LAAL on committed target words (delay of word *i* = stream time it was committed);
- NE, normalized erasure: target words shown and later taken back, per final word.
Quality: WER (jiwer) of the source captions and BLEU (sacrebleu) of the committed target text,
both after lowercasing and stripping punctuation (the references are normalized that way).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "percentile",
    "normalize_text",
    "speech_span",
    "latency_scores",
    "end_offset_split",
    "end_offset_parts",
    "laid_back_to_back",
    "average_lagging",
    "normalized_erasure",
    "final_texts",
    "wer",
    "corpus_bleu",
    "sentence_bleu",
    "percentiles",
]

_NON_WORD = re.compile(r"[^\w\s']+", re.UNICODE)


def normalize_text(text: str) -> str:
    """Lowercase, strip punctuation and collapse spaces (how references are compared)."""
    text = _NON_WORD.sub(" ", text.casefold()).replace("'", "")
    return " ".join(text.split())


def speech_span(records: Sequence[dict[str, Any]]) -> tuple[float, float] | None:
    """(start of the first utterance, end of the last voiced audio) from VAD events."""
    starts = [r["audio_t"] for r in records if r["event"] == "vad.start"]
    ends = [r["audio_t"] for r in records if r["event"] == "vad.end"]
    if not starts:
        return None
    return min(starts), max(ends) if ends else max(starts)


def final_texts(records: Sequence[dict[str, Any]]) -> tuple[str, str]:
    """The committed source and target text of the whole stream, utterances in order."""
    source: dict[int, str] = {}
    target: dict[int, str] = {}
    for r in records:
        if r["event"].startswith("asr."):
            source[r["utterance"]] = r["committed"]
        elif r["event"].startswith("mt."):
            target[r["utterance"]] = r["committed"]
    join = lambda parts: " ".join(parts[k] for k in sorted(parts) if parts[k])  # noqa: E731
    return join(source), join(target)


def _target_word_delays(records: Sequence[dict[str, Any]]) -> list[float]:
    delays: list[float] = []
    counts: dict[int, int] = {}
    for r in sorted((r for r in records if r["event"] == "mt.commit"),
                    key=lambda r: (r["utterance"], r["revision"])):
        n = len(r["committed"].split())
        before = counts.get(r["utterance"], 0)
        if n > before:
            delays.extend([r["stream_t"]] * (n - before))
            counts[r["utterance"]] = n
    return delays


def average_lagging(
    delays: Sequence[float], source_duration: float, reference_length: int | None = None
) -> float | None:
    """SimulEval AL (or LAAL when ``reference_length`` is given), in seconds."""
    if not delays or source_duration <= 0:
        return None
    target_length = len(delays)
    if reference_length is not None:
        target_length = max(target_length, reference_length)
    rate = source_duration / target_length
    total = 0.0
    tau = 0
    for i, delay in enumerate(delays):
        total += delay - i * rate
        tau = i + 1
        if delay >= source_duration:
            break
    return total / tau


def normalized_erasure(records: Sequence[dict[str, Any]], side: str = "mt") -> float | None:
    """Words displayed then changed, over final words (Arivazhagan et al. 2020)."""
    shown: dict[int, list[str]] = {}
    erased = 0
    for r in records:
        if not r["event"].startswith(side + "."):
            continue
        words = (r["committed"] + " " + r["tentative"]).split()
        before = shown.get(r["utterance"], [])
        common = 0
        for a, b in zip(before, words, strict=False):
            if normalize_text(a) != normalize_text(b):
                break
            common += 1
        erased += len(before) - common
        shown[r["utterance"]] = words
    final = sum(len(w) for w in shown.values())
    return erased / final if final else None


def latency_scores(
    records: Sequence[dict[str, Any]],
    source_duration: float,
    reference_words: int | None = None,
) -> dict[str, float | None]:
    """StartOffset, EndOffset, AL, LAAL and flicker of one trace."""
    span = speech_span(records)
    audio = [r for r in records if r["event"] == "tts.audio"]
    commits = [r for r in records if r["event"] == "mt.commit" and r["committed"]]
    out: dict[str, float | None] = {
        "start_offset": None, "end_offset": None,
        "text_start_offset": None, "text_end_offset": None,
    }
    if span is not None:
        speech_start, speech_end = span
        if audio:
            out["start_offset"] = min(r["stream_t"] for r in audio) - speech_start
            out["end_offset"] = max(r["audio_start"] + r["audio_dur"] for r in audio) - speech_end
        if commits:
            out["text_start_offset"] = min(r["stream_t"] for r in commits) - speech_start
            out["text_end_offset"] = max(r["stream_t"] for r in commits) - speech_end
    delays = _target_word_delays(records)
    out["al"] = average_lagging(delays, source_duration)
    out["laal"] = average_lagging(delays, source_duration, reference_words)
    out["ne"] = normalized_erasure(records)
    return out


def laid_back_to_back(chunks: Iterable[tuple[float, float]]) -> list[float]:
    """Where each speech chunk ``(arrived, seconds)`` ends when it is played as it arrives,
    right after the chunk before it (the output timeline every EndOffset is measured on)."""
    ends: list[float] = []
    cursor = 0.0
    for arrived, seconds in chunks:
        cursor = max(cursor, arrived) + seconds
        ends.append(cursor)
    return ends


def end_offset_parts(
    laid: Sequence[tuple[float, float, float]], speech_end: float,
    mine: Sequence[bool] | None = None,
) -> tuple[float, float, float] | None:
    """Where an EndOffset goes, as ``(queued, late, silence)`` seconds that add up to it (when
    it is positive): ``laid`` is every chunk as ``(arrived, laid end, seconds)`` in arrival
    order; ``mine`` marks the chunks of the speech whose end ``speech_end`` is (default all).
    *queued*: speech of any chunk already received at ``speech_end`` and still to play then;
    *late*: the marked chunks received only afterwards (committed or synthesized after the
    end); *silence*: the rest, the output idle meanwhile. None without a marked chunk. The one
    definition of the split, for a trace (``end_offset_split``) and a client (``bench load``)."""
    own = [chunk for k, chunk in enumerate(laid) if mine is None or mine[k]]
    if not own:
        return None
    end_offset = max(end for _, end, _ in own) - speech_end
    queued = max([0.0] + [end - speech_end for arrived, end, _ in laid if arrived <= speech_end])
    late = sum((seconds for arrived, _, seconds in own if arrived > speech_end), 0.0)
    return queued, late, max(0.0, end_offset - queued - late)


def end_offset_split(records: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """Where the speech EndOffset goes, from a trace (seconds; None without speech).

    At the end of the source speech (``speech_end``):
    - ``queued_at_end``: speech already produced then that still had to play after it;
    - ``unsynthesized_at_end``: speech of the chunks produced after it (words committed, or
      cut into phrases, only after the speaker stopped);
    - ``silence_after_end``: the rest of the EndOffset, the output silent after the speaker
      stopped (waiting for a commit, a phrase cut or the synthesizer);
    - ``synthesis_after_end``: synthesizer time (wall seconds) of the chunks produced after it;
    - ``text_end_offset``: the last target commit after it.
    ``queued + unsynthesized + silence == end_offset`` (when the EndOffset is positive;
    ``end_offset_parts``).
    """
    out: dict[str, float | None] = {
        "queued_at_end": None, "unsynthesized_at_end": None, "silence_after_end": None,
        "synthesis_after_end": None,
    }
    span = speech_span(records)
    audio = [r for r in records if r["event"] == "tts.audio"]
    if span is None or not audio:
        return out
    speech_end = span[1]
    parts = end_offset_parts([(r["stream_t"], r["audio_start"] + r["audio_dur"], r["audio_dur"])
                              for r in audio], speech_end)
    assert parts is not None  # every chunk is the stream's own
    out["queued_at_end"], out["unsynthesized_at_end"], out["silence_after_end"] = parts
    after = [r for r in audio if r["stream_t"] > speech_end]
    out["synthesis_after_end"] = sum(((r.get("timings") or {}).get("tts", 0.0) for r in after), 0.0)
    return out


def wer(reference: str, hypothesis: str) -> float | None:
    """Word error rate of ``hypothesis`` against ``reference`` (normalized)."""
    import jiwer

    ref = normalize_text(reference)
    if not ref:
        return None
    return float(jiwer.wer(ref, normalize_text(hypothesis)))


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float | None:
    """Corpus BLEU (sacrebleu) over normalized texts."""
    import sacrebleu

    if not hypotheses:
        return None
    return float(
        sacrebleu.corpus_bleu(
            [normalize_text(h) for h in hypotheses], [[normalize_text(r) for r in references]]
        ).score
    )


def sentence_bleu(hypothesis: str, reference: str) -> float:
    """Sentence BLEU (sacrebleu) of one normalized pair."""
    import sacrebleu

    return float(
        sacrebleu.sentence_bleu(normalize_text(hypothesis), [normalize_text(reference)]).score
    )


def percentiles(values: Iterable[float]) -> dict[str, float] | None:
    """p50, p95 and p99 of ``values``."""
    data = sorted(values)
    if not data:
        return None
    return {"p50": percentile(data, 50), "p95": percentile(data, 95),
            "p99": percentile(data, 99), "n": len(data)}


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation between closest ranks (the
    one definition every figure of speechpipe uses); nan for no values."""
    data = sorted(values)
    if not data:
        return math.nan
    position = (len(data) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (position - low)
