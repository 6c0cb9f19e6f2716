"""One decoder interface: CTranslate2's Whisper ``generate`` and the native prefill decoder
(``models.whisper.prefill``) behind one call and one result type.

A group of decodes (``models.whisper.batch_plan.GroupKey``: the same beam, context length,
``max_length`` and prefix tokens read at once) is one ``Decoder.generate`` call; each item
comes back as ``Generated``: every id after the prompt's sot sequence (the forced prefix
first), the sequence's cumulative log-probability, and the no-speech probability.

- ``Ct2Decoder``: ``model.generate`` (every forced token a decoder step, the full vocabulary);
- ``NativeDecoder``: a ``_ct2_prefill.PrefillDecoder`` of this thread (``NativePrefill``),
  which reads ``prefilled`` prefix tokens in the prompt pass, and may score a restricted
  vocabulary (ids in and out stay the full vocabulary's). With nothing read at once and no
  restriction it returns ``generate``'s ids and scores (checked at warm-up:
  ``prefill.prefill_disagreement``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

__all__ = ["Generated", "Decoder", "Ct2Decoder", "NativeDecoder", "step_budget",
           "decoder_steps", "storage_view"]


def storage_view(array: NDArray[np.float32]) -> Any:  # -> ctranslate2.StorageView
    """``array`` as CTranslate2 reads it (contiguous: a copy only when it is not)."""
    import ctranslate2

    return ctranslate2.StorageView.from_array(np.ascontiguousarray(array))


@dataclass(frozen=True, slots=True)
class Generated:
    """One item of a ``generate`` call."""
    ids: list[int]  # the forced prefix, then the new ids (end-of-text and all)
    score: float | None  # cumulative log-probability; None when the decoder gave none
    no_speech_prob: float


class Decoder(Protocol):
    """What decodes one group of items on one encoder output each."""

    native: bool  # the native decoder (its CPU time is counted apart: ``native_cpu_s``)

    def generate(self, encoded: NDArray[np.float32], prompts: Sequence[list[int]], *,
                 beam_size: int, n_context: int, max_length: int,
                 prefilled: int) -> list[Generated]:
        """``encoded``: one encoder output per prompt ``[items, positions, dims]``; each
        prompt: ``n_context`` context tokens, the sot sequence, the forced prefix (of which
        ``prefilled`` tokens are read in the prompt pass); ``max_length`` is generate's."""
        ...


def step_budget(max_length: int, n_context: int, prefilled: int) -> int:
    """The decoder steps a call may run: ``generate``'s stop at ``max_length`` (a sequence
    ends at ``min(L // 2, L - context - 3)`` tokens: ``batch_plan.generate_max_length``),
    less the prefix tokens read in the prompt pass."""
    return min(max_length // 2, max_length - n_context - 3) - prefilled


def decoder_steps(sequences: Sequence[Generated], prefilled: int, budget: int) -> int:
    """The decoder steps a call ran: its longest item's (one step per token it did not read
    in the prompt pass, plus the end-of-text step), the step budget at most."""
    return min(max(len(s.ids) - prefilled + 1 for s in sequences), budget)


class Ct2Decoder:
    """CTranslate2's own Whisper ``generate`` (``model``: ``ctranslate2.models.Whisper``)."""

    native = False

    def __init__(self, model: Any) -> None:
        self.model = model

    def generate(self, encoded: NDArray[np.float32], prompts: Sequence[list[int]], *,
                 beam_size: int, n_context: int, max_length: int,
                 prefilled: int) -> list[Generated]:
        outputs = self.model.generate(
            storage_view(encoded), list(prompts), beam_size=beam_size, max_length=max_length,
            return_scores=True, return_no_speech_prob=True, suppress_blank=False)
        return [Generated(list(o.sequences_ids[0]), o.scores[0] if o.scores else None,
                          float(o.no_speech_prob)) for o in outputs]


class NativeDecoder:
    """The native prefill decoder (``decoder``: a ``_ct2_prefill.PrefillDecoder``)."""

    native = True

    def __init__(self, decoder: Any) -> None:
        self.decoder = decoder

    def generate(self, encoded: NDArray[np.float32], prompts: Sequence[list[int]], *,
                 beam_size: int, n_context: int, max_length: int,
                 prefilled: int) -> list[Generated]:
        outputs = self.decoder.generate(
            np.ascontiguousarray(encoded), list(prompts),
            prompt_tokens=n_context + 3 + prefilled, sot_index=n_context,
            beam_size=beam_size, max_steps=step_budget(max_length, n_context, prefilled))
        return [Generated(list(o.ids), o.score, float(o.no_speech_prob)) for o in outputs]
