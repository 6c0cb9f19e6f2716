"""The cue builder (``stages.cues``) on scripted session events, and its files read back by
real parsers: ``webvtt-py`` for WebVTT and ``srt`` for SubRip."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import srt
import webvtt

from speechpipe.errors import InputError
from speechpipe.stages.cues import CueBuilder, CueOptions, cues_from_events, cues_from_records
from speechpipe.stages.frames import STREAM_RATE, OutputEvent, TextHypothesis, VadEvent
from speechpipe.transport.subtitle_files import (
    check_subtitle_path,
    format_srt,
    format_vtt,
    write_subtitles,
)


def pts(seconds: float) -> int:
    return round(seconds * STREAM_RATE)


def hyp(side: str, utterance: int, committed: str, tentative: str, start: float, heard: float,
        final: bool = False) -> TextHypothesis:
    return TextHypothesis(side, utterance, 0, committed, tentative,  # type: ignore[arg-type]
                          "es" if side == "source" else "en", pts(start), pts(heard),
                          pts(heard), final)


def utterance(number: int, start: float, end: float, words: list[str], side: str = "target",
              pauses: tuple[float, ...] = ()) -> list[OutputEvent]:
    """A scripted utterance: speech from ``start`` to ``end``; its words committed two by two
    as the audio is heard, 0.4 s after they were spoken (with the next two words tentative),
    then final."""
    events: list[OutputEvent] = [VadEvent("start", number, pts(start), pts(start) + 1)]
    step = (end - start) / -(-len(words) // 2)
    heard = start + step + 0.4
    count = 0
    while count < len(words):
        count = min(count + 2, len(words))
        events.append(hyp(side, number, " ".join(words[:count]),
                          " ".join(words[count:count + 2]), start - 0.2, heard))
        for p in pauses:
            if heard - step < p <= heard:
                events.append(VadEvent("pause", number, pts(p), pts(heard)))
        heard += step
    events.append(VadEvent("end", number, pts(end), pts(end) + 1))
    events.append(hyp(side, number, " ".join(words), "", start - 0.2, max(heard, end + 0.3),
                      final=True))
    return events


SENTENCES = ("The cat sleeps in the house because it is very cold. Tomorrow we will go to "
             "the market early and buy bread, cheese and fresh fruit for the whole week.").split()


def test_committed_words_only_in_order_and_inside_the_speech() -> None:
    events = utterance(0, 1.0, 9.0, SENTENCES)
    # a tentative word that never got committed is not shown
    events.insert(3, hyp("target", 0, "The cat", "purrs loudly", 0.8, 1.6))
    cues = cues_from_events(events, "target", duration_s=10.0)
    assert " ".join(c.text.replace("\n", " ") for c in cues).split() == SENTENCES
    assert "purrs" not in " ".join(c.text for c in cues)
    for a, b in zip(cues, cues[1:], strict=False):
        assert a.start < a.end <= b.start < b.end
    assert cues[0].start >= 1.0 and cues[-1].end <= 10.0


def test_cut_at_sentence_ends_and_readable_lengths() -> None:
    options = CueOptions()
    cues = cues_from_events(utterance(0, 0.5, 12.0, SENTENCES * 2), duration_s=13.0)
    assert cues[0].text.replace("\n", " ").endswith("very cold.")  # a sentence ends a cue
    for cue in cues:
        assert len(cue.lines) <= options.max_lines
        assert all(len(line) <= options.max_line_chars for line in cue.lines), cue
        assert cue.end - cue.start <= options.max_cue_s + 1e-9
        assert "." not in cue.text.replace("\n", " ")[:-1]  # no sentence end inside a cue


def test_a_long_sentence_is_cut_before_seven_seconds() -> None:
    words = ("one two three four five six seven eight nine ten eleven twelve " * 2).split()
    cues = cues_from_events(utterance(0, 0.0, 14.0, words), duration_s=15.0)
    assert len(cues) >= 2
    assert all(c.end - c.start <= 7.0 for c in cues)


def test_a_pause_cuts_a_cue() -> None:
    words = "we start now and then after a moment we go on".split()
    # the speaker pauses at 2.0 s, after "and" (the 4th of 10 words over 0.0-5.0 s)
    cues = cues_from_events(utterance(0, 0.0, 5.0, words, pauses=(2.0,)), duration_s=6.0)
    assert len(cues) == 2, cues
    assert cues[0].text.split()[-1] in ("now", "and", "then")


def test_a_pause_never_leaves_a_cue_too_short_to_read() -> None:
    words = "from the outside to the back we have a table here.".split()
    # a pause right before the last two words: they join the cue before them
    cues = cues_from_events(utterance(0, 0.0, 4.0, words, pauses=(3.3,)), duration_s=5.0)
    assert [c.text.replace("\n", " ") for c in cues] == [" ".join(words)]


def test_a_word_ends_no_later_than_the_audio_heard_when_it_was_committed() -> None:
    # the first four words were committed once 1.5 s had been heard, in a 10 s utterance:
    # spread evenly they would end at ~2.7 s; they cannot have been spoken after 1.5 s
    words = "Hola a todos. Bienvenidos a la charla de hoy sobre el tiempo y el clima".split()
    events: list[OutputEvent] = [VadEvent("start", 0, pts(0.5), pts(0.6))]
    events.append(hyp("source", 0, "Hola a todos.", "", 0.3, 1.5))
    events.append(VadEvent("end", 0, pts(10.0), pts(10.2)))
    events.append(hyp("source", 0, " ".join(words), "", 0.3, 10.2, final=True))
    cues = cues_from_events(events, "source", duration_s=11.0)
    assert cues[0].text == "Hola a todos."
    assert cues[0].start == 0.5 and cues[0].end <= 1.5 + 1e-9
    assert cues[1].start <= 1.5 + 1e-9  # the rest is spread over the speech left


def test_a_translation_starts_no_earlier_than_the_speech_it_translates() -> None:
    source = utterance(0, 2.0, 6.0, "El gato duerme en la casa porque hace frío.".split(),
                       side="source")
    target = utterance(0, 2.0, 6.0, "The cat sleeps in the house because it is cold.".split())
    events = [*source, *target, *utterance(1, 8.0, 9.5, ["Yes."]),
              *utterance(1, 8.0, 9.5, ["Sí."], side="source")]
    builder = CueBuilder()
    for event in events:
        builder.add(event)
    src, tgt = builder.cues("source"), builder.cues("target")
    assert [c.utterance for c in tgt] == [0, 1]
    for cue in tgt:
        first_source = min(c.start for c in src if c.utterance == cue.utterance)
        assert cue.start >= first_source
    assert builder.languages("source") == ["es"] and builder.languages("target") == ["en"]


def test_unspaced_scripts_are_cut_into_lines_too() -> None:
    text = "今天天气很好我们去公园散步吧然后一起吃晚饭再看一场电影最后回家睡觉明天还要早起上班" * 2
    events = [VadEvent("start", 0, 0, 1), hyp("source", 0, text, "", 0.0, 6.0, final=True),
              VadEvent("end", 0, pts(6.0), pts(6.1))]
    cues = cues_from_events(events, "source", duration_s=7.0)
    assert "".join(c.text.replace("\n", "") for c in cues) == text
    assert all(len(line) <= 42 for c in cues for line in c.lines)


def test_records_give_the_same_cues_as_events() -> None:
    from speechpipe.evaluation.trace import TraceBuilder
    from speechpipe.transport.file_replay import ReplayEvent

    events = utterance(0, 1.0, 6.0, SENTENCES[:12]) + utterance(0, 1.0, 6.0, SENTENCES[:12],
                                                                 side="source")[1:-1]
    trace = TraceBuilder(16000)
    for event in events:
        trace.add(ReplayEvent(0.0, event))
    for side in ("source", "target"):
        assert cues_from_records(trace.records, side) == cues_from_events(events, side)


def test_the_builder_keeps_at_most_its_bound() -> None:
    builder = CueBuilder(max_utterances=3)
    for n in range(10):
        for event in utterance(n, n * 3.0, n * 3.0 + 2.0, ["Word", "number", f"{n}."]):
            builder.add(event)
    assert len(builder) == 3
    assert [c.utterance for c in builder.cues("target")] == [7, 8, 9]


def test_files_parse_with_real_parsers(tmp_path: Path) -> None:
    events = utterance(0, 0.5, 9.0, SENTENCES) + utterance(1, 11.0, 12.0, ["<b>A&B</b>", "-->"])
    cues = cues_from_events(events, duration_s=13.0)
    parsed = webvtt.from_buffer(io.StringIO(format_vtt(cues)))
    assert parsed.captions[0].start == "00:00:00.500"
    assert len(parsed) == len(cues)
    assert parsed.captions[-1].text == "&lt;b&gt;A&amp;B&lt;/b&gt; --&gt;"  # escaped markup
    subs = list(srt.parse(format_srt(cues)))
    assert [s.content for s in subs] == [c.text for c in cues]
    assert [round(s.start.total_seconds(), 3) for s in subs] == [c.start for c in cues]
    write_subtitles(tmp_path / "out.srt", cues)
    write_subtitles(tmp_path / "out.vtt", cues)
    assert len(list(srt.parse((tmp_path / "out.srt").read_text()))) == len(cues)
    assert len(webvtt.read(str(tmp_path / "out.vtt"))) == len(cues)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.srt", "out.vtt"]  # no temp left


def test_subtitle_paths_are_checked(tmp_path: Path) -> None:
    assert check_subtitle_path(tmp_path / "a.VTT") == "vtt"
    assert check_subtitle_path(tmp_path / "a.srt") == "srt"
    with pytest.raises(InputError, match=r"\.vtt .*\.srt"):
        check_subtitle_path(tmp_path / "a.txt")
    with pytest.raises(InputError, match="does not exist"):
        check_subtitle_path(tmp_path / "nope" / "a.vtt")
    (tmp_path / "dir.vtt").mkdir()
    with pytest.raises(InputError, match="is a folder"):
        check_subtitle_path(tmp_path / "dir.vtt")
