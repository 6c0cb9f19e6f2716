"""Issues 40 and 45, the measurement side of ``speechpipe eval --offline-reference``: commit
regret (committed words the same model's offline decode lacks), extra sentence ends, pieces
in the wrong language, and utterances short of their span's offline translation."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from speechpipe.evaluation.evaluate import _aggregate, span_coverage, utterance_regret
from speechpipe.evaluation.offline import OfflineCache, cache_key, offline_references
from speechpipe.evaluation.regret import (
    commit_aggregate,
    commit_fields,
    content_kept,
    extra_mid_sentence_ends,
    extra_sentence_ends,
    mid_sentence_ends,
    print_commit_figures,
    regret,
    regret_counts,
    sentence_ends,
    short_of_offline,
    utterance_spans,
)
from speechpipe.evaluation.scores import final_texts
from speechpipe.stages.target_language import in_language

# --- commit regret ---------------------------------------------------------------------------


def test_regret_is_the_share_of_committed_words_offline_lacks():
    # the half-heard first word of issue 40: "bat" where offline says "building"
    assert regret_counts("The bat is heated by the sun.", "the building is heated by the sun") \
        == (1, 7)
    assert regret("the bat is heated", "The building is heated.") == pytest.approx(0.25)
    # case and punctuation are the scorer's normalization, not regret
    assert regret("Hello, World!", "hello world") == 0.0
    # words offline has and the stream has not yet said cost nothing: regret is on commits
    assert regret("we went", "we went to the beach") == 0.0
    # a word said in another place counts once, not twice
    assert regret("to the beach we went", "we went to the beach") == pytest.approx(0.4)
    assert regret("", "we went") is None and regret("  ", "") is None
    assert regret("so so so", "") == 1.0


# --- sentence ends ---------------------------------------------------------------------------


def test_content_kept_counts_the_offline_meaning_the_stream_lost():
    # issue 72: the README's own sample, committed "The" from two hypotheses that shared
    # nothing else, then forced "old woman" through every later decode
    offline = "The cat is sleeping in the house because it is very cold."
    assert content_kept("The old woman in the house because it makes a lot of cold.",
                        offline, "en") == (2, 4)  # house, cold; not cat, sleeping
    assert content_kept("The cat is sleeping in the house, because it's very cold.",
                        offline, "en") == (4, 4)
    assert content_kept("cat cat", "cat cat cat", "en") == (2, 3)  # counted with repeats
    assert content_kept("anything", "", "en") == (0, 0)
    # a language without a stop-word list counts every word
    assert content_kept("a b", "a b c", "xx") == (2, 3)
    rows = [{"id": "ok", "content_kept": 4, "content_offline": 4, "category": "c",
             "committed_words_target": 4, "unmatched_words_target": 0},
            {"id": "lost", "content_kept": 2, "content_offline": 4, "category": "c",
             "committed_words_target": 4, "unmatched_words_target": 2}]
    aggregate = commit_aggregate(rows)
    assert aggregate["content_kept"] == 0.75 and aggregate["clips_losing_content"] == 1
    out = io.StringIO()
    print_commit_figures({"aggregate": aggregate, "clips": rows}, out)
    assert "75.0 %" in out.getvalue() and "lost 2/4" in out.getvalue()


def test_sentence_ends_skip_abbreviations_initials_and_numbers():
    assert sentence_ends("subject to certain limitations. And exemptions.") == 2
    assert sentence_ends("Mr. Smith met Dr. Jones at 3.5 p.m. today.") == 1
    assert sentence_ends("J. R. R. Tolkien wrote it, etc. in 1937.") == 1
    assert sentence_ends("Really? Yes! Well\u2026 \"Fine.\"") == 4
    assert sentence_ends("wait ... what") == 0
    assert sentence_ends("") == 0
    # issue 45's clip: the stream ends a sentence the speaker did not
    streamed = "chemistry that biological. is a key position."
    assert extra_sentence_ends(streamed, "chemistry that biology is a key position.") == 1
    assert extra_sentence_ends("One. Two.", "One. Two.") == 0


def test_sentence_ends_inside_an_utterance_leave_out_the_ends_a_pause_confirms():
    # es_fisher_3481: the stream's final stop, which the offline text lacks, is the speaker's
    assert extra_sentence_ends("if he wants to replace it.", "if he is going to replace it") == 1
    assert extra_mid_sentence_ends(["if he wants to replace it."],
                                   "if he is going to replace it") == 0
    # two utterances: each one's last word ends where the speaker paused
    assert extra_mid_sentence_ends(["It is late.", "We go home."], "It is late, we go home") == 0
    # a stop inside an utterance still counts
    assert extra_mid_sentence_ends(["another engine. which can be used."],
                                   "another engine which can be used") == 1
    assert mid_sentence_ends("One. Two.") == 1


# --- the language check ----------------------------------------------------------------------


def test_a_french_piece_in_an_english_slot_is_the_wrong_language():
    french = "La parole a monsieur la langue ramadière. Pour soutenir la mandemo numéro 7."
    assert in_language(french, "en", ["fr"]) is False
    assert in_language("The building is heated by the sun every day.", "en", ["fr"]) is True
    assert in_language("Hello there friend", "en", ["fr"]) is None  # 3 words: not judged
    # no alternative to tell it from (a clip already in the target language)
    assert in_language("The building is heated by the sun.", "en", ["en"]) is None
    assert in_language("Die Katze schläft im ganzen Haus.", "en", ["de"]) is False


# --- the eval path on a scripted trace -------------------------------------------------------


def _text(event, utt, committed, t):
    return {"event": event, "stream_t": t, "utterance": utt, "revision": 1,
            "committed": committed, "tentative": ""}


def _trace(first: str, second: str) -> list[dict]:
    return [
        {"event": "vad.start", "stream_t": 0.7, "utterance": 0, "audio_t": 0.5},
        _text("asr.commit", 0, "le bâtiment est chauffé", 1.5),
        _text("mt.commit", 0, first, 1.6),
        {"event": "vad.end", "stream_t": 3.5, "utterance": 0, "audio_t": 3.0},
        {"event": "utterance.end", "stream_t": 3.6, "utterance": 0, "text": first,
         "source_text": "le bâtiment est chauffé", "language": "fr"},
        {"event": "vad.start", "stream_t": 4.2, "utterance": 1, "audio_t": 4.0},
        _text("asr.commit", 1, "très très finement", 5.0),
        _text("mt.commit", 1, second, 5.1),
        {"event": "error", "stream_t": 5.5, "utterance": 1, "code": "translation_incomplete",
         "message": "the translation covers 2 words of 3 heard"},
        {"event": "utterance.end", "stream_t": 5.6, "utterance": 1, "text": second,
         "source_text": "très très finement", "language": "fr"},
    ]


def _row(clip_id: str, records: list[dict], offline_source: str, offline_target: str,
         bleu_gap: float) -> dict:
    source, target = final_texts(records)
    return {"id": clip_id, "target_text": target, "source_text": source, "bleu": None,
            "wer": None, "duration_s": 6.0, "cpu_per_audio_s": 0.5, "rtf": 1.0,
            "words_in_non_speech": 0, "utterances_invented": 0, "utterances_dropped": 0,
            "utterances_repeated": 0, "bleu_gap": bleu_gap,
            **commit_fields(records, source, target, "en", "fr", offline_source,
                            offline_target)}


def test_commit_figures_from_a_scripted_trace_per_clip_and_category():
    offline_source = "le bâtiment est chauffé très très finement"
    offline_target = "The building is heated. Very, very finely."
    bad = _trace("The bat is heated.", "Very. Finely.")
    french = "Le bâtiment est chauffé par le soleil chaque jour."
    good = _trace("The building is heated.", french)
    rows = [_row("bad", bad, offline_source, offline_target, -12.5),
            _row("good", good, offline_source, offline_target, 0.0)]
    bad_row, good_row = rows
    # captions match offline; the translation's "bat" is not in it
    assert bad_row["regret_source"] == 0.0
    assert bad_row["regret_target"] == pytest.approx(1 / 6, abs=1e-4)
    assert (bad_row["unmatched_words_target"], bad_row["committed_words_target"]) == (1, 6)
    assert bad_row["extra_sentence_ends"] == 1  # "Very." ends a sentence offline does not
    assert bad_row["wrong_language_utterances"] == 0
    assert bad_row["translation_incomplete"] == 1
    assert good_row["wrong_language_utterances"] == 1  # French in the English voice
    assert good_row["extra_sentence_ends"] == 0
    # inside the utterances: "Very." (in "Very. Finely.") against offline's "heated." (the
    # stream's "heated." ends utterance 0, where the speaker paused): no extra
    assert bad_row["extra_mid_sentence_ends"] == 0

    clips = [{"id": "bad", "category": "read"}, {"id": "good", "category": "phone"}]
    aggregate = _aggregate(rows, clips, {}, 6.0, 12.0, 12.0)
    # word-weighted over the clips: 1 of 6 words + 9 of 13 (the French piece)
    assert aggregate["regret_target"] == pytest.approx((1 + 9) / (6 + 13), abs=1e-4)
    assert aggregate["regret_source"] == 0.0
    assert aggregate["clips_with_extra_sentence_ends"] == 1
    assert aggregate["share_extra_sentence_ends"] == 0.5
    assert aggregate["clips_with_extra_mid_sentence_ends"] == 0
    assert aggregate["clips_wrong_language"] == 1
    assert aggregate["translation_incomplete"] == 2
    assert aggregate["by_category"]["read"]["regret_target"] == bad_row["regret_target"]
    assert aggregate["by_category"]["phone"]["clips_wrong_language"] == 1

    out = io.StringIO()
    print_commit_figures({"clips": rows, "aggregate": aggregate}, out)
    text = out.getvalue()
    assert "commit regret" in text and "extra sentence ends on 1 of 2 clips" in text
    assert "wrong-language pieces: 1 utterances in 1 clips; good: 1" in text
    categories = {line.split()[0]: line.split()[1:] for line in
                  text[text.index("regret capt"):text.index("worst clips")].splitlines()[1:]}
    # captions, translation, share of clips with extra sentence ends (all, inside an
    # utterance), clips in another language
    # (no utterance regret in these rows: "-")
    # (no utterance or hindsight regret, no yardstick noise in these rows: "-")
    assert categories["read"] == ["0.0", "%", "16.7", "%", "-", "-", "-", "-", "-", "-",
                                  "100.0", "%", "0.0", "%", "0"]
    assert categories["phone"] == ["0.0", "%", "69.2", "%", "-", "-", "-", "-", "-", "-",
                                   "0.0", "%", "0.0", "%", "1"]
    worst = text[text.index("worst clips"):text.index("content words")].splitlines()[2:]
    assert [line.split()[0] for line in worst] == ["good", "bad"]  # worst first
    assert "-12.50" in worst[1]  # its streamed - offline BLEU beside it


def test_no_regret_without_the_offline_reference():
    records = _trace("The building is heated.", "Very finely.")
    row = commit_fields(records, *final_texts(records), "en", "fr")
    assert "regret_target" not in row and "extra_sentence_ends" not in row
    assert row["translation_incomplete"] == 1


# --- offline decodes: both sides, and utterance spans, cached -------------------------------

RATE = 16000


class ScriptedDecoder:
    """Stands in for Whisper's decode (seconds per call here; the real model's decode is
    covered by test_eval_offline's slow test): says the task and the audio's length."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, float]] = []

    def __call__(self, model, audio, language, task, beam) -> str:
        self.calls.append((language, task, round(len(audio) / RATE, 2)))
        words = "one two three four five six seven eight" if task == "translate" else "un deux"
        return words if len(audio) > 2 * RATE else "one"


