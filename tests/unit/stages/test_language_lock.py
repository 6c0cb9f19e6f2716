"""Fixing an auto-detected language (``UtteranceDecoder`` on scripted detections; the
figures behind the thresholds are in docs/design.md, "Detecting the language"): the vote of
the detections so far (``stages.language_vote``) fixes it once sure on enough audio, an
unsure vote waits for ``asr.language_lock_s``, and the decode that fixes it commits what
agrees with the hypothesis before it, when that one was decoded in the same language. A
session keeps a language found with confidence and detects an unsure one again at its next
utterance, from the votes so far (``AsrStage`` with a scripted detector)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import pytest

from speechpipe.stages.asr import AsrOptions, AsrStage, UtteranceDecoder
from speechpipe.stages.channels import Channel
from speechpipe.stages.clock import BasisStreamClock
from speechpipe.stages.frames import STREAM_RATE, TextHypothesis, VadEvent
from speechpipe.stages.language_vote import (
    LanguageVote,
    settle_language,
    switched_language,
    top_languages,
)
from speechpipe.stages.model_api import DecodeKind, DecodeResult, WhisperRequest, WhisperResult
from speechpipe.stages.vad import LabeledAudio

OPTIONS = AsrOptions(step_s=0.5, early_step_s=0.5, language_lock_s=3.0,
                     language_confident=0.8, language_min_s=1.3)


def _auto() -> UtteranceDecoder:
    return UtteranceDecoder(utterance=1, start_pts=0, options=OPTIONS, language=None,
                            translate=True)


def _hear(decoder: UtteranceDecoder, seconds: float) -> None:
    rng = np.random.default_rng(0)
    samples = (rng.standard_normal(int(seconds * STREAM_RATE)) * 8000).astype(np.int16)
    decoder.add(samples, len(samples))


def _decoded(decoder: UtteranceDecoder, language: str, prob: float, source: str,
             target: str) -> dict[str, tuple[str, str]]:
    result = WhisperResult(
        language=language, language_prob=prob, encode_s=0.0, decode_s=0.0,
        decodes=(DecodeResult("transcribe", source, -0.1, 0.0),
                 DecodeResult("translate", target, -0.1, 0.0)))
    changed = decoder.apply(result, DecodeKind.PARTIAL, decoder.end)
    return {side: (committed, tentative) for side, committed, tentative in changed}


def test_a_confident_detection_fixes_the_language_and_commits_what_agrees_at_once():
    decoder = _auto()
    _hear(decoder, 1.0)
    shown = _decoded(decoder, "es", 0.95, "hola a", "hello to")
    assert not decoder.language_locked  # too little audio to trust even 0.95
    assert shown["target"] == ("", "hello to")  # shown, not committed
    _hear(decoder, 0.5)
    shown = _decoded(decoder, "es", 0.85, "hola a todos", "hello to everyone")
    assert decoder.language_locked and decoder.language == "es"
    # the hypothesis before the lock (same language) is the agreement's previous one
    assert decoder.text("source") == "hola a"
    assert decoder.text("target") == "hello to"
    assert shown["target"] == ("hello to", "everyone")


def test_an_unsure_vote_waits_for_the_lock_time_then_fixes_its_leader():
    decoder = _auto()
    for _ in range(3):  # 1.5, 2.0, 2.5 s: past language_min_s, under language_lock_s
        _hear(decoder, 0.5 if decoder.n_samples else 1.5)
        _decoded(decoder, "pt", 0.6, "hola a", "hello to")
        assert not decoder.language_locked
        assert decoder.text("target") == ""
    _hear(decoder, 0.5)  # 3.0 s: fixed, whatever the share
    _decoded(decoder, "es", 0.4, "hola a todos", "hello to everyone")
    # the vote's leader: pt (0.6 on 1.5, 2.0 and 2.5 s) over es (0.4 on 3.0 s)
    assert decoder.language_locked and decoder.language == "pt"
    assert decoder.language_confidence == pytest.approx(0.6 * 6.0 / 9.0)
    # this decode was in Spanish, not the language fixed: nothing of it is committed
    assert decoder.text("target") == ""
    assert decoder.request(DecodeKind.PARTIAL).language == "pt"
    for _ in range(2):  # decoded in Portuguese now: agreement as usual
        _hear(decoder, 0.5)
        _decoded(decoder, "pt", 0.9, "hola a todos y", "hello to everyone and")
    assert decoder.text("target") == "hello to everyone"


def test_one_sure_answer_out_of_line_with_the_earlier_ones_does_not_fix_its_language():
    # Whisper base answered Thai with 0.93 on 1.75 s of the bundled German de_bahnhof (in
    # espeak-ng's own voice, before it spoke through MBROLA): the newest answer alone would
    # have fixed it
    decoder = _auto()
    _hear(decoder, 1.5)
    _decoded(decoder, "es", 0.7, "hola a", "hello to")
    _hear(decoder, 0.5)
    _decoded(decoder, "th", 0.93, "hola a todos", "hello to everyone")
    assert not decoder.language_locked  # share of th: 0.93 * 2.0 / 3.5 = 0.53
    _hear(decoder, 0.5)
    _decoded(decoder, "es", 0.75, "hola a todos", "hello to everyone")
    assert not decoder.language_locked  # es: (1.05 + 1.875) / 6.0 = 0.49
    _hear(decoder, 0.5)
    _decoded(decoder, "es", 0.9, "hola a todos", "hello to everyone")  # 3.0 s: lock time
    assert decoder.language_locked and decoder.language == "es"


def test_the_vote_counts_every_language_a_detection_names():
    vote = LanguageVote()
    vote.add((("de", 0.5), ("la", 0.4)), 1.0)
    vote.add((("la", 0.6), ("de", 0.3)), 2.0)
    assert vote.leader() == ("la", pytest.approx((0.4 + 1.2) / 3.0))
    assert vote.share("de") == pytest.approx((0.5 + 0.6) / 3.0)
    assert vote.share("fr") == 0.0 and LanguageVote().leader() == ("", 0.0)
    assert settle_language(vote, 1.0, 0.8, 1.3, 3.0) is None  # too little audio
    assert settle_language(vote, 3.0, 0.8, 1.3, 3.0)[0] == "la"  # lock time: its leader
    # a later utterance: the earlier one is one answer worth its newest detection's 2 s
    later = vote.carried()
    assert later.share("la") == pytest.approx(1.6 / 3.0)
    later.add((("de", 1.0),), 1.0)
    later.add((("de", 1.0),), 2.0)
    assert later.leader() == ("de", pytest.approx((1.1 / 3.0 * 2.0 + 2.0) / 4.0))


def test_detection_among_languages_renormalizes_over_them():
    detected = (("th", 0.6), ("de", 0.3), ("la", 0.05), ("en", 0.05))
    assert top_languages(detected) == detected
    assert top_languages(detected, frozenset({"de", "en"})) == (
        ("de", pytest.approx(0.3 / 0.35)), ("en", pytest.approx(0.05 / 0.35)))
    assert top_languages(detected, frozenset({"fr"})) == detected  # none among: all
    assert len(top_languages([(str(k), 0.1) for k in range(10)])) == 5


def test_the_fixed_language_is_asked_for_in_later_requests():
    decoder = _auto()
    _hear(decoder, 1.5)
    assert decoder.request(DecodeKind.PARTIAL).language is None  # detect
    _decoded(decoder, "fr", 0.9, "bonjour", "hello")
    assert decoder.request(DecodeKind.PARTIAL).language == "fr"


class ScriptedDetector:
    """Detects the language of each utterance from a script (one (language, probability)
    per utterance), and says the same two words whatever it hears. A request with a language
    and ``detect_too`` is decoded in its language and detected from the script too."""

    def __init__(self, detections: list[tuple[str, float]]):
        self.detections = detections
        self.requests: list[tuple[int, WhisperRequest]] = []
        self.utterance = 0

    async def __call__(self, request: WhisperRequest) -> WhisperResult:
        self.requests.append((self.utterance, request))
        language, prob = request.language or self.detections[self.utterance][0], 1.0
        if request.language is None:
            language, prob = self.detections[self.utterance]
        decodes = tuple(DecodeResult(task.task, "uno dos", -0.2, 0.01) for task in request.tasks)
        detected = (self.detections[self.utterance],) if request.detect_too else ()
        return WhisperResult(language, prob, decodes, 0.0, 0.0,
                             language_probs=((language, prob),) if not request.language
                             else detected)


def _talk(utterances: list[tuple[float, float]]) -> list[LabeledAudio]:
    items, at = [], 0.0
    for k, (start, end) in enumerate(utterances):
        s, e = int(start * STREAM_RATE), int(end * STREAM_RATE)
        n = int((start - at) * STREAM_RATE)
        items.append(LabeledAudio(np.zeros(n, np.int16), int(at * STREAM_RATE), 0, (), 0.0))
        for t in range(int(start * 10), int(end * 10)):
            events = (VadEvent("start", k, s, s + 3200),) if t == int(start * 10) else ()
            items.append(LabeledAudio(np.full(1600, 100, np.int16), t * 1600, 1600, events, 0.0))
        n = int(0.6 * STREAM_RATE)
        items.append(LabeledAudio(np.zeros(n, np.int16), e, 0,
                                  (VadEvent("end", k, e, e + 9600),), 0.0))
        at = end + 0.6
    return items


async def _session(detections: list[tuple[str, float]], options: AsrOptions = OPTIONS,
                   talk: tuple[tuple[float, float], ...] = ((0.5, 5.0), (6.0, 10.0)),
                   detector: ScriptedDetector | None = None):
    detector = detector or ScriptedDetector(detections)
    stage = AsrStage(detector, BasisStreamClock(), options=options, language=None)
    inbox: Channel[LabeledAudio] = Channel(1)
    outbox: Channel[TextHypothesis] = Channel(1000)
    events: Channel = Channel(1000)
    hypotheses: list[TextHypothesis] = []

    async def produce():
        for item in _talk(list(talk)):
            await inbox.put(item)
            await asyncio.sleep(0)
        inbox.close()

    async def consume():
        async for hypothesis in outbox:
            hypotheses.append(hypothesis)
            if hypothesis.side == "source" and hypothesis.final:
                detector.utterance += 1

    async with asyncio.TaskGroup() as group:
        group.create_task(produce())
        group.create_task(consume())
        await asyncio.wait_for(stage.run(inbox, outbox, events), 20)
        outbox.close()
    return stage, detector, hypotheses


def _first_request_language(detector: ScriptedDetector, utterance: int) -> str | None:
    return next(r.language for k, r in detector.requests if k == utterance)


async def test_a_session_keeps_a_language_found_with_confidence():
    stage, detector, hypotheses = await _session([("de", 0.95), ("fr", 0.6)])
    assert stage.detected_language == "de"
    assert _first_request_language(detector, 1) == "de"  # not detected again
    # ... only watched: the first decode on language_min_s of audio detects too (fr at 0.6
    # is no switch), and decodes in German all the same
    watched = [r for k, r in detector.requests if k == 1 and r.detect_too]
    assert watched and all(r.language == "de" for k, r in detector.requests if k == 1)
    finals = [h for h in hypotheses if h.side == "source" and h.final]
    assert [h.language for h in finals] == ["de", "de"]
    assert all(h.language_confidence == pytest.approx(0.95) for h in finals)
    targets = [h for h in hypotheses if h.side == "target"]
    assert targets and all(h.language_confidence is None for h in targets)


async def test_an_unsure_language_is_detected_again_at_the_next_utterance():
    stage, detector, hypotheses = await _session([("la", 0.5), ("de", 0.9)])
    assert _first_request_language(detector, 1) is None  # detected again
    finals = [h for h in hypotheses if h.side == "source" and h.final]
    assert finals[0].language == "la" and finals[0].language_confidence == pytest.approx(0.5)
    # the second utterance's vote starts from the first's (one answer worth its length):
    # de leads, but is not sure enough to keep, so a third utterance would detect again
    assert finals[1].language == "de" and 0.3 < finals[1].language_confidence < 0.8
    assert stage.detected_language is None
    assert stage.language_evidence.leader()[0] == "de"


async def test_a_session_detecting_each_utterance_starts_each_vote_afresh():
    # asr.keep_detected_language=false: a language may change from one utterance to the next
    stage, detector, hypotheses = await _session(
        [("la", 0.5), ("de", 0.9)], replace(OPTIONS, keep_detected_language=False))
    finals = [h for h in hypotheses if h.side == "source" and h.final]
    assert [h.language for h in finals] == ["la", "de"]
    assert finals[1].language_confidence == pytest.approx(0.9)


async def test_a_speaker_who_switches_language_is_followed():
    # a file in German, then English: the kept language is watched, and a confident other
    # one on enough audio re-decides it (docs/usage.md, "Languages"); before, the second
    # utterance stayed German
    stage, detector, hypotheses = await _session([("de", 0.95), ("en", 0.95)])
    finals = [h for h in hypotheses if h.side == "source" and h.final]
    assert [h.language for h in finals] == ["de", "en"]
    assert finals[1].language_confidence == pytest.approx(0.95)
    assert stage.detected_language == "en"
    asked = [r.language for k, r in detector.requests if k == 1]
    switch = asked.index("en")  # heard at the first decode on language_min_s of audio
    assert switch > 0 and set(asked[:switch]) == {"de"} and set(asked[switch:]) == {"en"}


def test_a_watched_utterance_detects_again_from_two_confident_other_answers():
    decoder = UtteranceDecoder(utterance=2, start_pts=0, options=OPTIONS, language="es",
                               language_confidence=0.9, translate=True, watch_switch=True)
    _hear(decoder, 1.0)
    assert not decoder.request(DecodeKind.PARTIAL).detect_too  # too little audio to trust
    _hear(decoder, 0.5)
    assert decoder.request(DecodeKind.PARTIAL).detect_too
    result = WhisperResult("es", 1.0, (DecodeResult("transcribe", "jeló", -0.1, 0.0),),
                           0.0, 0.0, language_probs=(("en", 0.9), ("es", 0.05)))
    decoder.apply(result, DecodeKind.PARTIAL, decoder.end)
    assert not decoder.switched and decoder.language == "es"  # one answer is not enough
    _hear(decoder, 0.5)
    # English led: the next partial checks too
    assert decoder.request(DecodeKind.PARTIAL).detect_too
    decoder.apply(result, DecodeKind.PARTIAL, decoder.end)
    assert decoder.switched and decoder.language == "en" and decoder.language_locked
    assert decoder.text("source") == ""  # decoded in Spanish: shown, not committed
    assert decoder.request(DecodeKind.PARTIAL).language == "en"
    assert not decoder.request(DecodeKind.PARTIAL).detect_too  # detecting on its own again


def test_a_watched_utterance_keeps_its_language_on_one_odd_answer():
    # Whisper base on 1.5 s of a shared French clip: Arabic 0.86, half a second later 0.35
    kept = UtteranceDecoder(utterance=2, start_pts=0, options=OPTIONS, language="fr",
                            language_confidence=0.9, translate=True, watch_switch=True)
    _hear(kept, 1.5)
    odd = WhisperResult("fr", 1.0, (DecodeResult("transcribe", "nous", -0.1, 0.0),), 0.0, 0.0,
                        language_probs=(("ar", 0.86), ("he", 0.08), ("fr", 0.03)))
    kept.apply(odd, DecodeKind.PARTIAL, kept.end)
    _hear(kept, 0.5)
    kept.apply(replace(odd, language_probs=(("ar", 0.35), ("fr", 0.31))), DecodeKind.PARTIAL,
               kept.end)
    _hear(kept, 0.5)
    kept.apply(replace(odd, language_probs=(("fr", 0.7), ("ar", 0.2))), DecodeKind.PARTIAL,
               kept.end)
    assert not kept.switched and kept.language == "fr"
    assert not kept.request(DecodeKind.PARTIAL).detect_too  # its own language leads: partials stop
    # ... each decode that commits everything checks
    assert kept.request(DecodeKind.FINAL).detect_too


def test_a_short_utterance_commits_in_the_language_its_vote_leads_with():
    # under language_lock_s, nothing settles; the final decode detected Portuguese, the
    # vote of all the utterance's detections leads with Spanish: the final is asked again,
    # once, in Spanish, and only that decode commits (before: the last detection's pt)
    decoder = _auto()
    _hear(decoder, 1.0)
    _decoded(decoder, "es", 0.7, "hola a", "hello to")
    _hear(decoder, 0.5)
    _decoded(decoder, "es", 0.7, "hola a todos", "hello to everyone")
    assert not decoder.language_locked
    _hear(decoder, 0.5)
    decoder.ended = True
    assert decoder.request(DecodeKind.FINAL).language is None  # the final detects too
    result = WhisperResult("pt", 0.6, (DecodeResult("transcribe", "olá a todos", -0.1, 0.0),
                                       DecodeResult("translate", "hi all", -0.1, 0.0)),
                           0.0, 0.0, language_probs=(("pt", 0.6), ("es", 0.35)))
    decoder.apply(result, DecodeKind.FINAL, decoder.end)
    assert decoder.commit_in == "es"
    assert decoder.text("source") == "" and decoder.text("target") == ""
    again = decoder.request(DecodeKind.FINAL)
    assert again.language == "es" and not again.detect_too
    redone = WhisperResult("es", 1.0, (DecodeResult("transcribe", "hola a todos", -0.1, 0.0),
                                       DecodeResult("translate", "hello everyone", -0.1, 0.0)),
                           0.0, 0.0)
    decoder.apply(redone, DecodeKind.FINAL, decoder.end)
    assert decoder.commit_in is None and decoder.language == "es"
    assert decoder.language_confidence == pytest.approx(decoder.vote.share("es"))
    assert decoder.text("source") == "hola a todos"
    assert decoder.text("target") == "hello everyone"


def test_a_last_hypothesis_in_another_language_than_the_vote_is_not_committed_undecoded():
    decoder = _auto()
    _hear(decoder, 1.0)
    _decoded(decoder, "es", 0.9, "hola a", "hello to")
    _hear(decoder, 0.5)
    _decoded(decoder, "pt", 0.5, "olá a todos", "hi all")  # es 0.9 and 0.9, pt 0.5
    assert decoder.language == "pt" and decoder.language_to_redecode() == "es"
    _decoded(decoder, "es", 0.9, "hola a todos", "hello to everyone")
    assert decoder.language_to_redecode() is None


def test_a_switch_needs_a_confident_answer_on_enough_audio():
    assert switched_language((("en", 0.9), ("es", 0.1)), "es", 1.5, 0.8, 1.3) == "en"
    assert switched_language((("en", 0.9),), "es", 1.0, 0.8, 1.3) is None  # too short
    assert switched_language((("en", 0.7), ("es", 0.3)), "es", 3.0, 0.8, 1.3) is None
    assert switched_language((("es", 0.95),), "es", 3.0, 0.8, 1.3) is None


class FinalSaysPortuguese(ScriptedDetector):
    """Partials detect Spanish (0.7), a decode that commits everything Portuguese (0.6)."""

    async def __call__(self, request: WhisperRequest) -> WhisperResult:
        self.detections = [("es", 0.7) if request.partial else ("pt", 0.6)] * 2
        return await super().__call__(request)


async def test_a_short_utterance_of_a_session_is_committed_in_its_votes_leader():
    # 2 s utterances, under language_lock_s: the language never settles; what is committed
    # is decoded in Spanish, the vote's leader, whatever the last detection said
    detector = FinalSaysPortuguese([])
    _, detector, hypotheses = await _session([], talk=((0.5, 2.5),), detector=detector)
    finals = [h for h in hypotheses if h.side == "source" and h.final]
    assert [h.language for h in finals] == ["es"]
    assert 0 < finals[0].language_confidence < 0.8
    assert detector.requests[-1][1].language == "es"  # the decode that committed
    assert sum(1 for _, r in detector.requests if not r.partial) <= 2  # at most once more
