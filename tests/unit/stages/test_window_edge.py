"""Nothing at a window's edge is final (issues 40 and 45): settled commits, the translation
resting on the captions, sentence ends held until confirmed, phrases voiced as continuations."""

from __future__ import annotations

import numpy as np

from speechpipe.stages.asr_options import AsrOptions
from speechpipe.stages.channels import Channel
from speechpipe.stages.clock import BasisStreamClock
from speechpipe.stages.commit import CommitPolicy, settled_count, split_sentence_end
from speechpipe.stages.frames import STREAM_RATE, SpeechChunk, TextHypothesis
from speechpipe.stages.model_api import DecodeKind, DecodeResult, WhisperResult
from speechpipe.stages.phrases import (
    CONTINUATION_TAIL_S,
    PhraseOptions,
    continuation_audio,
    is_continuation,
    voice_text,
)
from speechpipe.stages.tts import TtsStage
from speechpipe.stages.utterance import UtteranceDecoder


def test_settled_count_stops_at_the_first_word_too_close_to_the_edge_never_the_last():
    assert settled_count(4, (0.5, 1.0, 1.6, 2.0), frontier_s=1.6) == 3
    assert settled_count(4, (0.5, 1.0, 1.7, 2.0), frontier_s=1.6) == 2
    assert settled_count(3, (0.5, 1.0, 1.2), frontier_s=9.0) == 2  # never the last word
    assert settled_count(1, (0.5,), frontier_s=9.0) == 0
    assert settled_count(3, (), frontier_s=9.0) == 2  # no times: all but the last


def test_split_sentence_end():
    assert split_sentence_end("limitations.") == ("limitations", ".")
    assert split_sentence_end("why?!") == ("why", "?!")
    assert split_sentence_end("Mr.") == ("Mr.", "")
    assert split_sentence_end("3.5") == ("3.5", "")
    assert split_sentence_end("...") == ("...", "")


def test_policy_keeps_an_agreed_word_tentative_until_the_audio_settles_it():
    policy = CommitPolicy("agreement", 2, settle_margin_s=0.4)
    # two decodes agree on "the bat is", but "bat" ends 0.1 s before the audio's end
    assert policy.update("the bat".split(), (0.4, 1.4), heard_s=1.5) == []
    assert policy.update("the bat is".split(), (0.4, 1.4, 1.5), heard_s=1.6) == ["the"]
    # the next decode hears the whole word: what it says is what commits
    assert policy.update("building is heated now".split(), (1.9, 2.1, 2.6, 3.0),
                         heard_s=3.2) == []
    assert policy.update("building is heated now".split(), (1.9, 2.1, 2.6, 3.1),
                         heard_s=3.4) == ["building", "is", "heated"]
    assert policy.committed == ["the", "building", "is", "heated"]
    assert policy.committed_end_s == 2.6


def test_a_windows_first_commit_takes_two_agreed_words_when_asked():
    """Issue 72, the README's own sample: two translate partials of "El gato duerme en la
    casa porque..." started "And I'm going to sleep..." and "And that's where I live...";
    agreement committed "And" alone and every later decode was forced through it. With
    ``first_words=2`` an opening agreement of one word commits nothing; after the first
    commit, one agreed word commits as before."""
    hypotheses = ["And I'm going to sleep".split(), "And that's where I live".split(),
                  "The cat is sleeping in the".split(), "The cat is sleeping in the house".split()]
    today = CommitPolicy("agreement", 2, lookback=2)
    assert today.update(hypotheses[0]) == [] and today.update(hypotheses[1]) == ["And"]
    asked = CommitPolicy("agreement", 2, lookback=2, first_words=2)
    assert [asked.update(h) for h in hypotheses] == [
        [], [], [], ["The", "cat", "is", "sleeping", "in", "the"]]
    # once something is committed, one agreed word commits ("house", with the last tail)
    assert asked.update(["house", "because"]) == ["house"]


