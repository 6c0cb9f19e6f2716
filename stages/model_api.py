"""What the stages need from the models: the request and result types of ASR and text MT.

The stages (``asr.py``, ``text_mt.py``) build requests and read results; the engines in
``speechpipe.models`` (``models/whisper/engine.py``, ``models/mt/ct2_translator.py``) accept
and return them. Defining them here keeps imports flowing downward: models import stages,
never the reverse. A Whisper request is decoded by the decode program
(``stages.decode_program``) over the engine's one pass per encode bucket (``WhisperPass``);
both run a batch bucket by bucket (``run_by_bucket``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from speechpipe.stages.coverage import MIN_RATIO, MIN_SOURCE_WORDS

__all__ = [
    "DecodeKind",
    "DecodeTask",
    "WhisperRequest",
    "DecodeResult",
    "WhisperResult",
    "WhisperPass",
    "run_by_bucket",
    "TextMtRequest",
    "TextMtResult",
]


class DecodeKind(enum.StrEnum):
    """Why the ASR stage decodes a window (``stages.utterance``, ``stages.asr``). A ``str``
    enum: each member equals its string (``DecodeKind.FINAL == "final"``), so code that
    compares kinds as strings keeps working."""

    FINAL = "final"  # the utterance ended: commit everything
    PAUSE = "pause"  # a pause inside the utterance: commit up to it
    CUT = "cut"  # a long window without a pause: commit, the next window starts here
    HUSH = "hush"  # a short silence, shorter than a pause: decoded in flight, like a partial
    PARTIAL = "partial"  # a tentative update while the speaker goes on (in flight)


@dataclass(frozen=True, slots=True)
class DecodeTask:
    """One decode on the shared encoder output: ``transcribe`` or ``translate`` (to English),
    continuing ``prefix`` (the window's committed text, forced) after ``context`` (text
    committed before the window)."""

    task: str
    prefix: str = ""
    # committed text of earlier windows (its audio is no longer in the request): given to
    # Whisper as ``<|startofprev|>`` context, one forward pass, never forced or re-decoded
    context: str = ""


@dataclass(frozen=True, slots=True)
class WhisperRequest:
    """One ASR request: the utterance's audio and the decodes to run on it."""
    audio: NDArray[np.float32]  # 16 kHz mono, the utterance's current window
    language: str | None  # None: detect
    tasks: tuple[DecodeTask, ...]
    beam_size: int = 1
    tokens_per_second: float = 7.0
    max_new_tokens: int | None = None  # cap for partial decodes (they only need the next words)
    no_speech_threshold: float = 0.6
    logprob_threshold: float = -1.0
    partial: bool = False  # a tentative update: a shared worker may supersede it, never a final
    # translate audio the translation left out (the decode program: stages.decode_program)
    recover_coverage: bool = False
    coverage_min_ratio: float = MIN_RATIO  # target/source words below this: left out
    coverage_min_words: int = MIN_SOURCE_WORDS  # shorter captions are never judged
    max_recoveries: int = 2  # extra translate decodes per request at most
    word_times: tuple[str, ...] = ()  # tasks whose continuation words get aligned end times
    # per task in ``word_times``: align only a continuation whose first word (normalized:
    # lowercase, no punctuation) is one of these, the only ones that can commit (empty:
    # always align)
    align_starts: tuple[tuple[str, frozenset[str]], ...] = ()
    max_context_tokens: int = 32  # at most this many tokens of ``DecodeTask.context``
    # partials: the new-token cap also subtracts the forced prefix's tokens (the words of the
    # window already committed), so a partial stops about where its audio ends
    cap_by_window: bool = False
    # decode with the output layer of the language's and English's most frequent words,
    # this many per language (``models.whisper.vocab``); 0: the full vocabulary
    vocabulary_words: int = 0
    # read most of the forced prefix in the prompt pass (models.whisper.prefill), when the native
    # decoder is built; the same results as generate's step-by-step forcing, less work
    prefill: bool = False
    # partials: cut a continuation that starts its sentence over (``cut_restart``)
    restart_guard: bool = False
    # cut a restatement of the forced sentence, or a copy the length cap stopped
    # (``cut_forced_restatement``, ``cut_capped_restatement``)
    restatement_guard: bool = True
    # check that the translation is English, not the source language transcribed (Whisper's
    # translate task sometimes transcribes); one that is not is decoded again with English
    # as the language token, and marked ``wrong_language`` when that fails too
    check_target_language: bool = False
    # with ``language`` None: the languages the detection chooses among (empty: all)
    detect_among: frozenset[str] = frozenset()
    # with ``language`` given: detect the language anyway (``WhisperResult.language_probs``)
    # and still decode in ``language``: a session's kept language watched for a switch
    detect_too: bool = False
    # a partial of an utterance with nothing committed yet (its first words): a shared
    # worker serves it as urgently as a final, ahead of partials that only refresh
    # tentative text (``models.workers.batching.decode_deadline_s``); the decode itself is the same
    opening: bool = False


