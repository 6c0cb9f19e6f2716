"""Subtitle cues from a session's events: the pure core behind ``translate --subtitles``,
``eval --report``'s subtitle files and a room's captions (no I/O, no clock).

A cue holds **committed** text only (never tentative words), cut where a reader expects it:
at sentence ends, at the speaker's pauses and at each utterance's end, and never longer than
two lines of 42 characters or 7 seconds (the usual broadcast limits).

Times are on the input's timeline (seconds of the stream). Whisper gives no word times on the
events, so a word's time is estimated: an utterance's committed words are spread over its
speech (from VAD's start to its end) in proportion to their length, and no word ends after
the audio that had been heard when it was committed (a word cannot be committed before it was
spoken). Both sides use the same span, so a translated cue starts no earlier than the speech
it translates started, and its words keep the order of the utterance.

``cues_from_events(events, side)`` is the library entry point (``speechpipe.cues_from_events``);
``cues_from_records`` reads trace records (``speechpipe.evaluation.trace``); ``CueBuilder``
takes either one at a time (a room's caption store) and keeps at most ``max_utterances``.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from speechpipe.stages.frames import STREAM_RATE, OutputEvent, TextHypothesis, VadEvent

__all__ = ["Cue", "CueOptions", "CueBuilder", "Side", "cues_from_events", "cues_from_records",
           "layout_lines"]

Side = Literal["source", "target"]

_UNSPACED = re.compile(  # scripts written without spaces: every character may end a line
    r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\u0e00-\u0e7f\u0e80-\u0eff"
    r"\u1000-\u109f\u1780-\u17ff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]"
)
_SENTENCE_END = re.compile(r"[.!?\u2026\u3002\uff01\uff1f\u061f\u0964][\"'\u201d\u00bb)\]]*$")


@dataclass(frozen=True, slots=True)
class CueOptions:
    """Readability limits of a cue."""

    max_line_chars: int = 42
    max_lines: int = 2
    max_cue_s: float = 7.0
    min_cue_s: float = 1.0  # shown at least this long where the next cue leaves room
    linger_s: float = 0.5  # after an utterance's last word, while nothing follows

    def __post_init__(self) -> None:
        if self.max_line_chars < 8 or self.max_lines < 1:
            raise ValueError("a cue needs at least one line of 8 characters")
        if not 0 < self.min_cue_s <= self.max_cue_s:
            raise ValueError("cue durations must satisfy 0 < min_cue_s <= max_cue_s")


@dataclass(frozen=True, slots=True)
class Cue:
    """One subtitle: ``text`` is its lines joined with newlines; seconds of the input."""

    start: float
    end: float
    text: str
    utterance: int
    language: str = ""

    @property
    def lines(self) -> list[str]:
        return self.text.split("\n")


@dataclass(frozen=True, slots=True)
class _Token:
    text: str
    glued: bool  # written without a space before it (a script without spaces)


def _tokens(text: str, max_chars: int) -> list[_Token]:
    out: list[_Token] = []
    for word in text.split():
        if _UNSPACED.search(word):
            out.extend(_Token(ch, i > 0) for i, ch in enumerate(word))
            continue
        for i in range(0, len(word), max_chars):  # a word longer than a line is cut
            out.append(_Token(word[i : i + max_chars], i > 0))
    return out


def _join(tokens: list[_Token]) -> str:
    return "".join(("" if t.glued or i == 0 else " ") + t.text for i, t in enumerate(tokens))


def layout_lines(tokens: list[_Token], options: CueOptions) -> list[str] | None:
    """The tokens on at most ``max_lines`` lines of ``max_line_chars`` (balanced, breaking
    after punctuation where that costs little), or None when they do not fit."""
    whole = _join(tokens)
    if len(whole) <= options.max_line_chars:
        return [whole]
    if options.max_lines < 2:
        return None
    best: tuple[float, list[str]] | None = None
    for cut in range(1, len(tokens)):
        first, rest = _join(tokens[:cut]), tokens[cut:]
        if len(first) > options.max_line_chars:
            break
        tail = layout_lines(rest, CueOptions(options.max_line_chars, options.max_lines - 1,
                                              options.max_cue_s, options.min_cue_s))
        if tail is None:
            continue
        cost = abs(len(first) - max(len(line) for line in tail))
        if first[-1] in ",;:":
            cost -= 6  # a clause end is a good line end
        if best is None or cost < best[0]:
            best = (cost, [first, *tail])
    return None if best is None else best[1]


@dataclass
class _Side:
    text: str = ""
    marks: list[tuple[int, float]] = field(default_factory=list)  # (words committed, heard s)
    language: str = ""


@dataclass
class _Utterance:
    start: float | None = None  # VAD: speech start (seconds)
    end: float | None = None  # VAD: speech end
    first_heard: float | None = None  # the earliest audio a hypothesis covered
    heard: float = 0.0  # the latest audio heard
    pauses: list[float] = field(default_factory=list)
    sides: dict[str, _Side] = field(default_factory=dict)


class CueBuilder:
    """Collects the events of one session and makes cues of either side (see module docs)."""

    def __init__(self, options: CueOptions | None = None, *,
                 max_utterances: int | None = None) -> None:
        self.options = options or CueOptions()
        self.max_utterances = max_utterances
        self._utterances: OrderedDict[int, _Utterance] = OrderedDict()

    def __len__(self) -> int:
        return len(self._utterances)

    def _utterance(self, number: int) -> _Utterance:
        u = self._utterances.get(number)
        if u is None:
            u = self._utterances[number] = _Utterance()
            while self.max_utterances is not None and len(self._utterances) > self.max_utterances:
                self._utterances.popitem(last=False)
        return u

    # -- input -------------------------------------------------------------------------------
    def vad(self, utterance: int, kind: str, at_s: float) -> None:
        u = self._utterance(utterance)
        if kind == "start":
            u.start = at_s if u.start is None else min(u.start, at_s)
        elif kind == "end":
            u.end = at_s
        elif kind == "pause":
            u.pauses.append(at_s)

    def text(self, utterance: int, side: str, committed: str, heard_from_s: float,
             heard_s: float, language: str = "") -> None:
        """A hypothesis of ``side``: only its ``committed`` text is kept."""
        u = self._utterance(utterance)
        u.heard = max(u.heard, heard_s)
        u.first_heard = heard_from_s if u.first_heard is None else min(u.first_heard,
                                                                       heard_from_s)
        s = u.sides.setdefault(side, _Side())
        if language:
            s.language = language
        words = len(committed.split())
        if not committed or (s.marks and words <= s.marks[-1][0] and committed == s.text):
            return
        s.text = committed
        if not s.marks or words > s.marks[-1][0]:
            s.marks.append((words, max(heard_s, s.marks[-1][1] if s.marks else 0.0)))

    def add(self, event: OutputEvent) -> None:
        """One session event (others than VAD and text events are ignored)."""
        if isinstance(event, VadEvent):
            if event.kind != "hush":
                self.vad(event.utterance, event.kind, event.pts / STREAM_RATE)
        elif isinstance(event, TextHypothesis):
            self.text(event.utterance, event.side, event.committed,
                      event.audio_start / STREAM_RATE, event.audio_end / STREAM_RATE,
                      event.language)

    def add_record(self, record: Mapping[str, Any]) -> None:
        """One trace record (``speechpipe.evaluation.trace``)."""
        name = str(record.get("event", ""))
        utterance = record.get("utterance")
        if not isinstance(utterance, int):
            return
        if name in ("vad.start", "vad.end", "vad.pause"):
            self.vad(utterance, name[4:], float(record.get("audio_t", record["stream_t"])))
        elif name.startswith(("asr.", "mt.")) and name.split(".")[1] in ("partial", "commit"):
            side = "source" if name.startswith("asr.") else "target"
            self.text(utterance, side, str(record.get("committed") or ""),
                      float(record.get("source_start", 0.0)),
                      float(record.get("source_end", record["stream_t"])),
                      str(record.get("language") or ""))

    # -- output ------------------------------------------------------------------------------
    def languages(self, side: Side) -> list[str]:
        """The languages ``side``'s captions were in, each once."""
        seen: list[str] = []
        for u in self._utterances.values():
            s = u.sides.get(side)
            if s is not None and s.text and s.language and s.language not in seen:
                seen.append(s.language)
        return seen

    def cues(self, side: Side, *, duration_s: float | None = None,
             offset_s: float = 0.0) -> list[Cue]:
        """The committed text of ``side`` as cues, in time order, none overlapping the next;
        ``duration_s`` (the input's length) bounds them; ``offset_s`` shifts every time."""
        cues: list[Cue] = []
        for number, u in sorted(self._utterances.items(),
                                key=lambda item: (self._span(item[1])[0], item[0])):
            s = u.sides.get(side)
            if s is not None and s.text.strip():
                cues.extend(self._utterance_cues(number, u, s))
        return _settle(cues, self.options, duration_s, offset_s)

    @staticmethod
    def _span(u: _Utterance) -> tuple[float, float]:
        start = u.start if u.start is not None else (u.first_heard or 0.0)
        end = u.end if u.end is not None else u.heard
        return start, max(end, start + 0.05)

    def _utterance_cues(self, number: int, u: _Utterance, s: _Side) -> list[Cue]:
        """Word times (see the module docs), then the words grouped into cues."""
        options = self.options
        start, end = self._span(u)
        tokens = _tokens(s.text, options.max_line_chars)
        words = s.text.split()
        # the audio heard when each word was committed, by its index among ``words``
        heard: list[float] = []
        for count, at in s.marks:
            heard.extend([at] * (min(count, len(words)) - len(heard)))
        heard.extend([max(u.heard, end)] * (len(words) - len(heard)))
        # token -> word index (a word may be cut into several tokens)
        word_of: list[int] = []
        index = -1
        for token in tokens:
            index += 0 if token.glued else 1
            word_of.append(max(index, 0))
        weights = [len(t.text) + (0 if t.glued else 1) for t in tokens]
        left = float(sum(weights)) or 1.0
        times: list[tuple[float, float]] = []
        cursor = start  # each token takes its share of the speech not yet given out
        for token_index, weight in enumerate(weights):
            t1 = cursor + (end - cursor) * weight / left
            left -= weight
            limit = max(heard[min(word_of[token_index], len(heard) - 1)], start)
            t1 = max(min(t1, limit), cursor)
            times.append((cursor, t1))
            cursor = t1
        breaks = {_nearest_boundary(times, p) for p in u.pauses if start < p < end}
        groups: list[list[int]] = []
        group: list[int] = []
        for i, token in enumerate(tokens):
            if group:
                too_long = times[i][1] - times[group[0]][0] > options.max_cue_s
                if too_long or not self._fits(tokens, [*group, i]):
                    groups.append(group)
                    group = []
            group.append(i)
            if _SENTENCE_END.search(token.text) or i in breaks:
                groups.append(group)
                group = []
        if group:
            groups.append(group)
        groups = self._merge_short(groups, tokens, times)
        cues: list[Cue] = []
        for g in groups:
            lines = layout_lines([tokens[i] for i in g], options) or [_join([tokens[i] for i in g])]
            cues.append(Cue(times[g[0]][0], times[g[-1]][1], "\n".join(lines), number,
                            s.language))
        return cues

    def _fits(self, tokens: list[_Token], group: list[int]) -> bool:
        return layout_lines([tokens[i] for i in group], self.options) is not None

    def _merge_short(self, groups: list[list[int]], tokens: list[_Token],
                     times: list[tuple[float, float]]) -> list[list[int]]:
        """A cue too short to read (under ``min_cue_s`` of speech, or under three words: a
        pause or a line limit cut it off) joins its neighbour where the two fit in one cue:
        the one before unless that ended a sentence, else the one after unless it ends one
        itself, else the one before anyway."""
        def short(g: list[int]) -> bool:
            words = sum(1 for i in g if not tokens[i].glued)
            return times[g[-1]][1] - times[g[0]][0] < self.options.min_cue_s or words < 3

        def ends_sentence(g: list[int]) -> bool:
            return bool(_SENTENCE_END.search(tokens[g[-1]].text))

        def fits(a: list[int], b: list[int]) -> bool:
            return (self._fits(tokens, a + b)
                    and times[b[-1]][1] - times[a[0]][0] <= self.options.max_cue_s)

        changed = True
        while changed and len(groups) > 1:
            changed = False
            for i, g in enumerate(groups):
                if not short(g):
                    continue
                before = groups[i - 1] if i > 0 else None
                after = groups[i + 1] if i + 1 < len(groups) else None
                if before is not None and not ends_sentence(before) and fits(before, g):
                    groups[i - 1 : i + 1] = [before + g]
                elif after is not None and not ends_sentence(g) and fits(g, after):
                    groups[i : i + 2] = [g + after]
                elif before is not None and fits(before, g):
                    groups[i - 1 : i + 1] = [before + g]
                else:
                    continue
                changed = True
                break
        return groups


