"""Incremental text MT: the pure policy core (scripted and tiny real model) and its async shell."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence

import pytest

from speechpipe.bench.tiny_mt import build_tiny_mt, generated_sentences
from speechpipe.errors import LanguageError, SpeechpipeError
from speechpipe.models.mt.ct2_translator import Ct2TextTranslator, TextMtRequest, TextMtResult
from speechpipe.models.mt.ct2_worker import Ct2TranslationWorker
from speechpipe.stages.channels import Channel
from speechpipe.stages.clock import BasisStreamClock
from speechpipe.stages.frames import ErrorEvent, OutputEvent, TextHypothesis
from speechpipe.stages.text_mt import IncrementalTextTranslation, TextMtOptions, TextMtStage
from speechpipe.stages.translation_memory import TranslationMemory

# --- a scripted translator ---------------------------------------------------------------


class ScriptedMt:
    """Word-by-word "translation" (``cat`` -> ``tcat``) whose last word is unstable until the
    sentence ends (``ucat``), like a real model that has not seen the rest of the sentence.
    Honours ``target_prefix`` by forcing it. Counts calls and source words translated."""

    def __init__(self) -> None:
        self.calls = 0
        self.requests: list[TextMtRequest] = []

    @staticmethod
    def full(source: str) -> list[str]:
        words = source.split()
        out = ["t" + re.sub(r"\W", "", w.lower()) for w in words]
        if words and not words[-1].endswith((".", "!", "?")):
            out[-1] = "u" + out[-1][1:]
        return out

    def __call__(self, request: TextMtRequest) -> TextMtResult:
        self.calls += 1
        self.requests.append(request)
        prefix = request.target_prefix.split()
        continuation = self.full(request.source_text)[len(prefix) :]
        text = " ".join([*prefix, *continuation])
        return TextMtResult(text=text, continuation=" ".join(continuation))

    def batch(self, requests: Sequence[TextMtRequest]) -> list[TextMtResult]:
        return [self(r) for r in requests]

    async def translate(self, request: TextMtRequest) -> TextMtResult:
        await asyncio.sleep(0)
        return self(request)


def replay(
    policy: IncrementalTextTranslation,
    translate,  # type: ignore[no-untyped-def]
    words: list[str],
    step: int = 1,
) -> list[tuple[str, str]]:
    """Grow the committed source ``step`` words at a time, then finalize; (committed,
    tentative) after every update."""
    states = []
    for end in range(step, len(words) + step, step):
        requests = policy.update(" ".join(words[:end]))
        update = policy.apply(translate(requests))
        states.append((update.committed, update.tentative))
    requests = policy.update(" ".join(words), final=True)
    update = policy.apply(translate(requests))
    assert update.final and policy.final
    states.append((update.committed, update.tentative))
    return states


def assert_never_retracted(states: list[tuple[str, str]]) -> None:
    previous: list[str] = []
    for committed, _ in states:
        words = committed.split()
        assert words[: len(previous)] == previous, "committed target was retracted"
        previous = words


def test_committed_grows_and_final_is_the_full_translation() -> None:
    mt = ScriptedMt()
    policy = IncrementalTextTranslation("en", "fr")
    words = "The cat sees a dog today. My friend likes the red ball near the station".split()
    states = replay(policy, mt.batch, words)
    assert_never_retracted(states)
    # LocalAgreement-2 commits a word once two successive continuations agree on it.
    assert states[:3] == [("", "uthe"), ("", "tthe ucat"), ("tthe", "tcat usees")]
    assert states[-1] == (" ".join(sentencewise(mt, words)), "")
    assert states[-1][0].endswith("tnear tthe ustation")
    assert policy.committed == states[-1][0]


def test_tentative_is_never_committed_until_agreed() -> None:
    mt = ScriptedMt()
    policy = IncrementalTextTranslation("en", "fr")
    policy.apply(mt.batch(policy.update("Hello")))
    update = policy.apply(mt.batch(policy.update("Hello there")))
    assert (update.committed, update.tentative) == ("", "thello uthere")
    update = policy.apply(mt.batch(policy.update("Hello there you")))
    assert (update.committed, update.tentative) == ("thello", "tthere uyou")
    assert update.newly_committed == ("thello",)


def test_hold_n_commits_all_but_the_last_words_of_each_update() -> None:
    """hold-1: the update a caption commit causes commits its translation at once, all but
    its last word (the unstable one here); nothing committed is retracted, and the final
    translation is the same as LocalAgreement-2's."""
    mt = ScriptedMt()
    policy = IncrementalTextTranslation("en", "fr", options=TextMtOptions(hold_words=1))
    update = policy.apply(mt.batch(policy.update("Hello there")))
    assert (update.committed, update.tentative) == ("thello", "uthere")
    assert update.newly_committed == ("thello",)
    update = policy.apply(mt.batch(policy.update("Hello there you")))
    assert (update.committed, update.tentative) == ("thello tthere", "uyou")
    assert mt.requests[-1].target_prefix == "thello"  # the held commit is forced after
    words = "The cat sees a dog today. My friend likes the red ball near the station".split()
    held = replay(IncrementalTextTranslation("en", "fr", options=TextMtOptions(hold_words=2)),
                  mt.batch, words)
    agreed = replay(IncrementalTextTranslation("en", "fr"), ScriptedMt().batch, words)
    assert_never_retracted(held)
    assert held[-1] == agreed[-1]
    # hold-1 commits sooner: after the fourth source word, three target words against two
    held_1 = replay(IncrementalTextTranslation("en", "fr", options=TextMtOptions(hold_words=1)),
                    mt.batch, words)
    assert held_1[3][0] == "tthe tcat tsees" and agreed[3][0] == "tthe tcat"
    assert held_1[-1] == agreed[-1]


