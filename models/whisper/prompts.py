"""Whisper's decoder prompts, built from the tokenizer alone (no model, no CTranslate2).

A decode's prompt is laid out as::

    [<|startofprev|> context...] <|startoftranscript|> <|lang|> <|task|> <|notimestamps|> prefix...

- the context (``DecodeTask.context``: text committed before the window, its audio gone) is
  read once, never forced; every task of a request gets the same, canonical number of its
  newest tokens (``context_ids``), so decodes batch independently of their batch;
- the forced prefix (``DecodeTask.prefix``: the window's committed text) follows the task
  tokens; CTranslate2 returns it as the first tokens of the sequence (``Prompt.n_prefix``);
- a restricted decoder (``models.whisper.vocab``) has ids of its own: the prompt is spelled
  with its kept tokens (``WhisperPrompts.prompts``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from speechpipe.models.whisper.batch_plan import CONTEXT_BUCKET_TOKENS, Prompt
from speechpipe.stages.model_api import WhisperRequest

if TYPE_CHECKING:
    from speechpipe.models.whisper.vocab import RestrictedVocabulary

__all__ = ["WHISPER_LANGUAGES", "SPECIAL_TOKENS", "Tokenizer", "WhisperPrompts"]

# Whisper's language codes (tokenizer order). Used to validate --source-lang.
WHISPER_LANGUAGES = (
    "en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no "
    "th ur hr bg lt la mi ml cy sk te fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw "
    "gl mr pa si km sn yo so af oc ka be tg sd gu am yi lo uz fo ht ps tk nn mt sa lb my bo tl "
    "mg as tt haw ln ha ba jw su yue"
).split()

SPECIAL_TOKENS = (
    "<|startoftranscript|>", "<|transcribe|>", "<|translate|>", "<|notimestamps|>",
    "<|endoftext|>", "<|startofprev|>",
)


class Tokenizer(Protocol):
    """What prompts need of a Hugging Face ``tokenizers.Tokenizer`` (faster-whisper's
    ``hf_tokenizer``)."""

    def encode(self, sequence: str, add_special_tokens: bool = ...) -> Any: ...  # has .ids

    def token_to_id(self, token: str) -> int | None: ...


class WhisperPrompts:
    """The prompt ids of Whisper decodes, for one tokenizer."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.special = {name: self.token_id(name) for name in SPECIAL_TOKENS}
        self.eot = self.special["<|endoftext|>"]

    def token_id(self, token: str) -> int:
        """The id of a special token (``ValueError`` when the tokenizer has none)."""
        found = self.tokenizer.token_to_id(token)
        if found is None:
            raise ValueError(f"the Whisper tokenizer has no {token} token")
        return found

    def languages(self) -> tuple[str, ...]:
        """The codes of ``WHISPER_LANGUAGES`` this tokenizer has a language token for."""
        return tuple(lang for lang in WHISPER_LANGUAGES
                     if self.tokenizer.token_to_id(f"<|{lang}|>") is not None)

    def text_ids(self, text: str) -> list[int]:
        """The ids of ``text`` as Whisper continues it (a leading space; none when blank)."""
        return (self.tokenizer.encode(" " + text.strip(), add_special_tokens=False).ids
                if text.strip() else [])

    def sot(self, language: str, task: str) -> list[int]:
        """``<|startoftranscript|> <|language|> <|task|> <|notimestamps|>``."""
        return [self.special["<|startoftranscript|>"], self.token_id(f"<|{language}|>"),
                self.special[f"<|{task}|>"], self.special["<|notimestamps|>"]]

    def context_ids(self, request: WhisperRequest) -> dict[str, list[int]]:
        """Per task, the ``<|startofprev|>`` tokens of its context. Every task of a request
        gets the same, canonical count (a multiple of ``CONTEXT_BUCKET_TOKENS``, at most
        ``max_context_tokens``; the newest tokens are kept), decided by the request alone,
        so its decodes batch with each other and with any request of the same count, and
        the result does not depend on the batch."""
        contexts = {t.task: self.text_ids(t.context) for t in request.tasks}
        available = min((len(ids) for ids in contexts.values()), default=0)
        count = min(available, max(0, request.max_context_tokens))
        count -= count % CONTEXT_BUCKET_TOKENS
        if count <= 0:
            return {task: [] for task in contexts}
        return {task: [self.special["<|startofprev|>"], *ids[-count:]]
                for task, ids in contexts.items()}

    def prompt(self, language: str, task: str, prefix: str,
               context: Sequence[int] = ()) -> tuple[list[int], int]:
        """The ids of one decode's prompt and how many of them are the forced prefix."""
        prefix_ids = self.text_ids(prefix)
        return [*context, *self.sot(language, task), *prefix_ids], len(prefix_ids)

    def prompts(self, request: WhisperRequest, language: str,
                vocabulary: RestrictedVocabulary | None) -> list[Prompt]:
        """One prompt per task of ``request``; with a ``vocabulary``, the full ids spelled
        with its kept tokens."""
        contexts = self.context_ids(request)
        prompts = []
        for task in request.tasks:
            context = contexts[task.task]
            prompt, n_prefix = self.prompt(language, task.task, task.prefix, context)
            if vocabulary is not None:  # full ids, spelled with kept tokens
                n_head = len(prompt) - n_prefix
                head = vocabulary.spelled(prompt[:n_head])
                tail = vocabulary.spelled(prompt[n_head:])
                prompt, n_prefix = head + tail, len(tail)
                context = head[: len(head) - len(self.sot(language, task.task))]
            prompts.append(Prompt(task, prompt, n_prefix, len(context)))
        return prompts