def test_agreement_alone_commits_the_half_heard_word():
    """The policy before issue 40, for comparison: the same two decodes commit "bat"."""
    policy = CommitPolicy("agreement", 2, settle_margin_s=0.0)
    policy.update("the bat".split(), (0.4, 1.4), heard_s=1.5)
    assert policy.update("the bat is".split(), (0.4, 1.4, 1.5), heard_s=1.6) == ["the", "bat"]


def test_one_decodes_alignment_commits_no_word_at_the_edge_either():
    """``asr.commit_policy=align`` commits after one decode the words its alignment puts
    ``align_margin_s`` before the end of the audio, and keeps the edge rule: never the last
    word of the hypothesis (a partial the length cap stopped may end inside a word, however
    early), never a word past the frontier (the committed captions)."""
    edge_ruled = CommitPolicy("align", 2, align_margin_s=1.0, settle_margin_s=0.4)
    # "a" and "bat" both end over 1 s before the 3 s heard: "bat" is the last word
    assert edge_ruled.update("a bat".split(), (0.5, 1.0), heard_s=3.0) == ["a"]
    assert edge_ruled.tentative == ["bat"]
    without = CommitPolicy("align", 2, align_margin_s=1.0, settle_margin_s=0.0)
    assert without.update("a bat".split(), (0.5, 1.0), heard_s=3.0) == ["a", "bat"]
    # the frontier: only "we" ends before the captions' end at 1.0 s
    bounded = CommitPolicy("align", 2, align_margin_s=1.0, settle_margin_s=0.4)
    assert bounded.update("we found a way".split(), (0.5, 1.5, 1.8, 3.5), heard_s=4.0,
                          frontier_s=1.0) == ["we"]
    # two decodes that agree still commit what is settled, as with agreement
    assert bounded.update("found a way out".split(), (1.5, 1.8, 2.4, 3.9), heard_s=4.5,
                          frontier_s=3.0) == ["found", "a", "way"]


def _decoder(**options) -> UtteranceDecoder:
    decoder = UtteranceDecoder(utterance=0, start_pts=0,
                               options=AsrOptions(settle_margin_s=0.4, **options),
                               language="fr", translate=True)
    decoder.add(np.zeros(4 * STREAM_RATE, np.int16), 4 * STREAM_RATE)
    return decoder


def _result(source: tuple[str, tuple[float, ...]] | None,
            target: tuple[str, tuple[float, ...]] | None,
            glued: str = "") -> WhisperResult:
    decodes = []
    if source is not None:
        decodes.append(DecodeResult("transcribe", source[0], -0.2, 0.01, word_ends=source[1],
                                    glued=glued))
    if target is not None:
        decodes.append(DecodeResult("translate", target[0], -0.2, 0.01, word_ends=target[1],
                                    glued=glued))
    return WhisperResult("fr", 1.0, tuple(decodes), 0.0, 0.0)


def _at(seconds: float) -> int:
    return int(seconds * STREAM_RATE)


def test_the_translation_commits_no_word_past_the_committed_captions():
    decoder = _decoder()
    source = ("le bâtiment est chauffé", (0.5, 1.2, 1.5, 2.4))
    target = ("the building is heated", (0.5, 1.3, 1.6, 2.4))
    decoder.apply(_result(source, target), DecodeKind.PARTIAL, _at(2.6))
    # captions settled up to "bâtiment" (ends 1.2 <= 2.8 - 0.4; "est" is next, 1.5 <= 2.4)
    decoder.apply(_result(source, target), DecodeKind.PARTIAL, _at(2.8))
    assert decoder.source.committed == ["le", "bâtiment", "est"]
    # "is" ends at 1.6, after the captions' end (1.5): it waits
    assert decoder.target.committed == ["the", "building"]
    assert decoder.source_settled_pts == _at(1.5)


