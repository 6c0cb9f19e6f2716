"""Never invent, never drop: the pure rules (word counts, coverage gap, commit guard, speech
evidence) and the ASR stage with a scripted recognizer and a scripted speech classifier."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from speechpipe.stages.asr import AsrOptions, AsrStage
from speechpipe.stages.channels import Channel
from speechpipe.stages.clock import BasisStreamClock
from speechpipe.stages.coverage import classify_utterance, count_words, coverage_gap
from speechpipe.stages.faithfulness import (
    SPEECH_WINDOW,
    FaithfulnessOptions,
    SpeechEvidence,
    guard_decodes,
)
from speechpipe.stages.frames import STREAM_RATE, ErrorEvent, TextHypothesis, VadEvent
from speechpipe.stages.model_api import DecodeResult, WhisperRequest, WhisperResult
from speechpipe.stages.vad import LabeledAudio

MERCI = ("Merci. Mais l'actualité c'est aussi aujourd'hui un dernier adieu à un grand homme "
         "de la radio. Il avait quatre-vingts ans et il a marqué toute une époque.")


def test_word_counts():
    assert count_words("Thank you!") == 2
    assert count_words("... ♪ -- ...") == 0
    assert count_words("客観的実在の判断的知識") == 6  # no spaces: two characters a word
    assert count_words(MERCI) == 27


def test_classify_utterance():
    assert classify_utterance("", "The game is over.") == "invented"
    assert classify_utterance("...", "") == "empty"
    assert classify_utterance(MERCI, "Thank you!") == "dropped"
    assert classify_utterance(MERCI, "Thank you! " * 8) == "ok"
    assert classify_utterance("Merci.", "Thank you!") == "ok"  # too short to judge


def test_coverage_gap_starts_at_the_first_untranslated_sentence():
    offset, fragment = coverage_gap(MERCI, "Thank you!")
    assert MERCI[offset:].startswith("Mais l'actualité")
    assert fragment == ""
    # an unfinished target sentence is continued, not repeated
    offset, fragment = coverage_gap(MERCI, "Thank you! But the news")
    assert MERCI[offset:].startswith("Mais") and fragment == "But the news"
    assert coverage_gap(MERCI, "Thank you! But the news today is also a last farewell to a "
                               "great man of radio. He was eighty.") is None


def decode(task, words, **kw):
    return DecodeResult(task, words, -0.3, 0.1, **kw)


def test_guard_drops_every_word_of_a_span_without_speech():
    decodes = [decode("transcribe", "Je suis un peu plus tard"),
               decode("translate", "The game is over.", glued=",")]
    out = guard_decodes(decodes, speech_s=0.05, source_words_before=0, target_words_before=0)
    assert [d.continuation for d in out] == ["", ""]
    assert all(d.guarded for d in out) and out[1].glued == ""
    off = guard_decodes(decodes, 0.05, 0, 0, FaithfulnessOptions(guard=False))
    assert [d.continuation for d in off] == ["Je suis un peu plus tard", "The game is over."]


def test_guard_no_translation_without_source_words():
    decodes = [decode("transcribe", "..."), decode("translate", "The first time I saw it.")]
    out = guard_decodes(decodes, speech_s=None, source_words_before=0, target_words_before=0)
    assert out[1].continuation == "" and out[1].guarded
    # source words heard: the translation passes, up to 2.5 per source word + 3
    decodes = [decode("transcribe", "Merci."), decode("translate", "Thank you!")]
    assert guard_decodes(decodes, 2.0, 0, 0)[1].continuation == "Thank you!"
    long = decode("translate", "Thank you, the game is over and nobody ever came back here")
    out = guard_decodes([decodes[0], long], 2.0, 0, 0)
    assert count_words(out[1].continuation) == 5


def test_guard_caps_words_per_second_of_speech():
    loop = decode("transcribe", " ".join(["encore"] * 30))
    out = guard_decodes([loop], speech_s=1.0, source_words_before=0, target_words_before=0)
    assert count_words(out[0].continuation) == 9  # 6 per speech second + 3


class ScriptedSpeech:
    """Speech probability 0.9 inside the given stream spans (samples), 0.1 elsewhere."""

    def __init__(self, spans):
        self.spans = spans
        self.calls = 0

    def __call__(self, audio, state):
        self.calls += 1
        start = state or 0
        n = len(audio) // SPEECH_WINDOW
        centers = start + np.arange(n) * SPEECH_WINDOW + SPEECH_WINDOW // 2
        voiced = np.zeros(n, bool)
        for a, b in self.spans:
            voiced |= (centers >= a) & (centers < b)
        return np.where(voiced, 0.9, 0.1).astype(np.float32), start + len(audio)


def test_speech_evidence_in_pieces():
    speech = ScriptedSpeech([(STREAM_RATE, 2 * STREAM_RATE)])
    evidence = SpeechEvidence(0, speech)
    for _ in range(60):
        evidence.add(np.zeros(1000, np.int16))
        evidence.update()
    assert speech.calls > 1
    assert evidence.seconds(0, 3 * STREAM_RATE) == pytest.approx(1.0, abs=0.04)
    assert evidence.seconds(2 * STREAM_RATE, 3 * STREAM_RATE) < 0.04


# -- the stage, with a recognizer that hallucinates on everything -------------------------

class Hallucinating:
    """Says "La parole est à vous" / "The game is over" on any audio, like Whisper on music;
    ``short_final``: a final translation that stops after "Thank you!"."""

    def __init__(self, short_final=False):
        self.requests: list[WhisperRequest] = []
        self.short_final = short_final

    async def __call__(self, request):
        self.requests.append(request)
        source = "Merci. Mais l'actualité c'est aussi aujourd'hui un dernier adieu à un grand"
        target = "Thank you! But the news today is also a last farewell to a great"
        if self.short_final and not request.partial:
            target = "Thank you!"
        decodes = []
        for task in request.tasks:
            text = source if task.task == "transcribe" else target
            decodes.append(DecodeResult(task.task, text[len(task.prefix):].strip(), -0.2, 0.1))
        return WhisperResult("fr", 1.0, tuple(decodes), 0.0, 0.0)


def one_utterance(seconds=4.0):
    n = int(seconds * STREAM_RATE)
    items = [LabeledAudio(np.zeros(3200, np.int16), 0, 3200, (VadEvent("start", 0, 0, 3200),),
                          0.0)]
    items += [LabeledAudio(np.full(1600, 50, np.int16), p, 1600, (), 0.0)
              for p in range(3200, n, 1600)]
    items.append(LabeledAudio(np.zeros(9600, np.int16), n, 0, (VadEvent("end", 0, n, n + 9600),),
                              0.0))
    return items


async def run(recognizer, speech, faithfulness=None):
    stage = AsrStage(recognizer, BasisStreamClock(), options=AsrOptions(step_s=0.5),
                     language="fr", faithfulness=faithfulness, speech=speech)
    inbox: Channel[LabeledAudio] = Channel(1)
    outbox: Channel[TextHypothesis] = Channel(1000)
    events: Channel = Channel(1000)

    async def produce():
        for item in one_utterance():
            await inbox.put(item)
        inbox.close()

    async with asyncio.TaskGroup() as group:
        group.create_task(produce())
        group.create_task(asyncio.wait_for(stage.run(inbox, outbox, events), 10))
    hyps = [h async for h in outbox]
    events.close()
    others = [e async for e in events]
    final = {h.side: h.committed for h in hyps if h.final}
    return final, others


async def test_no_words_commit_where_no_speech_was_heard():
    final, _ = await run(Hallucinating(), ScriptedSpeech([]))
    assert final == {"source": "", "target": ""}


async def test_guard_off_commits_the_hallucination():
    """The same input with the guard off: what the stage would say without it."""
    final, _ = await run(Hallucinating(), ScriptedSpeech([]), FaithfulnessOptions(guard=False))
    assert final["target"].startswith("Thank you! But the news")


async def test_speech_lets_words_through():
    final, _ = await run(Hallucinating(), ScriptedSpeech([(0, 10 * STREAM_RATE)]))
    assert final["target"].startswith("Thank you! But the news")


async def test_commit_decodes_ask_for_recovery_and_a_short_final_is_reported():
    recognizer = Hallucinating(short_final=True)
    final, events = await run(recognizer, ScriptedSpeech([(0, 10 * STREAM_RATE)]),
                              FaithfulnessOptions(target_per_source_word=0.1))
    finals = [r for r in recognizer.requests if not r.partial]
    assert finals and all(r.recover_coverage for r in finals)
    assert not any(r.recover_coverage for r in recognizer.requests if r.partial)
    errors = [e for e in events if isinstance(e, ErrorEvent)]
    assert [e.code for e in errors] == ["translation_incomplete"]
    assert "Merci" not in errors[0].message  # counts only, nothing spoken


class ShortThenWhole(Hallucinating):
    """A final translation that stops after "Thank you!", and a decode of the whole
    utterance afresh (nothing forced) that translates all of it."""

    async def __call__(self, request):
        fresh = not request.partial and all(not t.prefix for t in request.tasks)
        result = await super().__call__(request)
        if not fresh:
            return result
        whole = "Thank you! But the news today is also a last farewell to a great"
        decodes = tuple(DecodeResult(d.task, whole, -0.2, 0.1) if d.task == "translate" else d
                        for d in result.decodes)
        return WhisperResult("fr", 1.0, decodes, 0.0, 0.0)


async def test_a_short_final_is_translated_again_and_the_rest_is_said():
    recognizer = ShortThenWhole(short_final=True)
    final, events = await run(recognizer, ScriptedSpeech([(0, 10 * STREAM_RATE)]),
                              FaithfulnessOptions(target_per_source_word=0.1))
    # the retranslation came last: the whole utterance, nothing forced
    last = recognizer.requests[-1]
    assert not last.partial and all(not t.prefix for t in last.tasks)
    assert final["target"] == "Thank you! But the news today is also a last farewell to a great"
    assert not [e for e in events if isinstance(e, ErrorEvent)]


def test_missing_tail_continues_after_what_was_committed():
    from speechpipe.stages.coverage import missing_tail

    assert missing_tail("In truth, you have to really, very, very,",
                        "In truth, you have to really very very finely cut it.") == \
        "finely cut it."
    assert missing_tail("Hello there my friend", "Something else entirely") == ""
    assert missing_tail("Thank you!", "Thank you! But the news") == "But the news"