def replay_heard(policy: IncrementalTextTranslation, translate,  # type: ignore[no-untyped-def]
                 words: list[str], ahead: int = 1) -> list[tuple[str, str]]:
    """As ``replay``, with the source side's tentative words: the next ``ahead`` source
    words are tentative when each word commits."""
    states = []
    for end in range(1, len(words) + 1):
        tentative = " ".join(words[end:end + ahead])
        update = policy.apply(translate(policy.update(" ".join(words[:end]),
                                                      tentative=tentative)))
        states.append((update.committed, update.tentative))
    update = policy.apply(translate(policy.update(" ".join(words), final=True)))
    states.append((update.committed, update.tentative))
    return states


def test_lookahead_commits_a_caption_commits_words_in_its_own_update() -> None:
    """A segment's first caption commit: LocalAgreement-2 alone has no earlier update to agree
    with, so "thello" waits for the next caption commit; the look-ahead translation (the
    committed source and the tentative "there") agrees on it in the same update. The unstable
    last word ("uthere" until "you" follows) stays tentative."""
    mt = ScriptedMt()
    policy = IncrementalTextTranslation("en", "fr")
    update = policy.apply(mt.batch(policy.update("Hello there", tentative="you")))
    assert (update.committed, update.tentative) == ("thello", "uthere")
    assert [r.source_text for r in mt.requests] == ["Hello there", "Hello there you"]
    assert {r.target_prefix for r in mt.requests} == {""}
    update = policy.apply(mt.batch(policy.update("Hello there you", tentative="all")))
    assert (update.committed, update.tentative) == ("thello tthere", "uyou")
    assert mt.requests[-1].target_prefix == "thello"  # the look-ahead forces the commit too
    without = IncrementalTextTranslation("en", "fr", options=TextMtOptions(lookahead=False))
    update = without.apply(ScriptedMt().batch(without.update("Hello there", tentative="you")))
    assert (update.committed, update.tentative) == ("", "thello uthere")