def test_an_utterances_opening_caption_words_need_more_settled_audio():
    """``asr.opening_settle_s``: the first caption words wait for more audio after them;
    once one is committed the usual margin holds, and the translation waits with them."""
    source = ("le bâtiment est chauffé", (0.5, 1.2, 1.5, 2.4))
    target = ("the building is heated", (0.5, 1.3, 1.6, 2.4))
    decoder = _decoder(opening_settle_s=0.5)
    decoder.apply(_result(source, target), DecodeKind.PARTIAL, _at(2.6))
    decoder.apply(_result(source, target), DecodeKind.PARTIAL, _at(2.8))
    # frontier 2.8 - 0.4 - 0.5 = 1.9: "est" (1.5) settles, as before; at 2.4 only "le"
    assert decoder.source.committed == ["le", "bâtiment", "est"]
    late = _decoder(opening_settle_s=0.5)
    late.apply(_result(source, target), DecodeKind.PARTIAL, _at(1.9))
    late.apply(_result(source, target), DecodeKind.PARTIAL, _at(2.0))
    assert late.source.committed == ["le"]  # "bâtiment" ends at 1.2 > 2.0 - 0.9
    assert late.target.committed == ["the"]  # nothing past the captions' end (0.5)
    # with a word committed the usual 0.4 s margin applies: "bâtiment" and "est" settle
    late.apply(_result(("bâtiment est chauffé", (1.2, 1.5, 2.4)),
                       ("building is heated", (1.3, 1.6, 2.4))), DecodeKind.PARTIAL, _at(2.6))
    assert late.source.committed == ["le", "bâtiment", "est"]
    plain = _decoder()
    plain.apply(_result(source, target), DecodeKind.PARTIAL, _at(1.9))
    plain.apply(_result(source, target), DecodeKind.PARTIAL, _at(2.0))
    assert plain.source.committed == ["le", "bâtiment", "est"]  # without it: 1.5 <= 1.6


def test_without_caption_partials_the_translation_settles_on_its_own_audio():
    decoder = _decoder(source_partials=False)
    target = ("the building is heated", (0.5, 1.3, 1.6, 2.4))
    decoder.apply(_result(None, target), DecodeKind.PARTIAL, _at(2.6))
    decoder.apply(_result(None, target), DecodeKind.PARTIAL, _at(2.8))
    assert decoder.target.committed == ["the", "building", "is"]


def _target_partial(decoder: UtteranceDecoder, words: str, ends: tuple[float, ...],
                    heard_s: float, glued: str = "") -> None:
    decoder.apply(_result(None, (words, ends), glued), DecodeKind.PARTIAL, _at(heard_s))


def test_a_sentence_end_at_the_commit_edge_is_held_and_dropped_when_the_sentence_goes_on():
    decoder = _decoder(target_rests_on_captions=False)
    _target_partial(decoder, "subject to limitations. And", (0.3, 0.6, 1.4, 2.5), 2.7)
    _target_partial(decoder, "subject to limitations. And", (0.3, 0.6, 1.4, 2.5), 2.9)
    assert decoder.text("target") == "subject to limitations"  # the "." is not final
    assert decoder.edge["target"] == "."
    # the next decode, forced to continue "limitations", goes on without a sentence end
    # ("and" agrees with the older hypothesis's "And" at once; the rest one decode later)
    _target_partial(decoder, "and exemptions apply", (1.8, 2.4, 3.0), 3.4)
    assert decoder.text("target") == "subject to limitations and"
    _target_partial(decoder, "exemptions apply", (2.4, 3.0), 3.6)
    assert decoder.text("target") == "subject to limitations and exemptions"


def test_a_held_sentence_end_is_committed_with_the_words_that_confirm_it():
    decoder = _decoder(target_rests_on_captions=False)
    _target_partial(decoder, "It is late. We", (0.3, 0.6, 1.4, 2.5), 2.7)
    _target_partial(decoder, "It is late. We", (0.3, 0.6, 1.4, 2.5), 2.9)
    assert decoder.text("target") == "It is late"
    # more audio, and the decoder still ends the sentence there: committed with "We go"
    _target_partial(decoder, "We go home", (1.8, 2.4, 3.0), 3.4, glued=".")
    assert decoder.text("target") == "It is late. We"
    _target_partial(decoder, "go home", (2.4, 3.0), 3.6)
    assert decoder.text("target") == "It is late. We go"