def _clip(tmp_path: Path, lang: str = "fr") -> dict:
    path = tmp_path / f"{lang}.wav"
    sf.write(path, np.zeros(6 * RATE, np.int16), RATE, subtype="PCM_16")
    return {"id": f"clip-{lang}", "lang": lang, "path": str(path)}


def _model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.bin").write_bytes(b"weights")
    return folder


def test_offline_references_decode_both_sides_once_each(tmp_path: Path):
    clips = [_clip(tmp_path, "fr"), _clip(tmp_path, "en")]
    cache = OfflineCache(tmp_path / "cache")
    decode = ScriptedDecoder()
    model_dir = _model_dir(tmp_path)
    run = offline_references(None, model_dir, clips, 5, "en", cache=cache,
                             progress=False, decode=decode)
    # French: the translation and the captions; English: one transcription for both sides
    assert [(lang, task) for lang, task, _ in decode.calls] == [
        ("fr", "translate"), ("fr", "transcribe"), ("en", "transcribe")]
    assert run.texts["clip-fr"].startswith("one two") and run.source_texts["clip-fr"] == "un deux"
    assert run.texts["clip-en"] == run.source_texts["clip-en"] == "un deux"
    assert (run.decoded, run.cached) == (3, 0)
    again = offline_references(None, model_dir, clips, 5, "en", cache=cache,
                               progress=False, decode=decode)
    assert (again.decoded, again.cached) == (0, 3) and len(decode.calls) == 3
    assert again.source_texts == run.source_texts