def test_lookahead_commits_only_the_committed_sources_translation() -> None:
    """What the look-ahead commits is a prefix of the committed source's own translation:
    never a word of the tentative source, however long the look-ahead agrees. Nothing
    committed is retracted, and the final translation is LocalAgreement-2's."""
    mt = ScriptedMt()
    words = "The cat sees a dog today. My friend likes the red ball near the station".split()
    heard = replay_heard(IncrementalTextTranslation("en", "fr"), mt.batch, words, ahead=3)
    for end, (committed, _) in enumerate(heard[:-1], start=1):
        own = sentencewise(ScriptedMt(), words[:end])
        assert own[:len(committed.split())] == committed.split(), (end, committed)
    assert_never_retracted(heard)
    agreed = replay(IncrementalTextTranslation("en", "fr"), ScriptedMt().batch, words)
    assert heard[-1] == agreed[-1]
    # one caption commit sooner: after the fourth source word, three target words against two
    assert heard[3][0] == "tthe tcat tsees" and agreed[3][0] == "tthe tcat"


def test_lookahead_asks_nothing_without_tentative_words_or_at_the_end() -> None:
    mt = ScriptedMt()
    policy = IncrementalTextTranslation("en", "fr")
    policy.apply(mt.batch(policy.update("Hello there")))
    policy.apply(mt.batch(policy.update("Hello there you", final=True, tentative="all")))
    assert [r.source_text for r in mt.requests] == ["Hello there", "Hello there you"]
    held = IncrementalTextTranslation("en", "fr", options=TextMtOptions(hold_words=1))
    held.apply(mt.batch(held.update("Good bye", tentative="now")))
    assert mt.requests[-1].source_text == "Good bye"  # hold-N decides alone


def test_a_pause_commits_the_translation_of_everything_heard() -> None:
    """A source hypothesis with nothing tentative (the captions committed everything heard,
    as at a pause) commits the open segment's whole translation, uncapped, in its own
    update; the segment stays open, so the next words are translated with it."""
    mt = ScriptedMt()
    policy = IncrementalTextTranslation("en", "fr")
    policy.apply(mt.batch(policy.update("Hello there", tentative="you")))
    update = policy.apply(mt.batch(policy.update("Hello there you", caught_up=True)))
    assert (update.committed, update.tentative) == ("thello tthere uyou", "")
    assert mt.requests[-1].max_new_tokens == 0  # the whole translation, as at a close
    update = policy.apply(mt.batch(policy.update("Hello there you all", tentative="good")))
    assert mt.requests[-2].source_text == "Hello there you all"  # the segment stays open
    assert mt.requests[-2].target_prefix == "thello tthere uyou"
    assert update.committed == "thello tthere uyou"
    # caught up without new words: what the last update translated commits
    policy = IncrementalTextTranslation("en", "fr")
    policy.apply(mt.batch(policy.update("Good bye")))
    calls = mt.calls
    update = policy.apply(mt.batch(policy.update("Good bye", caught_up=True)))
    assert mt.calls == calls and (update.committed, update.tentative) == ("tgood ubye", "")
    off = IncrementalTextTranslation("en", "fr",
                                     options=TextMtOptions(commit_when_caught_up=False))
    update = off.apply(mt.batch(off.update("Good bye", caught_up=True)))
    assert (update.committed, update.tentative) == ("", "tgood ubye")


def test_nothing_to_do_when_the_source_did_not_grow() -> None:
    mt = ScriptedMt()
    policy = IncrementalTextTranslation("en", "fr")
    policy.apply(mt.batch(policy.update("Hello there")))
    assert policy.update("Hello there") == []
    update = policy.apply([])
    assert not update.changed and mt.calls == 1


def test_update_and_apply_must_alternate() -> None:
    policy = IncrementalTextTranslation("en", "fr")
    requests = policy.update("Hello")
    with pytest.raises(RuntimeError):
        policy.update("Hello you")
    with pytest.raises(ValueError):
        policy.apply([])
    policy.apply(ScriptedMt().batch(requests))
    with pytest.raises(RuntimeError):
        policy.apply([])


