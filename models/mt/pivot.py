"""Two text-MT models in a row through English: source -> en -> target (``--mt auto``).

The English in the middle is translated whole on each call (no prefix: it is not shown, so
nothing of it needs to stay stable); the target prefix the incremental policy forces applies
to the second hop only, so committed target words are still never contradicted.
"""

from __future__ import annotations

from typing import Any

from speechpipe.models.mt.ct2_worker import Ct2TranslationWorker
from speechpipe.stages.model_api import TextMtRequest, TextMtResult
from speechpipe.stages.text_mt_options import TextMtOptions

__all__ = ["ByLanguage", "PivotTranslation"]

PIVOT_LANGUAGE = "en"


class PivotTranslation:
    """``translate(request)`` through ``first`` (source -> en) then ``second`` (en -> target)."""

    def __init__(self, first: Ct2TranslationWorker, second: Ct2TranslationWorker) -> None:
        self.first = first
        self.second = second

    @property
    def model_id(self) -> str:
        """Both hops' ids: the translation memory keys on it."""
        return f"{self.first.model_id}|{self.second.model_id}"

    async def translate(self, request: TextMtRequest) -> TextMtResult:
        """The source through English to the target (two micro-batched worker calls)."""
        english = await self.first.translate(TextMtRequest(
            request.source_text, request.source_lang, PIVOT_LANGUAGE, "", request.beam_size))
        result = await self.second.translate(TextMtRequest(
            english.text, PIVOT_LANGUAGE, request.target_lang, request.target_prefix,
            request.beam_size, request.max_new_tokens))
        return TextMtResult(
            result.text, result.continuation, result.joins_prefix,
            source_tokens=english.source_tokens + result.source_tokens,
            prefix_tokens=result.prefix_tokens,
            generated_tokens=english.generated_tokens + result.generated_tokens,
        )


class ByLanguage:
    """``translate(request)`` by the request's source language: its own translator where one is
    given (``direct``: a detected language's direct pair, English's own captions), else
    ``pivot`` (Whisper's English to the target). A session with ``--source-lang auto``."""

    def __init__(self, pivot: Any, direct: dict[str, Any]) -> None:
        self.pivot = pivot
        self.direct = direct

    @property
    def model_id(self) -> str:
        """The pivot's id: the translation memory keys on it with the source language."""
        return str(self.pivot.model_id)

    @property
    def languages(self) -> frozenset[str]:
        """The spoken languages translated from their own captions."""
        return frozenset(self.direct)

    def policy(self, base: TextMtOptions) -> TextMtOptions:
        """The pivot backend's policy (all hops of one route are one backend's)."""
        own = getattr(self.pivot, "policy", None)
        return own(base) if callable(own) else base

    async def translate(self, request: TextMtRequest) -> TextMtResult:
        """The request through its language's translator."""
        translator = self.direct.get(request.source_lang, self.pivot)
        result: TextMtResult = await translator.translate(request)
        return result