async def test_utterances_are_held_against_their_own_spans_offline(tmp_path: Path):
    clip = _clip(tmp_path)
    decode = ScriptedDecoder()
    run = offline_references(None, _model_dir(tmp_path), [clip], 5, "en",
                             cache=OfflineCache(tmp_path / "cache"), progress=False,
                             decode=decode)
    decode.calls.clear()
    records = _trace("The building is heated by the sun today.", "Very.")
    assert utterance_spans(records, 6.0) == {0: (0.5, 3.0), 1: (4.0, 6.0)}  # runs to the end
    audio = np.zeros(6 * RATE, np.int16)
    figures = await span_coverage(run, clip, audio, records, 6.0, "en")
    # each span padded by 0.2 s (the second stops at the end of the audio)
    assert decode.calls == [("fr", "translate", 2.9), ("fr", "translate", 2.2)]
    # 1 word against the 8 its span gives offline; 8 against 8 is fine
    assert figures == {"utterances_spanned": 2, "utterances_short_of_offline": 1}
    assert (run.spans_decoded, run.spans_cached) == (2, 0)
    assert await span_coverage(run, clip, audio, records, 6.0, "en") == figures
    assert run.spans_cached == 2 and len(decode.calls) == 2  # from the cache
    # a single utterance is the whole clip: nothing to hold it against
    assert await span_coverage(run, clip, audio, records[:5], 6.0, "en") == {}
    assert short_of_offline("a b", "a b c d e") and not short_of_offline("a b c", "a b c d e")