def test_requests_force_the_committed_target() -> None:
    mt = ScriptedMt()
    policy = IncrementalTextTranslation("en", "fr", options=TextMtOptions(beam_size=3))
    prefixes = []
    for text in ("The", "The cat", "The cat sees", "The cat sees a", "The cat sees a dog"):
        prefixes.append(policy.committed)
        policy.apply(mt.batch(policy.update(text)))
    assert [r.target_prefix for r in mt.requests] == prefixes == ["", "", "", "tthe", "tthe tcat"]
    last = mt.requests[-1]
    assert (last.source_lang, last.target_lang, last.beam_size) == ("en", "fr", 3)


# --- segmentation keeps work per update bounded ------------------------------------------


def test_sentence_ends_close_segments_and_bound_the_work() -> None:
    mt = ScriptedMt()
    policy = IncrementalTextTranslation("en", "fr")
    words = " ".join(generated_sentences(30, seed=2)).split()  # ~300 words
    states = replay(policy, mt.batch, words)
    assert_never_retracted(states)
    longest_sentence = max(len(s.split()) for s in generated_sentences(30, seed=2))
    # Only the open sentence is ever re-translated, however long the utterance gets.
    assert max(len(r.source_text.split()) for r in mt.requests) <= longest_sentence
    assert mt.calls <= 2 * len(words) + 2
    # The final target is the concatenation of every sentence's full translation.
    assert states[-1][0].split() == sentencewise(mt, words)


def sentencewise(mt: ScriptedMt, words: list[str]) -> list[str]:
    out, sentence = [], []
    for w in words:
        sentence.append(w)
        if w.endswith((".", "!", "?")) and len(sentence) >= 3:
            out += mt.full(" ".join(sentence))
            sentence = []
    if sentence:
        out += mt.full(" ".join(sentence))
    return out


def test_run_on_speech_is_cut_at_clauses_and_at_the_hard_limit() -> None:
    mt = ScriptedMt()
    options = TextMtOptions(clause_min_words=5, max_segment_words=8)
    policy = IncrementalTextTranslation("en", "fr", options=options)
    words = ("one two three four five, six seven eight nine ten eleven twelve thirteen "
             "fourteen fifteen sixteen seventeen eighteen nineteen twenty").split()
    states = replay(policy, mt.batch, words)
    assert_never_retracted(states)
    assert max(len(r.source_text.split()) for r in mt.requests) <= 8
    closing = [r.source_text for r in mt.requests if r.source_text.endswith("five,")]
    assert closing and closing[-1] == "one two three four five,"


def test_short_sentences_stay_open() -> None:
    """ "Dr." does not end a segment: min_segment_words keeps it with what follows."""
    mt = ScriptedMt()
    policy = IncrementalTextTranslation("en", "fr")
    replay(policy, mt.batch, "Dr. Smith sees the cat.".split())
    assert any(r.source_text == "Dr. Smith sees" for r in mt.requests)


# --- translation memory -----------------------------------------------------------------


def test_memory_hit_skips_mt() -> None:
    mt = ScriptedMt()
    memory = TranslationMemory()
    policy = IncrementalTextTranslation("en", "fr", memory=memory, model_id="scripted")
    phrase = "Thank you very much."
    policy.apply(mt.batch(policy.update(phrase)))  # one commit, closes the sentence
    first = policy.apply(mt.batch(policy.update(phrase, final=True)))
    assert mt.calls == 1 and memory.misses == 1

    policy.reset()
    requests = policy.update(phrase)
    assert requests == []  # the second identical segment does not reach the translator
    policy.apply([])
    second = policy.apply(mt.batch(policy.update(phrase, final=True)))
    assert mt.calls == 1
    assert second.committed == first.committed
    assert memory.hits == 1


def test_memory_hit_on_an_open_segment_and_at_its_close() -> None:
    mt = ScriptedMt()
    memory = TranslationMemory()
    policy = IncrementalTextTranslation("en", "fr", memory=memory)
    replay(policy, mt.batch, "yes of course".split())  # closed at the utterance end
    calls = mt.calls
    policy.reset()
    states = replay(policy, mt.batch, "yes of course".split(), step=3)
    assert mt.calls == calls  # open lookup and final close both hit
    assert states[-1][0] == "tyes tof ucourse"
    assert memory.hits == 2


