"""What is decoded a second time, and how it merges in: pure policies that the decode program
(``stages.decode_program``) runs with the engine's passes (given as callables).

The translation in English (issue 45, ``keep_to_english``): Whisper's ``translate`` task
sometimes transcribes instead; such a translate decode is decoded again with English as the
language token, and once more with nothing forced when the forced prefix is not English
either (``_unforced``).

Coverage recovery (``recover_coverage``, for decodes that commit everything): Whisper's
``translate`` can end its output after a short first sentence ("Merci. Mais ..." ->
"Thank you!") and leave the rest of a long utterance untranslated. When the translation holds
much fewer words than the captions of the same request (``stages.coverage.coverage_gap``),
the captions are aligned to the audio (cross-attention, faster-whisper's ``find_alignment``,
on the encoder output already computed), and the audio from the first uncovered source
sentence on is translated on its own, continuing the translation's unfinished sentence if
any. Its words are appended to the translate decode (``recovered`` counts the extra decodes;
``coverage_short`` says the translation is still short after them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from speechpipe.stages.coverage import classify_utterance, coverage_gap
from speechpipe.stages.model_api import DecodeResult, DecodeTask, WhisperRequest
from speechpipe.stages.target_language import in_language

__all__ = ["joined_text", "reads_as_english", "keep_to_english", "recover_coverage"]

SAMPLE_RATE = 16_000  # the engine's audio rate


def joined_text(prefix: str, decode: DecodeResult, added: str = "") -> str:
    """The full text of a side: forced prefix, glued fragment, continuation, additions."""
    text = f"{prefix.strip()}{decode.glued} {decode.continuation}".strip()
    return f"{text} {added}".strip() if added else text


def reads_as_english(prefix: str, decode: DecodeResult, source: str) -> bool | None:
    """Is a translate decode English rather than ``source``? Its new words alone when they
    are enough to judge (a committed English prefix would outweigh them), else the whole
    text; None: too short to say."""
    judged = in_language(decode.continuation, "en", [source])
    return judged if judged is not None else in_language(joined_text(prefix, decode), "en",
                                                         [source])


def keep_to_english(request: WhisperRequest, language: str, decodes: list[DecodeResult],
                    decode: Callable[[WhisperRequest], DecodeResult]) -> list[DecodeResult]:
    """A translate decode whose text reads as the source language (Whisper transcribed
    instead of translating) is decoded again with ``<|en|>`` as the language token; if
    that is not English either, it is marked ``wrong_language`` (never spoken).
    ``decode`` runs a request and returns its first decode (an engine pass of its own)."""
    index = next((i for i, d in enumerate(decodes) if d.task == "translate"), None)
    if index is None:
        return decodes
    first = decodes[index]
    task = next(t for t in request.tasks if t.task == "translate")
    if reads_as_english(task.prefix, first, language) is not False:
        return decodes
    again = decode(replace(
        request, language="en", tasks=(task,), check_target_language=False,
        recover_coverage=False, word_times=tuple(t for t in request.word_times
                                                  if t == "translate")))
    redone = replace(again, redecoded=True)
    if reads_as_english(task.prefix, redone, language) is False:
        redone = _unforced(request, task, language, decode) or replace(
            redone, wrong_language=True)
    out = list(decodes)
    out[index] = redone
    return out


def _unforced(request: WhisperRequest, task: DecodeTask, language: str,
              decode: Callable[[WhisperRequest], DecodeResult]) -> DecodeResult | None:
    """When the forced prefix is itself not English (a half-heard opening committed as
    the translation: "La" for "La parole est à ..."), Whisper forced through it goes on in
    the source language at every decode, and the utterance's translation would be lost. The
    translation is then decoded once more with nothing forced; its words follow the prefix
    (already said). None: the prefix reads as English, or this decode is not English either."""
    if not task.prefix or in_language(task.prefix, "en", [language]) is True:
        return None
    loose = decode(replace(
        request, language="en", tasks=(replace(task, prefix=""),),
        check_target_language=False, recover_coverage=False,
        word_times=tuple(t for t in request.word_times if t == "translate")))
    if reads_as_english("", loose, language) is False:
        return None
    return replace(loose, redecoded=True)


def recover_coverage(
    request: WhisperRequest, language: str, decodes: list[DecodeResult],
    source_time: Callable[[int, str, int], float | None],
    decode: Callable[[WhisperRequest], DecodeResult],
) -> list[DecodeResult]:
    """Translate the audio the translate decode left out (module docs); at most
    ``request.max_recoveries`` extra decodes, each on the audio after the last cut.
    ``source_time(audio_from, text, offset)``: seconds into ``request.audio[audio_from:]``
    where the word of ``text`` at character ``offset`` starts, None when the alignment
    cannot place it; ``decode`` runs a request and returns its first decode (an engine pass
    of its own)."""
    by_task = {d.task: i for i, d in enumerate(decodes)}
    if "transcribe" not in by_task or "translate" not in by_task:
        return decodes
    prefixes = {t.task: t.prefix for t in request.tasks}
    source = joined_text(prefixes["transcribe"], decodes[by_task["transcribe"]])
    target_decode = decodes[by_task["translate"]]
    if target_decode.suppressed:
        return decodes
    added = ""
    recovered = 0
    audio_from = 0  # samples: where the source text's audio starts
    source_rest = source
    for _ in range(request.max_recoveries):
        target = joined_text(prefixes["translate"], target_decode, added)
        gap = coverage_gap(source, target, request.coverage_min_ratio,
                           request.coverage_min_words)
        if gap is None:
            break
        offset, fragment = gap
        offset -= len(source) - len(source_rest)  # into the text still to be placed
        if offset <= 0:
            break
        start = source_time(audio_from, source_rest, offset)
        if start is None:
            break
        cut = audio_from + max(0, int((start - 0.1) * SAMPLE_RATE))
        if len(request.audio) - cut < int(0.5 * SAMPLE_RATE):
            break
        tail = WhisperRequest(
            audio=request.audio[cut:], language=language,
            tasks=(DecodeTask("translate", fragment),), beam_size=request.beam_size,
            tokens_per_second=request.tokens_per_second,
            no_speech_threshold=request.no_speech_threshold,
            logprob_threshold=request.logprob_threshold,
        )
        extra = decode(tail)
        recovered += 1
        if extra.suppressed or not extra.continuation:
            break
        added = " ".join(p for p in (added, extra.glued, extra.continuation) if p)
        audio_from = cut
        source_rest = source_rest[offset:]
    if not recovered:
        return decodes
    continuation = " ".join(p for p in (target_decode.continuation, added) if p)
    target = joined_text(prefixes["translate"], target_decode, added)
    short = classify_utterance(source, target, request.coverage_min_ratio,
                               request.coverage_min_words) == "dropped"
    out = list(decodes)
    out[by_task["translate"]] = replace(
        target_decode, continuation=continuation, recovered=recovered, coverage_short=short)
    return out