def test_a_span_is_part_of_the_cache_key():
    base = ("a" * 64, "m", 5, "fr", "translate")
    assert len({cache_key(*base), cache_key(*base, (0.5, 3.0)), cache_key(*base, (0.5, 3.1))}) \
        == 3
    assert cache_key(*base, None) == cache_key(*base)  # whole-clip keys are unchanged


async def test_utterance_regret_holds_each_utterance_against_its_own_span(tmp_path: Path):
    clip = _clip(tmp_path)
    decode = ScriptedDecoder()
    run = offline_references(None, _model_dir(tmp_path), [clip], 5, "en",
                             cache=OfflineCache(tmp_path / "cache"), progress=False,
                             decode=decode)
    decode.calls.clear()
    # the first utterance says what its span says offline, the second one word of it that
    # the span lacks ("very") and one it has ("two")
    records = _trace("one two three four five six seven eight", "very two")
    audio = np.zeros(6 * RATE, np.int16)
    figures = await utterance_regret(run, clip, audio, records, 6.0, "en")
    # both sides, each span decoded once (padded by 0.2 s): captions, then translation
    assert decode.calls == [("fr", "transcribe", 2.9), ("fr", "transcribe", 2.2),
                            ("fr", "translate", 2.9), ("fr", "translate", 2.2)]
    assert figures["utterance_unmatched_words_target"] == 1
    assert figures["utterance_committed_words_target"] == 10
    assert figures["utterance_regret_target"] == 0.1
    # captions "le bâtiment est chauffé" / "très très finement" against "un deux": all unmatched
    assert figures["utterance_regret_source"] == 1.0
    # the translate spans are the ones span_coverage decodes: from the cache
    await span_coverage(run, clip, audio, records, 6.0, "en")
    assert len(decode.calls) == 4
    rows = [{"id": "c", "bleu": None, "wer": None, "duration_s": 6.0, "cpu_per_audio_s": 0.5,
             "rtf": 1.0, "words_in_non_speech": 0, "utterances_invented": 0,
             "utterances_dropped": 0, "utterances_repeated": 0, **figures}]
    aggregate = _aggregate(rows, [{"id": "c", "category": "read"}], {}, 6.0, 6.0, 6.0)
    assert aggregate["utterance_regret_target"] == 0.1
    # one utterance is the whole clip: its whole-clip offline texts, no decode
    single = await utterance_regret(run, clip, audio, records[:5], 6.0, "en")
    assert len(decode.calls) == 4
    assert single["utterance_committed_words_target"] == 8
    assert single["utterance_regret_target"] == 0.0  # the whole clip says these eight
    with pytest.raises(ValueError):
        run.span_texts(clip, audio, [(0.0, 1.0)], "en", "both")


# --- hindsight regret: the pipeline's own final decode of each whole utterance ---------------