def test_a_partial_glues_no_punctuation_it_commits_no_words_after():
    decoder = _decoder(target_rests_on_captions=False)
    _target_partial(decoder, "It is late now", (0.3, 0.6, 1.4, 2.0), 2.6)
    _target_partial(decoder, "It is late now", (0.3, 0.6, 1.4, 2.0), 2.8)
    assert decoder.text("target") == "It is late"
    _target_partial(decoder, "", (), 2.9, glued=".")  # the window's edge: nothing follows
    assert decoder.text("target") == "It is late"


def test_the_utterance_end_keeps_its_sentence_end():
    decoder = _decoder(target_rests_on_captions=False)
    _target_partial(decoder, "It is late. We", (0.3, 0.6, 1.4, 2.5), 2.7)
    _target_partial(decoder, "It is late. We", (0.3, 0.6, 1.4, 2.5), 2.9)
    decoder.ended = True
    decoder.apply(_result(None, ("We go home.", (2.0, 2.5, 3.0)), glued="."), DecodeKind.FINAL,
                  _at(4.0))
    assert decoder.text("target") == "It is late. We go home."


def test_a_pause_holds_its_sentence_end_and_the_end_of_the_utterance_confirms_it():
    decoder = _decoder(target_rests_on_captions=False)
    decoder.apply(_result(None, ("It is late.", (0.3, 0.6, 1.4))), DecodeKind.PAUSE,
                  _at(2.0))
    assert decoder.text("target") == "It is late"
    decoder.last_decode_end, decoder.last_voiced_end = _at(2.0), _at(1.5)
    decoder.commit_last()  # the pause grew into the utterance's end
    assert decoder.text("target") == "It is late."


def test_voice_text_speaks_a_mid_sentence_phrase_as_a_continuation():
    assert voice_text("subject to certain limitations", ends_utterance=False) == \
        "subject to certain limitations,"
    assert voice_text("in the hills;", ends_utterance=False) == "in the hills,"
    assert voice_text("It is late.", ends_utterance=False) == "It is late."
    assert voice_text("We go home", ends_utterance=True) == "We go home"


