"""Batch planning for Whisper decodes: which decodes of one encode bucket share a
``generate`` call. Pure: the prompts come in as token ids, no model, no tokenizer
(``models.whisper.engine`` builds them and runs the plan).

- CTranslate2 requires the same number of special tokens after ``<|startoftranscript|>`` in
  a batch (and the same number of ``<|startofprev|>`` context tokens before it: context
  lengths are canonical, multiples of ``CONTEXT_BUCKET_TOKENS`` decided per request); the
  forced text prefixes may differ in length (identical ids and scores batched and alone).
- ``max_length`` is one value per ``generate`` call and part of the result (the score of a
  capped sequence counts what it generated): it is decided per request, the largest its
  tasks need (``generate_max_length``, exact: no token generated past the cap), rounded up
  to ``MAX_LENGTH_STEP``; requests share a call when their values match.
- A restricted decoder (``models.whisper.vocab``) is one per language and word count, and
  the prefix tokens read in the prompt pass (``models.whisper.prefill``) are decided per request:
  both are part of the group too.
So a request's results (text and scores) are the same in any batch, and its tasks share one
call. What an item keeps of its call's sequence (``keep``: the new ids within its cap) is
decided by the item alone too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from speechpipe.models.whisper.generate import Generated
from speechpipe.models.whisper.prefill import prefill_text_tokens
from speechpipe.stages.model_api import DecodeTask, WhisperRequest

__all__ = ["SAMPLE_RATE", "MAX_LENGTH_STEP", "CONTEXT_BUCKET_TOKENS", "generate_max_length",
           "new_tokens", "Prompt", "Item", "GroupKey", "BatchPlan", "plan_batch", "Kept", "keep"]

SAMPLE_RATE = 16_000
MAX_LENGTH_STEP = 4  # max_length granularity: requests within a step share generate calls
CONTEXT_BUCKET_TOKENS = 8  # context lengths are multiples of this (generate needs
# <|startoftranscript|> at the same position in every item of a call)


def generate_max_length(output_tokens: int, context_tokens: int) -> int:
    """The ``max_length`` that lets CTranslate2's Whisper ``generate`` return exactly
    ``output_tokens`` (forced prefix + new) after a prompt holding ``context_tokens`` tokens
    before ``<|startoftranscript|>`` (``<|startofprev|>`` included). Measured with
    CTranslate2 4.x: a sequence stops at ``min(L // 2, L - context_tokens - 3)`` tokens, so
    asking for more would only make it generate tokens that are cut off (a test checks it)."""
    return min(448, max(2 * output_tokens, output_tokens + context_tokens + 3))


def new_tokens(request: WhisperRequest, prefix_tokens: int = 0) -> int:
    """How many tokens a decode of ``request`` may add after its forced prefix: enough
    for the window's audio (``tokens_per_second``), less the prefix's tokens when
    ``cap_by_window`` (they already cover part of it), at most ``max_new_tokens``."""
    tokens = 4 + math.ceil(len(request.audio) / SAMPLE_RATE * request.tokens_per_second)
    if request.cap_by_window:
        tokens = max(4, tokens - prefix_tokens)
    if request.max_new_tokens is not None:
        tokens = min(tokens, request.max_new_tokens)
    return tokens


@dataclass(frozen=True, slots=True)
class Prompt:
    """One task's prompt as its decoder reads it (a restricted decoder's ids already)."""
    task: DecodeTask
    ids: list[int]  # context, sot sequence, forced prefix
    n_prefix: int  # forced prefix tokens (the end of ``ids``)
    n_context: int  # context tokens before the sot sequence (``<|startofprev|>`` included)


@dataclass(frozen=True, slots=True)
class Item:
    """One decode of a bucket call: request ``row``'s ``task`` with its full prompt."""
    row: int
    task: DecodeTask
    prompt: list[int]  # context, sot sequence, forced prefix
    n_prefix: int
    new_tokens: int
    n_context: int
    max_length: int
    prefilled: int = 0  # prefix tokens read in the prompt pass (models.whisper.prefill)


class GroupKey(NamedTuple):
    """What the decodes of one ``generate`` call share."""
    decoder_language: str  # "" for the full vocabulary
    words: int  # the restriction's words per language, 0 for the full vocabulary
    beam_size: int
    n_context: int
    max_length: int
    prefilled: int


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """``items``: one per (request, task), in request then task order; ``groups``: the
    indices into ``items`` of each call, in the order the calls run."""
    items: list[Item]
    groups: dict[GroupKey, list[int]]


def plan_batch(
    requests: Sequence[WhisperRequest], languages: Sequence[str],
    prompts: Sequence[Sequence[Prompt]], restricted: Sequence[bool], prefill: bool,
) -> BatchPlan:
    """Group the decodes of one encode bucket. Per request ``row``: ``languages[row]`` the
    language it decodes, ``prompts[row]`` one prompt per task, ``restricted[row]`` whether
    its decoder has a vocabulary restriction (``request.vocabulary_words`` words); ``prefill``
    whether the native prompt pass is there (``models.whisper.prefill``)."""
    items: list[Item] = []
    groups: dict[GroupKey, list[int]] = {}
    for row, request in enumerate(requests):
        language = languages[row]
        pending = [(p, new_tokens(request, p.n_prefix)) for p in prompts[row]]
        length = max((generate_max_length(p.n_prefix + n, p.n_context) for p, n in pending),
                     default=0)
        length = min(448, -(-length // MAX_LENGTH_STEP) * MAX_LENGTH_STEP)
        words = request.vocabulary_words if restricted[row] else 0
        # prefix tokens read in the prompt pass: decided by the request alone
        prefilled = (prefill_text_tokens([p.n_prefix for p, _ in pending])
                     if prefill and request.prefill else 0)
        for p, n in pending:
            key = GroupKey(language if words else "", words, request.beam_size, p.n_context,
                           length, prefilled)
            groups.setdefault(key, []).append(len(items))
            items.append(Item(row, p.task, p.ids, p.n_prefix, n, p.n_context, length,
                              prefilled))
    return BatchPlan(items, groups)


class Kept(NamedTuple):
    """What an item's decode keeps of its sequence (``keep``)."""
    ids: list[int]  # the new ids within the item's cap, special tokens dropped
    avg_logprob: float
    no_speech_prob: float
    hit_cap: bool  # the item generated its whole cap (the length cap stopped it)
    made: int  # new tokens generated, kept or not


def keep(item: Item, generated: Generated, eot: int) -> Kept:
    """``generated`` (``models.whisper.generate``: the forced prefix, then the new ids) as
    ``item``'s decode keeps it; the average log-probability is over the whole sequence."""
    tokens = generated.ids[item.n_prefix:]  # the forced prefix comes back first
    ids = [i for i in tokens[:item.new_tokens] if i < eot]
    score = generated.score
    avg_logprob = float(score) / max(1, len(generated.ids)) if score is not None else 0.0
    return Kept(ids, avg_logprob, generated.no_speech_prob, len(tokens) >= item.new_tokens,
                len(tokens))