class ScriptedEngine:
    """Stands in for ``WhisperEngine.run`` (the real engine's hindsight decode is covered by
    test_eval_offline's slow test): records each request, answers per task by the audio's
    length, and marks a translation of under 2 s as still in the wrong language."""

    def __init__(self) -> None:
        self.requests: list = []

    def run(self, request):
        from speechpipe.stages.model_api import DecodeResult, WhisperResult

        self.requests.append(request)
        seconds = len(request.audio) / RATE
        decodes = []
        for task in request.tasks:
            if task.task == "transcribe":
                text = "le bâtiment est chauffé" if seconds > 2.5 else "très finement"
            else:
                text = "The building is heated." if seconds > 2.5 else "Very finely."
            decodes.append(DecodeResult(task=task.task, continuation=text, avg_logprob=-0.2,
                                        no_speech_prob=0.0,
                                        wrong_language=task.task == "translate"
                                        and seconds < 1.0))
        return WhisperResult(language=request.language, language_prob=1.0,
                             decodes=tuple(decodes), encode_s=0.0, decode_s=0.0)


def test_the_hindsight_request_is_the_final_decode_with_nothing_forced():
    from speechpipe.evaluation.hindsight import hindsight_request, utterance_audio_spans
    from speechpipe.stages.asr_options import AsrOptions

    options = AsrOptions(final_beam_size=4, tokens_per_second=6.0, vocabulary_words=1000)
    request = hindsight_request(np.zeros(3 * RATE, np.float32), "fr", options, True)
    assert [(t.task, t.prefix, t.context) for t in request.tasks] == [
        ("transcribe", "", ""), ("translate", "", "")]
    assert request.language == "fr" and request.beam_size == 4 and not request.partial
    assert request.max_new_tokens == 8 + 18  # the final's cap for 3 s not yet committed
    assert request.vocabulary_words == 1000 and request.check_target_language
    assert not request.prefill and not request.word_times
    captions_only = hindsight_request(np.zeros(RATE, np.float32), "en", options, False)
    assert [t.task for t in captions_only.tasks] == ["transcribe"]
    assert not captions_only.check_target_language
    # the ASR stage's pre-roll before the VAD start, the end detection after it, in the input
    assert utterance_audio_spans({0: (0.2, 3.0), 1: (4.0, 5.9)}, 0.3, 6.0) == {
        0: (0.0, 3.3), 1: (3.7, 6.0)}


async def test_hindsight_regret_holds_each_utterance_against_its_own_final_decode():
    from types import SimpleNamespace

    from speechpipe.evaluation.evaluate import hindsight_regret
    from speechpipe.stages.asr_options import AsrOptions

    engine = ScriptedEngine()
    pipeline = SimpleNamespace(engine=engine, options=SimpleNamespace(asr=AsrOptions()))
    # utterance 0 committed "The bat is heated." (1 of 4 words not in its final decode);
    # utterance 1 "Very. Finely." against "Very finely.": all words there
    records = _trace("The bat is heated.", "Very. Finely.")
    audio = np.zeros(6 * RATE, np.int16)
    clip = {"id": "c", "lang": "fr"}
    figures = await hindsight_regret(pipeline, clip, audio, records, 6.0, "en",
                                     noise_paddings_s=())
    # one request per utterance over its audio (0.5-3.0 s, 4.0 s to the input's end),
    # widened by the pre-roll and the end detection; captions and translation together
    assert [round(len(r.audio) / RATE, 2) for r in engine.requests] == [3.1, 2.3]
    assert all(r.language == "fr" for r in engine.requests)
    assert figures["hindsight_unmatched_words_target"] == 1
    assert figures["hindsight_committed_words_target"] == 6
    assert figures["hindsight_regret_target"] == round(1 / 6, 4)
    assert figures["hindsight_regret_source"] == round(1 / 7, 4)  # "très" said twice
    assert figures["hindsight_target_text"] == "The building is heated. Very finely."
    assert figures["hindsight_unjudged_target"] == figures["hindsight_unjudged_source"] == 0
    rows = [{"id": "c", "bleu": None, "wer": None, "duration_s": 6.0, "cpu_per_audio_s": 0.5,
             "rtf": 1.0, "words_in_non_speech": 0, "utterances_invented": 0,
             "utterances_dropped": 0, "utterances_repeated": 0, **figures}]
    aggregate = _aggregate(rows, [{"id": "c", "category": "read"}], {}, 6.0, 6.0, 6.0)
    assert aggregate["hindsight_regret_target"] == round(1 / 6, 4)
    # a clip in the target language: captions only, no translation side
    engine.requests.clear()
    english = await hindsight_regret(pipeline, {"id": "e", "lang": "en"}, audio, records,
                                     6.0, "en", noise_paddings_s=())
    assert [[t.task for t in r.tasks] for r in engine.requests] == [["transcribe"]] * 2
    assert "hindsight_regret_target" not in english and "hindsight_regret_source" in english
    # a final decode still in the source language says nothing: that utterance is not judged
    short = [dict(r, audio_t=5.6) if r["event"] == "vad.start" and r["utterance"] == 1 else r
             for r in records]
    unjudged = await hindsight_regret(pipeline, clip, audio, short, 6.0, "en",
                                      noise_paddings_s=())
    assert unjudged["hindsight_unjudged_target"] == 1
    assert unjudged["hindsight_unjudged_source"] == 0
    assert unjudged["hindsight_committed_words_target"] == 4  # utterance 0's words only
    assert unjudged["hindsight_regret_target"] == 0.25