def test_a_continuation_keeps_only_a_short_pause_of_the_voice_s_closing_silence():
    rate = 16000
    voiced = np.full(rate // 2, 8000, np.int16)
    audio = np.concatenate([np.zeros(400, np.int16), voiced, np.full(rate // 5, 40, np.int16)])
    trimmed = continuation_audio(audio, rate)
    assert len(trimmed) == 400 + len(voiced) + int(CONTINUATION_TAIL_S * rate)
    assert np.array_equal(trimmed[: 400 + len(voiced)], audio[: 400 + len(voiced)])
    assert len(continuation_audio(np.zeros(160, np.int16), rate)) == 160  # silence: as is
    assert is_continuation("and we", ends_utterance=False)
    assert not is_continuation("It is late.", ends_utterance=False)
    assert not is_continuation("and we", ends_utterance=True)


async def test_the_voice_gets_continuations_mid_sentence_and_the_end_at_the_end():
    said: list[str] = []

    async def speak(text: str, speed: float, due: float | None = None) -> np.ndarray:
        said.append(text)
        # a voice's audio closes with ~0.2 s of quiet
        return np.concatenate([np.full(1600, 1000, np.int16), np.zeros(3200, np.int16)])

    stage = TtsStage(speak, BasisStreamClock(), 16000, PhraseOptions(cut="count"))
    inbox: Channel[TextHypothesis] = Channel(8)
    events: Channel = Channel(64)

    def hyp(committed: str, tentative: str, final: bool) -> TextHypothesis:
        return TextHypothesis(side="target", utterance=0, revision=1, committed=committed,
                              tentative=tentative, language="en", audio_start=0,
                              audio_end=STREAM_RATE, stream_pts=STREAM_RATE, final=final)

    await inbox.put(hyp("It is late and we", "go", False))
    await inbox.put(hyp("It is late and we go home now", "", True))
    inbox.close()
    await stage.run(inbox, events)
    chunks = [e async for e in events if isinstance(e, SpeechChunk)]
    assert said[0].endswith(",") and not said[-1].endswith(",")
    assert " ".join(c.text for c in chunks) == "It is late and we go home now"
    # the continuation flows into the next phrase; the utterance's end keeps its silence
    assert len(chunks[0].samples) == 1600 + int(CONTINUATION_TAIL_S * 16000)
    assert len(chunks[-1].samples) == 1600 + 3200


def test_the_engine_aligns_only_a_decode_that_could_commit():
    from speechpipe.models.whisper.align import may_commit

    decoder = _decoder(target_rests_on_captions=False)
    assert decoder.request(DecodeKind.PARTIAL).align_starts == ()  # no earlier hypothesis yet
    _target_partial(decoder, "The building is", (0.5, 1.2, 1.6), 2.0)
    request = decoder.request(DecodeKind.PARTIAL)
    assert dict(request.align_starts)["translate"] == frozenset({"the"})
    agreeing = [DecodeResult("translate", "the building is warm", -0.2, 0.0)]
    other = [DecodeResult("translate", "a building", -0.2, 0.0)]
    assert may_commit(request, "translate", agreeing)
    assert not may_commit(request, "translate", other)


def _both_partial(decoder: UtteranceDecoder, source: str, source_ends: tuple[float, ...],
                  target: str, target_ends: tuple[float, ...], heard_s: float,
                  source_glued: str = "", target_glued: str = "") -> None:
    decodes = (DecodeResult("transcribe", source, -0.2, 0.01, word_ends=source_ends,
                            glued=source_glued),
               DecodeResult("translate", target, -0.2, 0.01, word_ends=target_ends,
                            glued=target_glued))
    decoder.apply(WhisperResult("fr", 1.0, decodes, 0.0, 0.0), DecodeKind.PARTIAL, _at(heard_s))


def test_a_translation_sentence_end_the_captions_do_not_make_is_dropped():
    """Issue 45: "subject to certain limitations. And exemptions." The captions of the same
    audio go on without a sentence end, so the translation's held stop is not committed."""
    decoder = _decoder()
    source = ("sujet à des limitations et", (0.3, 0.5, 0.7, 1.4, 2.5))
    target = ("subject to limitations. And", (0.3, 0.6, 1.4, 2.5))
    _both_partial(decoder, *source, *target, 2.7)
    _both_partial(decoder, *source, *target, 2.9)
    assert decoder.text("source") == "sujet à des limitations"
    assert decoder.text("target") == "subject to limitations"
    assert decoder.edge["target"] == "."
    # the next decode still ends the translation's sentence there; the captions do not
    for heard_s in (3.6, 3.8):
        _both_partial(decoder, "et exemptions", (2.5, 3.0), "And exemptions", (2.5, 3.0),
                      heard_s, target_glued=".")
    assert decoder.text("source") == "sujet à des limitations et"
    assert decoder.text("target") == "subject to limitations And"


def test_a_translation_sentence_end_the_captions_make_is_committed():
    decoder = _decoder()
    source = ("il est tard. Nous", (0.3, 0.6, 1.4, 2.5))
    target = ("It is late. We", (0.3, 0.6, 1.4, 2.5))
    _both_partial(decoder, *source, *target, 2.7)
    _both_partial(decoder, *source, *target, 2.9)
    assert decoder.text("target") == "It is late"
    for heard_s in (3.6, 3.8):
        _both_partial(decoder, "Nous rentrons", (2.5, 3.0), "We go home", (2.5, 3.0, 3.2),
                      heard_s, ".", ".")
    assert decoder.text("source") == "il est tard. Nous"
    assert decoder.text("target") == "It is late. We"


def test_sentence_end_count():
    from speechpipe.stages.commit import sentence_end_count
    assert sentence_end_count("Mr. Smith is late. Are you? Yes!") == 3
    assert sentence_end_count("3.5 percent, more or less") == 0
    assert sentence_end_count("今天很冷。你好吗？") == 2
