"""Word times for Whisper decodes, from cross-attention of the alignment heads on the
encoder output already computed (CTranslate2's ``align`` and faster-whisper's
``find_alignment``, both with DTW): ``word_ends`` for the decodes a request asks them of
(``WhisperRequest.word_times``), and ``source_time`` for the decode program's coverage
recovery (``stages.decode_program``, through ``WhisperEngine.source_time``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from speechpipe.models.whisper.batch_plan import SAMPLE_RATE, Item, Kept
from speechpipe.models.whisper.generate import storage_view
from speechpipe.stages.agreement import normalize_word
from speechpipe.stages.model_api import DecodeResult, WhisperRequest

__all__ = ["align_words", "may_commit", "word_ends", "source_time"]



def align_words(
    model: Any, tokenizer: Any, requests: Sequence[WhisperRequest], encoded: NDArray[np.float32],
    languages: list[tuple[str, float]],
    items: list[Item],
    generated: Sequence[Kept],
    decodes: list[list[DecodeResult]],
) -> bool:
    """Add ``word_ends`` to the decodes whose request asked for them (``model``: the
    CTranslate2 Whisper model, ``tokenizer`` its Hugging Face tokenizer; ``generated``: what
    each item kept, by item): one ``align`` call
    (cross-attention of the alignment heads, DTW) per language and task. Returns whether
    anything was aligned."""
    wanted: dict[tuple[str, str], list[int]] = {}
    for member, item in enumerate(items):
        request = requests[item.row]
        if (item.task.task in request.word_times and generated[member].ids
                and may_commit(request, item.task.task, decodes[item.row])):
            wanted.setdefault((languages[item.row][0], item.task.task), []).append(member)
    for (language, task_name), members in wanted.items():
        rows = [items[m].row for m in members]
        start = [tokenizer.token_to_id(name) for name in (
            "<|startoftranscript|>", f"<|{language}|>", f"<|{task_name}|>")]
        # prefix + new tokens (the context before the sot sequence is not aligned)
        texts = [items[m].prompt[items[m].n_context + 4:] + generated[m].ids
                 for m in members]
        frames = [max(2, len(requests[r].audio) // 160) for r in rows]  # mel frames, 100/s
        results = model.align(storage_view(encoded[rows]), start, texts, frames)
        for member, text, result in zip(members, texts, results, strict=True):
            row, task, n_prefix = items[member].row, items[member].task, items[member].n_prefix
            token_start: dict[int, float] = {}
            for text_index, time_index in result.alignments:
                token_start.setdefault(int(text_index), int(time_index) / 50.0)
            ends = word_ends(tokenizer, text, n_prefix, token_start)
            index = [d.task for d in decodes[row]].index(task.task)
            decode = decodes[row][index]
            words = decode.continuation.split()
            if len(ends) >= len(words):  # cut or suppressed decodes keep a prefix
                decodes[row][index] = replace(
                    decode, word_ends=tuple(ends[: len(words)]))
    return bool(wanted)



def may_commit(request: WhisperRequest, task: str, decodes: list[DecodeResult]) -> bool:
    """Can this decode's continuation commit anything by agreement? Only if it starts
    with a word an earlier hypothesis started with (``align_starts``); else its word
    times would change nothing, and the alignment is skipped."""
    starts = dict(request.align_starts).get(task)
    if not starts:
        return True
    words = next((d.continuation.split() for d in decodes if d.task == task), [])
    return bool(words) and normalize_word(words[0]) in starts



def word_ends(tokenizer: Any, text: list[int], n_prefix: int,
              token_start: dict[int, float]) -> list[float]:
    """End time of each continuation word: where the token after its last one starts
    (the end-of-text token for the last word). A word starts at a token with a leading
    space; tokens before the first such one are glued to the prefix."""
    starts = [i for i in range(n_prefix, len(text))
              if (tokenizer.id_to_token(text[i]) or "").startswith("\u0120")
              or (i == 0 and n_prefix == 0)]
    ends = []
    last = max(token_start.values(), default=0.0)
    for k in range(len(starts)):
        following = starts[k + 1] if k + 1 < len(starts) else len(text)
        ends.append(token_start.get(following, last))
    return ends



def source_time(
    whisper: Any, n_audio: int, encoded_row: NDArray[np.float32], language: str,
    tokens: list[int], offset: int,
) -> float | None:
    """Seconds into audio of ``n_audio`` samples (encoded: ``encoded_row``) where the word
    of a text (``tokens``) at character ``offset`` starts, by aligning the transcript to the
    audio (cross-attention, as faster-whisper's word timestamps do; ``whisper``:
    faster-whisper's model). None when the alignment cannot place it."""
    from faster_whisper.tokenizer import Tokenizer

    tokenizer = Tokenizer(whisper.hf_tokenizer, True, task="transcribe", language=language)
    view = storage_view(encoded_row[None])
    frames = n_audio * 100 // SAMPLE_RATE  # mel frames (100 a second)
    try:
        words = whisper.find_alignment(tokenizer, [tokens], view, frames)[0]
    except Exception:  # an alignment failure only means no recovery
        return None
    position = -1  # the text is aligned with a leading space
    for word in words:
        position += len(word["word"])
        if position > offset:
            return float(word["start"])
    return None