def _nearest_boundary(times: list[tuple[float, float]], pause: float) -> int:
    """The index of the token after which ``pause`` falls (its end nearest the pause)."""
    return min(range(len(times)), key=lambda i: abs(times[i][1] - pause)) if times else -1


def _settle(cues: list[Cue], options: CueOptions, duration_s: float | None,
            offset_s: float) -> list[Cue]:
    """Order the cues on one timeline: each starts after the previous one ends, lasts at
    least ``min_cue_s`` where the next leaves room (and ``linger_s`` past an utterance's last
    word), at most ``max_cue_s``, and stays inside ``[0, duration_s]``."""
    cues = sorted(cues, key=lambda c: c.start)
    out: list[Cue] = []
    floor = 0.0
    for i, cue in enumerate(cues):
        start = max(cue.start, floor)
        nxt = cues[i + 1].start if i + 1 < len(cues) else None
        last_of_utterance = nxt is None or cues[i + 1].utterance != cue.utterance
        wanted = max(cue.end + (options.linger_s if last_of_utterance else 0.0),
                     start + options.min_cue_s)
        end = min(wanted, start + options.max_cue_s)
        if nxt is not None:
            end = min(end, max(nxt, cue.end))
        end = max(end, start + 0.1)  # a cue never has no duration
        if duration_s is not None:
            end = min(end, duration_s)
            if end - start < 0.1:
                start = max(floor, end - 0.1)
            if end <= start:
                continue  # no room left inside the audio: nothing to show
        out.append(Cue(round(start + offset_s, 3), round(end + offset_s, 3), cue.text,
                       cue.utterance, cue.language))
        floor = end
    return out


def cues_from_events(events: Iterable[OutputEvent], side: Side = "target", *,
                     duration_s: float | None = None,
                     options: CueOptions | None = None) -> list[Cue]:
    """The committed captions (``side="source"``) or translation (``"target"``) of a session's
    events as subtitle cues, on the input's timeline (see the module docs)."""
    builder = CueBuilder(options)
    for event in events:
        builder.add(event)
    return builder.cues(side, duration_s=duration_s)


def cues_from_records(records: Iterable[Mapping[str, Any]], side: Side = "target", *,
                      duration_s: float | None = None,
                      options: CueOptions | None = None) -> list[Cue]:
    """``cues_from_events`` for trace records (a ``TranslationRun``'s, or a trace file's)."""
    builder = CueBuilder(options)
    for record in records:
        builder.add_record(record)
    return builder.cues(side, duration_s=duration_s)