def test_memory_that_contradicts_committed_words_is_ignored() -> None:
    mt = ScriptedMt()
    memory = TranslationMemory()
    memory.put("", "en", "fr", "The cat sees a dog.", "Le chat voit un chien.")
    policy = IncrementalTextTranslation("en", "fr", memory=memory)
    for text in ("The cat", "The cat sees", "The cat sees a"):
        policy.apply(mt.batch(policy.update(text)))
    assert policy.committed == "tthe tcat"
    calls = mt.calls
    update = policy.apply(mt.batch(policy.update("The cat sees a dog.")))
    assert mt.calls == calls + 1
    assert update.committed.startswith("tthe tcat")


def test_memory_is_filled_from_closed_segments() -> None:
    mt = ScriptedMt()
    memory = TranslationMemory()
    policy = IncrementalTextTranslation("en", "fr", memory=memory, model_id="m")
    replay(policy, mt.batch, "The cat sees a dog. It runs away".split())
    assert memory.get("m", "en", "fr", "The cat sees a dog.") == "tthe tcat tsees ta tdog"
    assert memory.get("m", "en", "fr", "It runs away") == "tit truns uaway"


# --- the tiny real model -----------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Ct2TextTranslator:
    pytest.importorskip("sentencepiece")
    folder = build_tiny_mt(tmp_path_factory.mktemp("tiny") / "nllb", "nllb")
    return Ct2TextTranslator(folder, intra_threads=1)


class _Recorder:
    def __init__(self, translator: Ct2TextTranslator) -> None:
        self.translator = translator
        self.log: list[tuple[TextMtRequest, TextMtResult]] = []

    def __call__(self, requests: Sequence[TextMtRequest]) -> list[TextMtResult]:
        results = self.translator.translate_batch(requests)
        self.log += zip(requests, results, strict=True)
        return results


def test_tiny_model_single_segment_final_is_forced_full_retranslation(
    tiny: Ct2TextTranslator,
) -> None:
    """One segment: final target == committed-before-final + the continuation of a fresh
    greedy translation of the whole final source forced with that committed prefix (and, when
    the model did not continue inside the last committed word, exactly that translation)."""
    nonempty = 0
    for sentence in generated_sentences(8, seed=11):
        words = sentence.rstrip(".!?").split()
        policy = IncrementalTextTranslation("en", "fr")
        record = _Recorder(tiny)
        states = replay(policy, record, words)
        assert_never_retracted(states)
        committed_before = states[-2][0]
        reference = tiny.translate(
            TextMtRequest(" ".join(words), "en", "fr", target_prefix=committed_before)
        )
        expected = " ".join(p for p in (committed_before, reference.continuation) if p)
        assert states[-1] == (expected, "")
        if not reference.joins_prefix:
            assert states[-1][0] == reference.text
        nonempty += bool(committed_before)
    assert nonempty >= 2, "agreement committed nothing before the end: the test proves little"


def test_tiny_model_multi_segment_final_is_the_concatenation(tiny: Ct2TextTranslator) -> None:
    words = " ".join(generated_sentences(4, seed=5)).split()
    policy = IncrementalTextTranslation("en", "fr")
    record = _Recorder(tiny)
    states = replay(policy, record, words, step=2)
    assert_never_retracted(states)
    # Each segment's last request is its close; re-run them fresh: same output (greedy).
    closes = _closing_requests(record.log, words)
    expected: list[str] = []
    for request, _ in closes:
        again = tiny.translate(request)
        expected += request.target_prefix.split() + again.continuation.split()
    assert states[-1][0].split() == expected
    assert len(closes) == 4