@dataclass(frozen=True, slots=True)
class DecodeResult:
    """One decode's continuation and its confidence figures."""
    task: str
    continuation: str  # text after the forced prefix
    avg_logprob: float
    no_speech_prob: float
    glued: str = ""  # leading text with no space before it (e.g. "," after the prefix)
    suppressed: bool = False  # dropped by the no-speech guard
    cut: bool = False  # shortened by the loop guard
    truncated: bool = False  # stopped by the length cap, not by the model
    guarded: bool = False  # words dropped by the commit guard (stages.faithfulness)
    recovered: int = 0  # extra decodes that translated audio the first decode left out
    coverage_short: bool = False  # still much shorter than the captions after recovery
    # per continuation word (``continuation.split()``): where in the audio it ends, seconds
    # from the request's audio start (Whisper's alignment heads); empty when not asked for
    word_ends: tuple[float, ...] = ()
    wrong_language: bool = False  # a translation still not in English after a re-decode
    redecoded: bool = False  # decoded again with English as the language token


@dataclass(frozen=True, slots=True)
class WhisperResult:
    """The detected language and every decode of one request, with timings."""
    language: str
    language_prob: float
    decodes: tuple[DecodeResult, ...]
    encode_s: float
    decode_s: float
    timings: dict[str, float] = field(default_factory=dict)
    batch_requests: int = 1  # requests that shared this request's encoder bucket in the call
    # the detection's most likely languages, most likely first, summing to at most 1 (with
    # the request's ``detect_among``: those only, renormalized over them); empty: the
    # language was given
    language_probs: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class WhisperPass:
    """A request's result after one engine pass (its decodes as generated, guarded and
    aligned, no second decodes), and the encoder output it was decoded on ``[positions,
    dims]``, which the decode program aligns against (coverage recovery)."""
    result: WhisperResult
    encoder_output: NDArray[np.float32]


_Request = TypeVar("_Request")
_Result = TypeVar("_Result")


def run_by_bucket(
    requests: Sequence[_Request], bucket: Callable[[_Request], int],
    run: Callable[[list[_Request]], Sequence[_Result]],
) -> list[_Result | Exception]:
    """Run ``requests`` one encode ``bucket`` at a time (``run``: a bucket's requests, one
    result each). ``results[i]`` is request i's result, or the exception that failed it: a
    failing bucket is run again request by request, so an error reaches only the request
    that caused it."""
    buckets: dict[int, list[int]] = {}
    for index, request in enumerate(requests):
        buckets.setdefault(bucket(request), []).append(index)
    results: list[_Result | Exception | None] = [None] * len(requests)
    for indices in buckets.values():
        group = [requests[i] for i in indices]
        try:
            outcomes: list[_Result | Exception] = list(run(group))
        except Exception as exc:
            outcomes = [exc] if len(group) == 1 else [_alone(run, r) for r in group]
        for index, outcome in zip(indices, outcomes, strict=True):
            results[index] = outcome
    return [r for r in results if r is not None]


def _alone(run: Callable[[list[_Request]], Sequence[_Result]],
           request: _Request) -> _Result | Exception:
    try:
        return run([request])[0]
    except Exception as exc:
        return exc


@dataclass(frozen=True, slots=True)
class TextMtRequest:
    """Translate ``source_text``, forcing the output to start with ``target_prefix``."""

    source_text: str
    source_lang: str
    target_lang: str
    target_prefix: str = ""
    beam_size: int = 1
    # at most this many tokens after the forced prefix (0: only the translator's length
    # cap): an open segment's update, of which only the next few words can be agreed on
    # (``text_mt.open_new_tokens``); a word the cap may have cut is left out of the result
    max_new_tokens: int = 0
    # a look-ahead request (``text_mt.lookahead``): only the head its continuation shares
    # with this other request's is used, so a translator that runs that one first may stop
    # this one a token past that one's continuation; others decode to ``max_new_tokens``
    lookahead_of: TextMtRequest | None = None


@dataclass(frozen=True, slots=True)
class TextMtResult:
    """``text`` is the whole translation as the tokenizer decodes it (prefix included);
    ``continuation`` is what follows the forced prefix, without its leading space.

    ``joins_prefix`` is true when the model went on *inside* the prefix's last word (the first
    new piece has no word-boundary marker), e.g. prefix ``Hal`` + ``lo``. Token counts measure
    the work done: source tokens encoded, prefix tokens forced, new tokens generated.
    """

    text: str
    continuation: str
    joins_prefix: bool = False
    source_tokens: int = 0
    prefix_tokens: int = 0
    generated_tokens: int = 0
