"""Figures held against each utterance of a clip, computed after the clip's run on the loaded
models (no latency or CPU figure pays for them): utterances short of the offline translation
of their span (``span_coverage``), commit regret against each span's offline decode
(``utterance_regret``) and against the pipeline's own final decode of the whole utterance
(``hindsight_regret``, ``evaluation.hindsight``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np

from speechpipe.evaluation.hindsight import (
    NOISE_PADDINGS_S,
    hindsight_texts,
    utterance_audio_spans,
)
from speechpipe.evaluation.offline import OfflineRun
from speechpipe.evaluation.regret import short_of_offline, utterance_regret_fields, utterance_spans
from speechpipe.session import Pipeline

__all__ = ["span_coverage", "utterance_regret", "hindsight_regret"]


def _ended_utterances(records: list[dict[str, Any]], seconds: float
                      ) -> tuple[dict[int, tuple[float, float]], dict[int, dict[str, Any]],
                                 list[int]]:
    """Each utterance's VAD span, its ``utterance.end`` record, and the numbers of those
    that have both, in order."""
    spans = utterance_spans(records, seconds)
    ends = {r["utterance"]: r for r in records if r["event"] == "utterance.end"}
    return spans, ends, [u for u in sorted(spans) if u in ends]


async def span_coverage(offline: OfflineRun, clip: dict[str, Any], audio: np.ndarray,
                        records: list[dict[str, Any]], seconds: float, target: str
                        ) -> dict[str, Any]:
    """For a clip of several utterances: how many (``utterances_spanned``) were held
    against the offline translation of their own audio span, and how many
    (``utterances_short_of_offline``) have under half its words. After the clip's run, on
    the loaded model (costs the run's figures nothing); nothing for a single utterance."""
    spans = utterance_spans(records, seconds)
    texts = {r["utterance"]: r.get("text") or "" for r in records
             if r["event"] == "utterance.end"}
    numbers = [u for u in sorted(spans) if u in texts]
    if len(numbers) < 2:
        return {}
    offline_texts = await asyncio.to_thread(offline.span_texts, clip, audio,
                                            [spans[u] for u in numbers], target)
    short = sum(1 for u, text in zip(numbers, offline_texts, strict=True)
                if short_of_offline(texts[u], text))
    return {"utterances_spanned": len(numbers), "utterances_short_of_offline": short}


async def utterance_regret(offline: OfflineRun, clip: dict[str, Any], audio: np.ndarray,
                           records: list[dict[str, Any]], seconds: float, target: str
                           ) -> dict[str, Any]:
    """Commit regret per side with each utterance held against the same model's offline
    decode of its own audio span (``regret.utterance_regret_fields``): after the clip's
    run, on the loaded model; the target spans are the ones ``span_coverage`` decodes
    (cached, decoded once). A clip of one utterance is that utterance: its whole-clip
    offline texts serve, with no second decode."""
    spans, ends, numbers = _ended_utterances(records, seconds)
    if not numbers:
        return {}
    out: dict[str, Any] = {}
    for side, field in (("source", "source_text"), ("target", "text")):
        whole = (offline.source_texts if side == "source" else offline.texts).get(clip["id"])
        if len(numbers) == 1 and whole is not None:
            offline_texts = [whole]
        else:
            offline_texts = await asyncio.to_thread(offline.span_texts, clip, audio,
                                                    [spans[u] for u in numbers], target, side)
        out.update(utterance_regret_fields(
            [(ends[u].get(field) or "", text)
             for u, text in zip(numbers, offline_texts, strict=True)], side))
    return out


async def hindsight_regret(pipeline: Pipeline, clip: dict[str, Any], audio: np.ndarray,
                           records: list[dict[str, Any]], seconds: float, target: str,
                           noise_paddings_s: Sequence[tuple[float, float]] = NOISE_PADDINGS_S,
                           ) -> dict[str, Any]:
    """Commit regret per side with each utterance's committed words held against the
    pipeline's own final decode of that whole utterance with nothing forced
    (``evaluation.hindsight``): the words committed before the audio settled them, without
    the wording a different decoder set-up gives. After the clip's run, on the loaded
    engine. The utterance's language: the one its trace reports, else the clip's. An
    utterance whose final decode says nothing on a side is not judged on that side
    (``hindsight_unjudged_{side}``). Beside it the yardstick's own noise
    (``hindsight_noise_regret_{side}``): the same decode with each of ``noise_paddings_s``
    (silence before, after; ``hindsight.NOISE_PADDINGS_S``) held against it as committed
    words are."""
    spans, ends, numbers = _ended_utterances(records, seconds)
    if not numbers:
        return {}
    options = pipeline.options.asr
    widened = utterance_audio_spans(spans, options.pre_roll_s, seconds)
    translate = target != clip["lang"]
    by_language: dict[str, list[int]] = {}
    for u in numbers:
        by_language.setdefault(ends[u].get("language") or clip["lang"], []).append(u)

    async def decode(padding_s: tuple[float, float]) -> dict[int, tuple[str, str]]:
        texts: dict[int, tuple[str, str]] = {}
        for language, members in by_language.items():
            decoded = await asyncio.to_thread(hindsight_texts, pipeline.engine, audio,
                                              [widened[u] for u in members], language,
                                              options, translate, padding_s)
            texts.update(zip(members, decoded, strict=True))
        return texts

    texts = await decode((0.0, 0.0))
    padded = [await decode(padding) for padding in noise_paddings_s]
    out: dict[str, Any] = {"hindsight_source_text": " ".join(texts[u][0] for u in numbers)}
    if translate:
        out["hindsight_target_text"] = " ".join(texts[u][1] for u in numbers)
    for side, field, index in (("source", "source_text", 0), ("target", "text", 1)):
        if side == "target" and not translate:
            continue
        # an utterance the final decode says nothing for (silence to it, or a translation
        # still in the source language) has no yardstick: counted apart, not as regret
        judged = [u for u in numbers if texts[u][index].strip()]
        out[f"hindsight_unjudged_{side}"] = len(numbers) - len(judged)
        out.update(utterance_regret_fields(
            [(ends[u].get(field) or "", texts[u][index]) for u in judged], side,
            name="hindsight"))
        if padded:
            out.update(utterance_regret_fields(
                [(other[u][index], texts[u][index]) for other in padded for u in judged],
                side, name="hindsight_noise"))
    return out