def _closing_requests(log, words):  # type: ignore[no-untyped-def]
    """The last request made for each sentence-segment of ``words``."""
    sentences, current = [], []
    for w in words:
        current.append(w)
        if w.endswith((".", "!", "?")):
            sentences.append(" ".join(current))
            current = []
    last = {}
    for request, result in log:
        if request.source_text in sentences:
            last[request.source_text] = (request, result)
    return [last[s] for s in sentences if s in last]


def test_tiny_model_work_per_update_does_not_grow(tiny: Ct2TextTranslator) -> None:
    work: list[int] = []

    def translate(requests: Sequence[TextMtRequest]) -> list[TextMtResult]:
        results = tiny.translate_batch(requests)
        work.append(sum(r.source_tokens + r.generated_tokens for r in results))
        return results

    words = " ".join(generated_sentences(16, seed=9)).split()
    replay(IncrementalTextTranslation("en", "fr"), translate, words, step=2)
    quarter = len(work) // 4
    early, late = work[:quarter], work[-quarter - 1 : -1]
    assert sum(late) / len(late) < 1.5 * sum(early) / len(early)


# --- the async stage ---------------------------------------------------------------------


def source(utterance: int, committed: str, *, revision: int = 0, final: bool = False,
           pts: int = 16_000, tentative: str = "", lang: str = "en") -> TextHypothesis:
    return TextHypothesis(
        side="source", utterance=utterance, revision=revision, committed=committed,
        tentative=tentative, language=lang, audio_start=1000 * utterance, audio_end=pts,
        stream_pts=pts, final=final,
    )


class OffsetClock(BasisStreamClock):
    def stamp(self, basis_pts: int) -> int:
        return basis_pts + 7


async def run_stage(stage: TextMtStage, items: list[TextHypothesis]) -> list[TextHypothesis]:
    inbox: Channel[TextHypothesis] = Channel(64, name="source")
    outbox: Channel[TextHypothesis] = Channel(64, name="target")
    for item in items:
        inbox.put_nowait(item)
    inbox.close()
    await asyncio.wait_for(stage.run(inbox, outbox), 30)
    assert outbox.closed  # the stage contract: a stage closes its outbox when done
    out = []
    while len(outbox):
        out.append(await outbox.get())
    return out


async def _fed_one_by_one(stage: TextMtStage, items: list[TextHypothesis]) -> list[TextHypothesis]:
    """Feed items through a channel of capacity 1: the stage takes them one at a time."""
    inbox: Channel[TextHypothesis] = Channel(1, name="source")
    outbox: Channel[TextHypothesis] = Channel(64, name="target")
    task = asyncio.create_task(stage.run(inbox, outbox))
    for item in items:
        await inbox.put(item)
    inbox.close()
    await asyncio.wait_for(task, 30)
    return [await outbox.get() for _ in range(len(outbox))]


async def test_stage_emits_target_hypotheses() -> None:
    mt = ScriptedMt()
    stage = TextMtStage(mt.translate, source_lang="en", target_lang="fr", clock=OffsetClock())
    items = [
        source(1, "The", tentative="cat", pts=100),
        TextHypothesis("target", 1, 0, "ignored", "", "fr", 0, 0, 0),
        source(1, "The cat", tentative="sees", pts=200),
        source(1, "The cat sees", tentative="a", pts=300),
        source(1, "The cat sees", tentative="a dog", final=True, pts=400),
    ]
    out = await _fed_one_by_one(stage, items)
    assert [h.side for h in out] == ["target"] * len(out)
    assert [h.revision for h in out] == list(range(len(out)))
    assert [h.final for h in out] == [False] * (len(out) - 1) + [True]
    assert all(h.utterance == 1 and h.language == "fr" for h in out)
    assert out[-1].committed == "tthe tcat tsees ta udog" and out[-1].tentative == ""
    assert out[-1].audio_start == 1000 and out[-1].audio_end == 400
    assert out[-1].stream_pts == 407  # clock.stamp(source stream_pts)
    assert all(h.timings[0].stage == "mt" and h.timings[0].seconds >= 0 for h in out)
    assert all("ignored" not in h.text for h in out)