async def test_the_yardsticks_noise_is_its_own_decode_with_silence_around_it_held_against_it():
    """Each noise padding decodes every utterance once more with that silence around it, and
    those texts are held against the yardstick word for word, as committed words are."""
    from types import SimpleNamespace

    from speechpipe.evaluation.evaluate import hindsight_regret
    from speechpipe.evaluation.regret import commit_aggregate, print_commit_figures
    from speechpipe.stages.asr_options import AsrOptions

    engine = ScriptedEngine()
    pipeline = SimpleNamespace(engine=engine, options=SimpleNamespace(asr=AsrOptions()))
    records = _trace("The building is heated.", "Very finely.")
    audio = np.zeros(6 * RATE, np.int16)
    figures = await hindsight_regret(pipeline, {"id": "c", "lang": "fr"}, audio, records,
                                     6.0, "en",
                                     noise_paddings_s=((0.1, 0.0), (0.2, 0.0), (0.0, 0.3)))
    # the yardstick (3.1 s, 2.3 s), then each padding's decodes of both utterances
    assert [round(len(r.audio) / RATE, 2) for r in engine.requests] == [
        3.1, 2.3, 3.2, 2.4, 3.3, 2.5, 3.4, 2.6]
    # the scripted engine hears 2.6 s as the long sentence: only the 0.3 s after utterance 1
    # changes a text, 4 words the yardstick ("Very finely.") lacks, of 6 + 6 + 8 said
    assert figures["hindsight_noise_unmatched_words_target"] == 4
    assert figures["hindsight_noise_committed_words_target"] == 20
    assert figures["hindsight_noise_regret_target"] == 0.2
    assert figures["hindsight_noise_regret_source"] == 0.2
    assert figures["hindsight_regret_target"] == 0.0  # what was committed is the yardstick
    steady = {**figures, "hindsight_noise_unmatched_words_target": 0}
    aggregate = commit_aggregate([figures, steady])
    assert aggregate["hindsight_noise_regret_target"] == 0.1  # word-weighted over clips
    out = io.StringIO()
    print_commit_figures({"aggregate": {**aggregate, "regret_target": 0.0},
                          "clips": [{"id": "c", **figures}]}, out)
    assert "the yardstick's own noise" in out.getvalue()
    assert "captions 20.0 %, translation 10.0 %" in out.getvalue()
    worst = out.getvalue()[out.getvalue().index("worst clips"):].splitlines()
    assert "noise t" in worst[1] and worst[2].split()[:1] == ["c"]
    assert worst[2].split()[7:9] == ["20.0", "%"]  # the clip's own noise beside its regret
    # no paddings: no noise figure
    quiet = await hindsight_regret(pipeline, {"id": "c", "lang": "fr"}, audio, records, 6.0,
                                   "en", noise_paddings_s=())
    assert not any(key.startswith("hindsight_noise") for key in quiet)


def test_a_hindsight_translation_still_in_the_wrong_language_says_nothing():
    from speechpipe.evaluation.hindsight import hindsight_texts
    from speechpipe.stages.asr_options import AsrOptions

    engine = ScriptedEngine()
    audio = np.zeros(6 * RATE, np.int16)
    texts = hindsight_texts(engine, audio, [(0.0, 3.0), (3.0, 3.5), (6.0, 6.0)], "fr",
                            AsrOptions(), True)
    assert texts == [("le bâtiment est chauffé", "The building is heated."),
                     ("très finement", ""), ("", "")]
    assert len(engine.requests) == 2  # an empty span decodes nothing
