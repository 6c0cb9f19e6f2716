"""Text loop guards: pure rules on a decode's words, no model (``models.whisper.engine``
applies them to every decode).

Whisper decodes loop on real clips here. These guards cut a continuation at the first
repeated n-gram run, or at a word that loops inside itself ("2-3-3-4-4-4-4-4-4")
(``cut_repetition``); at a sentence that restates an earlier one (``cut_restatement``); and a
partial's continuation that starts its sentence over is cut there, before agreement can
commit a loop's first words (``cut_restart``). ``guard_words`` runs them in that order;
``guarded_decode`` makes a decode's result of its text (the guards, and the no-speech guard:
a decode whose no-speech probability is high and whose log-probability is low is dropped,
faster-whisper's rule); ``guarded_decodes`` does so for every decode of an engine pass.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from speechpipe.stages.model_api import DecodeResult, DecodeTask, WhisperRequest

__all__ = ["cut_repetition", "cut_restatement", "cut_restart", "guard_words",
           "guarded_decode", "DecodedText", "guarded_decodes", "cut_capped_restatement",
           "cut_forced_restatement",
           "SPOKEN_REPEAT_WORDS",
           "SPOKEN_REPEAT_COPIES"]


def cut_repetition(
    words: Sequence[str], max_ngram: int = 40, context: Sequence[str] = (),
    spoken: Sequence[str] | None = None,
) -> tuple[list[str], bool]:
    """Cut ``words`` before the first immediate repeat of an n-gram that is a decoder's loop,
    not a speaker's repetition (n=1 needs 3 copies).

    Whisper on partial audio loops ("the rest of the rest of the rest", or a whole sentence
    twice): the second copy and everything after it are dropped. Speakers repeat themselves
    too ("très très finement", "no, no, no, I said", "er ist, er ist"), and a decode goes on
    after such a repetition where a loop runs on to the length cap. So a short run (at most
    ``SPOKEN_REPEAT_WORDS`` words a copy) followed by other words is kept when the speech has
    one like it: for the captions (``spoken`` None) up to ``SPOKEN_REPEAT_COPIES`` copies;
    for a translation, as many copies as the run the same audio's captions ``spoken`` hold
    (none there: today's rule). ``context`` is the committed text before ``words``: a loop
    that starts there is caught too, but only ``words`` are cut. Returns (kept words,
    whether anything was cut).
    """
    all_words = [*context, *words]
    norm = [w.casefold().strip(".,;:!?¿¡\"'") for w in all_words]
    n_context = len(context)
    n_words = len(norm)
    allowed = SPOKEN_REPEAT_COPIES if spoken is None else _repeat_copies(
        [w.casefold().strip(".,;:!?¿¡\"'") for w in spoken])
    for i in range(n_words):
        if i >= n_context and _loops_within(norm[i]):  # "2-3-3-4-4-4-4-4-4": one "word"
            return list(words[: i - n_context]), True
        for n in range(1, max_ngram + 1):
            if i + 2 * n > n_words:
                break
            if norm[i : i + n] != norm[i + n : i + 2 * n]:
                continue
            if n == 1 and not (i + 3 <= n_words and norm[i + 2] == norm[i]):
                continue
            copies = _copies(norm, i, n)
            span_end = i + copies * n
            if span_end <= n_context:  # the loop lies inside the committed text: not ours
                continue
            went_on = span_end < n_words and norm[span_end] != norm[i]
            if n <= SPOKEN_REPEAT_WORDS and went_on and copies <= allowed:
                continue  # a speaker's repetition: kept
            keep = i + n if n > 1 else i + 1
            return list(words[: max(0, keep - n_context)]), True
    return list(words), False


SPOKEN_REPEAT_WORDS = 3  # a speaker's repetition: copies of at most this many words ...
SPOKEN_REPEAT_COPIES = 3  # ... at most this many times, in the captions


def _copies(norm: Sequence[str], i: int, n: int) -> int:
    """How many times the n-gram at ``i`` repeats back to back from there."""
    copies = 1
    while norm[i + copies * n: i + (copies + 1) * n] == norm[i: i + n]:
        copies += 1
    return copies


def _repeat_copies(norm: Sequence[str]) -> int:
    """The most back-to-back copies of a short n-gram (``SPOKEN_REPEAT_WORDS`` words at most)
    in ``norm`` (1: no repetition): what a translation of that speech may repeat."""
    most = 1
    for i in range(len(norm)):
        for n in range(1, SPOKEN_REPEAT_WORDS + 1):
            if i + 2 * n <= len(norm) and norm[i: i + n] == norm[i + n: i + 2 * n]:
                most = max(most, _copies(norm, i, n))
    return most


_PIECE = re.compile(r"\w+")


def _loops_within(word: str) -> bool:
    """True when the pieces of one space-free word (split at hyphens, dots, slashes, ...) loop:
    one piece 4 times in a row or a longer run 3 times, as Whisper's translation of unclear
    audio can ("2-3-3-4-4-4-4-4-4"), which a loop guard over space-separated words misses."""
    pieces = _PIECE.findall(word)
    for i in range(len(pieces)):
        for n in range(1, (len(pieces) - i) // 3 + 1):
            copies = 4 if n == 1 else 3
            if i + copies * n > len(pieces):
                break
            block = pieces[i: i + n]
            if all(pieces[i + k * n: i + (k + 1) * n] == block for k in range(1, copies)):
                return True
    return False


_SENTENCE_END = (".", "?", "!", "…")


def _normalized(words: Sequence[str]) -> list[str]:
    """Words as the sentence guards compare them: case and edge punctuation dropped."""
    return [w.casefold().strip(".,;:!?¿¡\"'…") for w in words]


PRIOR_OVERLAP = 0.9  # a sentence of an earlier window is restated only by a near copy


def cut_restatement(
    words: Sequence[str], context: Sequence[str] = (), same_start: int = 3,
    min_overlap: float = 0.6, prior: int = 0, prior_overlap: float = PRIOR_OVERLAP,
) -> tuple[list[str], bool]:
    """Cut ``words`` before a sentence that restates an earlier one.

    Greedy Whisper forced to continue an awkward prefix often ends the sentence and says it
    again in other words ("It was buried in the cemetery Forest Lawn. It was buried in the
    Forest Lawn cemetery."): not an immediate repeat, so ``cut_repetition`` misses it. A
    sentence of ``words`` counts as a restatement when its first ``same_start`` words are an
    earlier sentence's first words and at least ``min_overlap`` of its words occur in that
    sentence. ``context`` is the text before ``words`` (committed, never cut). Its first
    ``prior`` words are an earlier window's (the ``<|startofprev|>`` text, whose audio this
    decode does not hear): the decoder cannot be saying that audio again, and speakers open
    sentences alike ("La parole est à madame Annie Louerro. La parole est à madame la
    ministre ..."), so a sentence there counts as restated only by a near copy (Whisper
    copying its prompt): ``prior_overlap`` of the words. Returns (kept words, whether
    anything was cut)."""
    all_words = [*context, *words]
    norm = _normalized(all_words)
    starts = [0] + [i + 1 for i, w in enumerate(all_words[:-1]) if w.endswith(_SENTENCE_END)]
    sentences = [(a, b) for a, b in zip(starts, [*starts[1:], len(all_words)], strict=True)
                 if b - a >= same_start]
    n_context = len(context)
    for k, (start, end) in enumerate(sentences):
        if start < n_context:
            continue
        head = norm[start:start + same_start]
        mine = [w for w in norm[start:end] if w]
        for earlier_start, earlier_end in sentences[:k]:
            if norm[earlier_start:earlier_start + same_start] != head:
                continue
            theirs = set(norm[earlier_start:earlier_end])
            share = prior_overlap if earlier_start < prior else min_overlap
            if sum(w in theirs for w in mine) >= share * len(mine):
                return list(words[: start - n_context]), True
    return list(words), False


def cut_restart(
    words: Sequence[str], context: Sequence[str] = (), min_words: int = 2,
) -> tuple[list[str], bool]:
    """Cut ``words`` where they start their sentence over and run on to the end: a loop that
    has only begun. For partials, whose tail two decodes can agree on.

    Whisper on partial audio sometimes restarts the sentence it is in ("J'ai donc
    l'expérience de l'année passée j'ai donc"). ``cut_repetition`` sees the loop only once the
    second copy is as long as the first; by then agreement may have committed its first
    words, and the decodes that come after cut everything from the loop on, real words
    included (the captions lost "j'en dirais un mot tout à l'heure"). So a partial's
    continuation is cut before its last ``min_words`` or more words when they are the first
    words of the sentence they are in (no sentence end between). The decodes that hear more
    audio decide: a real repetition goes on differently from the sentence's start and is kept.
    ``context`` is the committed text before ``words``, never cut. Returns (kept words,
    whether anything was cut)."""
    all_words = [*context, *words]
    norm = _normalized(all_words)
    n_context = len(context)
    sentence_start = 0
    starts = []
    for i, word in enumerate(all_words):
        starts.append(sentence_start)
        if word.endswith(_SENTENCE_END):
            sentence_start = i + 1
    for i in range(n_context, len(norm) - min_words + 1):
        start, tail = starts[i], norm[i:]
        if start < i and start + len(tail) <= i and norm[start:start + len(tail)] == tail:
            return list(words[: i - n_context]), True
    return list(words), False


def cut_forced_restatement(
    words: Sequence[str], context: Sequence[str] = (), min_words: int = 4,
    sentence_overlap: float = 0.8, clause_overlap: float = 0.6,
) -> tuple[list[str], bool]:
    """Cut the end of ``words`` where the decode says again the sentence it was forced into.

    A decode forced to continue a half-heard prefix ("Primero que", "y cayó tan veces
    esperando una") often finishes it and then says the sentence over, right: "es profesor
    peruano de áreas protegidas y manejadas. Primero profesor peruano de áreas protegidas y
    manejadas.", "disculpamente y cayó tal vez esperando una disculpamente". The prefix is
    committed and cannot be taken back, so the second saying only doubles the speech.
    Cut from where, in a sentence that began in the committed text (``context``: committed
    words before ``words``, the forced prefix last), the words run to the decode's end
    as a restatement of ``min_words`` or more words, ending with the word the first saying
    ended with:
    - after a sentence end: starting with the same word as that sentence, with at least
      ``sentence_overlap`` of its words in it (``cut_restatement`` needs three same words);
    - inside it: starting with its first two words, with at least ``clause_overlap`` of
      its words before.
    A real repetition goes on past it ("and I went to the store and I bought milk" keeps
    its words: under half of "and I bought milk" was said before), and a new sentence that
    opens like the last one ends otherwise ("La parole est à madame Annie Louerro. La parole
    est à madame la ministre des Régés"). Returns (kept words,
    whether anything was cut)."""
    all_words = [*context, *words]
    n_context = len(context)
    norm = _normalized(all_words)
    sentence_start = 0
    for i, word in enumerate(all_words[:n_context]):
        if word.endswith(_SENTENCE_END):
            sentence_start = i + 1
    if sentence_start >= n_context:
        return list(words), False  # the committed text ends its sentence: nothing forced
    ended = False  # a sentence end between the sentence's start and this word
    for j in range(sentence_start + 1, len(all_words)):
        ended = ended or all_words[j - 1].endswith(_SENTENCE_END)
        if j < n_context or norm[j] != norm[sentence_start]:
            continue  # both rules start the second saying with the sentence's first word
        tail = [w for w in norm[j:] if w]
        if len(tail) < min_words:
            continue
        said = [w for w in norm[sentence_start:j] if w]
        if not said or tail[-1] != said[-1]:
            continue  # a restatement ends where the first saying ended; new words go on
        before = set(said)
        overlap = sum(w in before for w in tail) / len(tail)
        if ended:
            restated = overlap >= sentence_overlap
        else:
            restated = (norm[j:j + 2] == norm[sentence_start:sentence_start + 2]
                        and overlap >= clause_overlap)
        if restated:
            return list(words[: j - n_context]), True
    return list(words), False


def cut_capped_restatement(
    words: Sequence[str], context: Sequence[str] = (), min_words: int = 2,
) -> tuple[list[str], bool]:
    """For a decode the length cap stopped: cut the unfinished sentence it ended on when
    those words (``min_words`` or more) copy a run of the words before it.

    A decode that ends the speaker's sentence and then says part of it again ("No, I don't
    know so much that little. I don't know so") is a loop the cap interrupted: the model
    does not stop, so the cap stops it. ``cut_restatement`` needs the copy to start like the
    earlier sentence; ``cut_restart`` is for partials, whose tail later decodes re-decide.
    A decode that stopped by itself is never cut here, and a restated sentence the decoder
    finished is ``cut_restatement``'s. Nor is a copy of an earlier sentence's opening:
    speakers open sentences alike, so the words the cap stopped are not the loop's mark
    there. ``context`` is the committed text before ``words``,
    never cut. Returns (kept words, whether anything was cut)."""
    all_words = [*context, *words]
    n_context = len(context)
    if not words or words[-1].endswith(_SENTENCE_END):
        return list(words), False  # it ended its sentence: nothing unfinished
    sentence_starts = {0} | {i + 1 for i, w in enumerate(all_words) if w.endswith(_SENTENCE_END)}
    start = max(i for i in sentence_starts if i < len(all_words))
    if start <= n_context or start == 0:
        return list(words), False  # the unfinished sentence began in the committed text
    norm = _normalized(all_words)
    tail = norm[start:]
    if len(tail) < min_words or not all(tail):
        return list(words), False
    earlier = norm[:start]
    n = len(tail)
    # a copy of an earlier sentence's opening is left alone: a speaker opens sentences
    # alike ("La parole est à madame Annie Louerro. La parole est à madame la ministre")
    if any(earlier[i:i + n] == tail for i in range(len(earlier) - n + 1)
           if i not in sentence_starts):
        return list(words[: start - n_context]), True
    return list(words), False


def guard_words(
    words: Sequence[str], context: Sequence[str], spoken: Sequence[str] | None,
    restart_guard: bool, capped: bool = False, restatement_guard: bool = True,
    prior: int = 0,
) -> tuple[list[str], bool]:
    """A decode's words after the loop guards: ``cut_repetition`` (``spoken``: for a
    translation, the same audio's captions; None for the captions themselves), then
    ``cut_restatement``, ``cut_forced_restatement`` (with ``restatement_guard``), then
    ``cut_restart`` when ``restart_guard`` (partials), and ``cut_capped_restatement`` when
    the length cap stopped the decode (``capped``, with ``restatement_guard``).
    ``context`` is the text before the words (never cut), its first ``prior`` words an
    earlier window's. Returns (kept words, whether anything was cut)."""
    words, was_cut = cut_repetition(words, context=context, spoken=spoken)
    words, restated = cut_restatement(words, context=context, prior=prior)
    was_cut = was_cut or restated
    if restatement_guard:
        words, restated = cut_forced_restatement(words, context=context)
        was_cut = was_cut or restated
    if capped and restatement_guard:
        words, interrupted = cut_capped_restatement(words, context=context)
        was_cut = was_cut or interrupted
    if restart_guard:  # set on partials only (stages.utterance)
        words, restarted = cut_restart(words, context=context)
        was_cut = was_cut or restarted
    return words, was_cut


def guarded_decode(
    request: WhisperRequest, task: DecodeTask, text: str, avg_logprob: float,
    no_speech_prob: float, hit_cap: bool, spoken: Sequence[str] | None = None,
) -> DecodeResult:
    """The result of a decode of ``request``'s ``task`` whose new tokens read ``text``.
    ``spoken``: for a translation, the same audio's captions (the loop guard keeps a
    repetition the speaker made); None for the captions themselves."""
    glued = ""
    if task.prefix.strip() and text and not text[0].isspace():
        glued, _, text = text.partition(" ")
    # a loop that starts in the context (text copied from before the window) is cut too
    prior = task.context.split()[-40:]
    context = [*prior, *task.prefix.split()]
    words, was_cut = guard_words(text.split(), context, spoken, request.restart_guard,
                                 capped=hit_cap and not request.partial,
                                 restatement_guard=request.restatement_guard,
                                 prior=len(prior))
    suppressed = (
        no_speech_prob > request.no_speech_threshold
        and avg_logprob < request.logprob_threshold
    )
    return DecodeResult(
        task=task.task,
        continuation="" if suppressed else " ".join(words),
        glued="" if suppressed else glued,
        avg_logprob=avg_logprob,
        no_speech_prob=no_speech_prob,
        suppressed=suppressed,
        cut=was_cut,
        truncated=hit_cap,
    )


class DecodedText(NamedTuple):
    """One decode of an engine pass, as ``guarded_decodes`` reads it."""
    row: int  # its request's index in the pass
    task: DecodeTask
    text: str  # the new tokens' text
    avg_logprob: float
    no_speech_prob: float
    hit_cap: bool


def guarded_decodes(requests: Sequence[WhisperRequest],
                    decoded: Sequence[DecodedText]) -> list[list[DecodeResult]]:
    """Each request's decodes (``guarded_decode``), in its task order. The captions go
    first, so that a translation's loop guard keeps the repetitions its captions hold."""
    decodes: list[list[DecodeResult]] = [[] for _ in requests]
    captions: dict[int, list[str]] = {}  # each request's captions, for its translation
    for one in sorted(decoded, key=lambda d: d.task.task != "transcribe"):
        spoken = captions.get(one.row, []) if one.task.task == "translate" else None
        decode = guarded_decode(requests[one.row], one.task, one.text, one.avg_logprob,
                                one.no_speech_prob, one.hit_cap, spoken=spoken)
        if one.task.task == "transcribe":
            captions[one.row] = [*one.task.prefix.split(), *decode.continuation.split()]
        decodes[one.row].append(decode)
    for row, request in enumerate(requests):  # in the request's task order
        order = [t.task for t in request.tasks]
        decodes[row].sort(key=lambda d: order.index(d.task) if d.task in order else 0)
    return decodes