async def test_stage_looks_ahead_with_the_captions_tentative_words() -> None:
    mt = ScriptedMt()
    stage = TextMtStage(mt.translate, source_lang="en", target_lang="fr", clock=OffsetClock())
    out = await _fed_one_by_one(stage, [source(1, "Hello there", tentative="you all"),
                                        source(1, "Hello there you", tentative="all",
                                               final=True)])
    assert (out[0].committed, out[0].tentative) == ("thello", "uthere")
    assert [r.source_text for r in mt.requests] == [
        "Hello there", "Hello there you all", "Hello there you all"]  # the final: whole text
    assert out[-1].final and out[-1].committed == "thello tthere tyou uall"


async def test_stage_can_forward_source_hypotheses() -> None:
    mt = ScriptedMt()
    stage = TextMtStage(mt.translate, source_lang="en", target_lang="fr", clock=OffsetClock(),
                        forward_source=True)
    out = await _fed_one_by_one(stage, [source(1, "Hello there"),
                                        source(1, "Hello there", final=True)])
    assert [(h.side, h.final) for h in out] == [
        ("source", False), ("target", False), ("source", True), ("target", True)
    ]


async def test_stage_coalesces_queued_hypotheses() -> None:
    mt = ScriptedMt()
    stage = TextMtStage(mt.translate, source_lang="en", target_lang="fr", clock=OffsetClock())
    items = [source(1, " ".join(["word"] * n), revision=n) for n in range(1, 6)]
    out = await run_stage(stage, [*items, source(1, "word " * 6, final=True)])
    # Everything was queued before the stage ran: only the final is worth translating.
    assert [r.source_text for r in mt.requests] == ["word word word word word word"]
    assert [h.final for h in out] == [True]


async def test_stage_finishes_an_utterance_left_open() -> None:
    mt = ScriptedMt()
    stage = TextMtStage(mt.translate, source_lang="en", target_lang="fr", clock=OffsetClock())
    out = await run_stage(stage, [source(1, "Hello there"), source(2, "Good bye")])
    finals = [h for h in out if h.final]
    assert [(h.utterance, h.committed) for h in finals] == [
        (1, "thello uthere"), (2, "tgood ubye")
    ]


async def test_stage_uses_the_detected_language() -> None:
    mt = ScriptedMt()
    stage = TextMtStage(mt.translate, source_lang="auto", target_lang="fr", clock=OffsetClock())
    await run_stage(stage, [source(1, "Hola amigo", lang="es", final=True)])
    assert {r.source_lang for r in mt.requests} == {"es"}


async def test_stage_reports_errors_and_goes_on() -> None:
    mt = ScriptedMt()

    async def translate(request: TextMtRequest) -> TextMtResult:
        if request.source_lang == "xx":
            raise LanguageError("no xx")
        return await mt.translate(request)

    errors: list[tuple[SpeechpipeError, int]] = []
    stage = TextMtStage(translate, source_lang="en", target_lang="fr", clock=OffsetClock(),
                        on_error=lambda exc, utt: errors.append((exc, utt)))
    out = await run_stage(stage, [
        source(1, "Bonjour", lang="xx", final=True),
        source(2, "Hello there", final=True),
    ])
    assert [type(e) for e, _ in errors] == [LanguageError] and errors[0][1] == 1
    assert [(h.utterance, h.final, h.committed) for h in out] == [
        (1, True, ""), (2, True, "thello uthere")
    ]


async def test_stage_puts_targets_and_errors_on_the_events_channel() -> None:
    mt = ScriptedMt()

    async def translate(request: TextMtRequest) -> TextMtResult:
        if request.source_lang == "xx":
            raise LanguageError("no xx")
        return await mt.translate(request)

    events: Channel[OutputEvent] = Channel(8)
    stage = TextMtStage(translate, source_lang="en", target_lang="fr", clock=OffsetClock(),
                        events=events)
    inbox: Channel[TextHypothesis] = Channel(8)
    outbox: Channel[TextHypothesis] = Channel(8)
    for item in (source(1, "Bonjour", lang="xx", final=True), source(2, "Hi you", final=True)):
        inbox.put_nowait(item)
    inbox.close()
    await stage.run(inbox, outbox)
    got = [await events.get() for _ in range(len(events))]
    assert [type(e).__name__ for e in got] == ["ErrorEvent", "TextHypothesis", "TextHypothesis"]
    assert isinstance(got[0], ErrorEvent)
    assert (got[0].code, got[0].utterance, got[0].stream_pts) == ("unsupported_language", 1, 16_007)
    assert [h.committed for h in got[1:]] == ["", "thi uyou"]  # type: ignore[union-attr]
    assert len(outbox) == 2


async def test_stage_without_error_handler_raises() -> None:
    async def translate(request: TextMtRequest) -> TextMtResult:
        raise LanguageError("no")

    stage = TextMtStage(translate, source_lang="en", target_lang="fr", clock=OffsetClock())
    with pytest.raises(LanguageError):
        await run_stage(stage, [source(1, "Hello", final=True)])


async def test_stages_share_a_batching_worker(tiny: Ct2TextTranslator) -> None:
    memory = TranslationMemory()
    sentences = generated_sentences(6, seed=21)
    async with Ct2TranslationWorker(tiny, window_s=0.01) as worker:
        stages = [
            TextMtStage(worker.translate, source_lang="en", target_lang=lang,
                        clock=OffsetClock(), memory=memory)
            for lang in ("fr", "de", "es")
        ]
        streams = []
        for i in range(3):
            words = " ".join(sentences[2 * i : 2 * i + 2]).split()
            hyps = [source(1, " ".join(words[:n]), revision=n) for n in range(2, len(words), 3)]
            streams.append([*hyps, source(1, " ".join(words), final=True)])
        outs = await asyncio.gather(
            *(_fed_one_by_one(stage, items) for stage, items in zip(stages, streams, strict=True))
        )
    assert stages[0].policy.model_id == tiny.model_id
    for out in outs:
        assert out[-1].final and out[-1].committed
        assert_never_retracted([(h.committed, h.tentative) for h in out])
    assert worker.batches < worker.requests  # requests from different sessions shared calls


# --- an open segment's update decodes only the next few tokens ---------------------------


def test_open_updates_are_capped_and_closes_are_not() -> None:
    mt = ScriptedMt()
    policy = IncrementalTextTranslation("en", "fr", options=TextMtOptions(open_new_tokens=5))
    for text in ("The cat", "The cat sees", "The cat sees a dog.", "The cat sees a dog. It"):
        policy.apply(mt.batch(policy.update(text)))
    policy.apply(mt.batch(policy.update("The cat sees a dog. It runs", final=True)))
    caps = {(r.source_text, r.max_new_tokens) for r in mt.requests}
    assert ("The cat", 5) in caps and ("The cat sees", 5) in caps and ("It", 5) in caps
    # the segment's close and the utterance's end translate to the end
    assert ("The cat sees a dog.", 0) in caps and ("It runs", 0) in caps


def test_tiny_model_capped_update_holds_no_cut_word(tiny: Ct2TextTranslator) -> None:
    """A continuation stopped by ``max_new_tokens`` leaves out its last, maybe cut, word: what
    is left is the head of the uncapped translation's continuation, word for word."""
    checked = 0
    for sentence in generated_sentences(6, seed=3):
        full = tiny.translate(TextMtRequest(sentence, "en", "fr"))
        capped = tiny.translate(TextMtRequest(sentence, "en", "fr", max_new_tokens=6))
        assert capped.generated_tokens <= 6
        head = capped.continuation.split()
        assert head == full.continuation.split()[: len(head)]
        if full.generated_tokens > 6:
            assert len(head) < len(full.continuation.split())
            checked += 1
    assert checked >= 3, "the tiny model's translations were too short to be capped"
