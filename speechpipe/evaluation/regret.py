"""What the streaming policy committed that the same model would not have said (pure
functions over a trace and the offline reference's texts).

- **Commit regret** (per side: captions, translation): the share of committed words that
  the same weights' offline decode of the whole clip does not contain. Words are normalized
  like the scorer (``scores.normalize_text``); the two word lists are aligned with
  ``difflib.SequenceMatcher`` (its matching blocks, junk heuristic off) and
  ``regret = 1 - matched / committed`` (None when nothing was committed). A category's
  regret weighs its clips by their committed words (unmatched sum / committed sum). It needs
  no reference translation: the model's own unhurried answer is the yardstick, so it cannot
  be tuned to a reference (docs/design.md, "Commit regret").
- **Utterance regret** (per side): the same share, each utterance's committed words held
  against the same weights' offline decode of that utterance's own audio span (beam search,
  nothing forced): the issue's "final decode of the whole utterance", without the whole
  clip's context, which a streamed utterance never has. The whole-clip figure above counts
  that context too (other wording from other context, not words committed too early).
- **Extra sentence ends**: sentence ends (a word ending in ``. ? ! …``, abbreviations such
  as "Mr." and initials not counted) in the streamed translation minus those in the offline
  one; a clip "has extra" when that is above 0. Beside it, the same **inside an utterance**:
  each streamed utterance's last word and the offline text's last word left out, since the
  speaker's pause (measured by the VAD) confirms those; a missing final stop offline
  ("replace it" against "replace it.") is no sentence end the speaker did not make.
- **Pieces in the wrong language**: utterances whose committed translation (4 words or more)
  reads as the source language rather than the target (``stages.target_language``).
- **Content words kept**: the share of the offline translation's content words (words not
  in the target language's stop-word list, ``stopwordsiso``; counted with repeats) that
  the streamed translation also says. Commit regret above counts words said that the
  offline decode lacks; this counts the meaning the offline decode has that the stream lost
  ("The old woman in the house" for "The cat is sleeping in the house": cat, sleeping).
- **Utterance coverage** on speech of several utterances: utterances whose committed
  translation has fewer than half the words of the offline translation of their own audio
  span, and the ``translation_incomplete`` error events of the run.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any, TextIO

from speechpipe.evaluation.hindsight import NOISE_PADDINGS_S
from speechpipe.evaluation.scores import normalize_text
from speechpipe.stages.target_language import in_language

__all__ = ["regret_counts", "regret", "content_words", "content_kept", "sentence_ends",
           "extra_sentence_ends",
           "mid_sentence_ends", "extra_mid_sentence_ends",
           "wrong_language_utterances", "utterance_spans", "short_of_offline",
           "incomplete_events", "utterance_regret_fields", "commit_fields",
           "commit_aggregate", "print_commit_figures",
           "SPAN_COVERAGE", "WORST_CLIPS"]

SPAN_COVERAGE = 0.5  # an utterance's translation under this share of the offline one's words
WORST_CLIPS = 10

# words ending in a full stop that do not end a sentence (lowercased, without the stop)
ABBREVIATIONS = frozenset({
    "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "e.g", "i.e", "no",
    "mt", "ft", "fig", "gen", "gov", "sgt", "capt", "col", "lt", "rev", "hon", "inc", "ltd",
    "co", "corp", "approx", "dept", "est", "vol", "jan", "feb", "mar", "apr", "jun", "jul",
    "aug", "sep", "sept", "oct", "nov", "dec", "a.m", "p.m", "u.s", "u.k", "mme", "mlle", "m",
})
_END = re.compile(r"(?:[.!?\u2026\u3002\uff01\uff1f]+)[\"'\u201d\u2019\u00bb)\]]*$")
_INITIAL = re.compile(r"^(?:[^\W\d_]\.)+$", re.UNICODE)  # "J." "U.S." (initials)


def regret_counts(committed: str, offline: str) -> tuple[int, int]:
    """(unmatched, committed) normalized words of ``committed`` against ``offline``."""
    words = normalize_text(committed).split()
    if not words:
        return 0, 0
    matcher = difflib.SequenceMatcher(None, words, normalize_text(offline).split(),
                                      autojunk=False)
    matched = sum(block.size for block in matcher.get_matching_blocks())
    return len(words) - matched, len(words)


def regret(committed: str, offline: str) -> float | None:
    """The share of ``committed``'s words the offline text does not contain (None when
    nothing was committed)."""
    unmatched, total = regret_counts(committed, offline)
    return None if not total else unmatched / total


@cache
def _stop_words(language: str) -> frozenset[str]:
    import stopwordsiso

    if not stopwordsiso.has_lang(language):
        return frozenset()
    return frozenset(normalize_text(w) for w in stopwordsiso.stopwords(language))


def content_words(text: str, language: str) -> Counter[str]:
    """The normalized words of ``text`` that are not stop words of ``language`` (all words
    when ``stopwordsiso`` has no list for it), with their counts."""
    stop = _stop_words(language)
    return Counter(w for w in normalize_text(text).split() if w not in stop)


def content_kept(streamed: str, offline: str, language: str) -> tuple[int, int]:
    """(kept, total): how many of ``offline``'s content words ``streamed`` says too."""
    wanted = content_words(offline, language)
    said = content_words(streamed, language)
    return sum((wanted & said).values()), sum(wanted.values())


def sentence_ends(text: str) -> int:
    """Words of ``text`` that end a sentence: ending in ``. ? ! …`` (closing quotes and
    brackets after it allowed), except a full stop after an abbreviation ("Mr.", "etc.")
    or initials ("J.", "U.S."). A decimal point inside a number ("3.5") ends nothing."""
    count = 0
    for token in text.split():
        match = _END.search(token)
        if match is None:
            continue
        stem = token[: match.start()]
        mark = match.group(0)
        if mark.startswith(".") and not mark.startswith(".."):
            bare = stem.strip("\"'(\u201c\u2018\u00ab[").lower()
            if bare in ABBREVIATIONS or _INITIAL.match(bare + "."):
                continue
        if not any(ch.isalnum() for ch in stem):
            continue  # punctuation on its own ("...") is not a word
        count += 1
    return count


def extra_sentence_ends(streamed: str, offline: str) -> int:
    """Sentence ends streamed minus offline (negative: fewer than offline)."""
    return sentence_ends(streamed) - sentence_ends(offline)


def mid_sentence_ends(text: str) -> int:
    """Sentence ends of ``text`` before its last word: the last word of an utterance ends
    where the speaker stopped (the VAD measured the pause), so its end is confirmed."""
    words = text.split()
    return sentence_ends(" ".join(words[:-1]))


def extra_mid_sentence_ends(utterances: Sequence[str], offline: str) -> int:
    """Sentence ends inside the streamed utterances (each one's last word left out) minus
    those inside the offline text (its last word left out): the ends no pause confirmed."""
    return sum(mid_sentence_ends(text) for text in utterances) - mid_sentence_ends(offline)


def wrong_language_utterances(texts: Iterable[tuple[str, str]], target: str) -> int:
    """Of (translation, source language) per utterance, those that read as the source
    language instead of ``target`` (``stages.target_language.in_language`` False)."""
    return sum(1 for text, source in texts
               if source and source != target and in_language(text, target, [source]) is False)


def utterance_spans(records: Sequence[dict[str, Any]], audio_seconds: float
                    ) -> dict[int, tuple[float, float]]:
    """Each utterance's audio span (seconds), from its ``vad.start`` and ``vad.end``
    (``audio_t``: where the boundary lies in the input); an utterance the input ended in
    runs to the end of the audio."""
    starts: dict[int, float] = {}
    ends: dict[int, float] = {}
    for r in records:
        utterance = r.get("utterance")
        if utterance is None:
            continue
        t = r.get("audio_t", r["stream_t"])
        if r["event"] == "vad.start":
            starts.setdefault(utterance, float(t))
        elif r["event"] == "vad.end":
            ends[utterance] = float(t)
    return {u: (start, max(start, ends.get(u, audio_seconds))) for u, start in starts.items()}


def short_of_offline(committed: str, offline: str, share: float = SPAN_COVERAGE) -> bool:
    """True when ``committed`` has fewer than ``share`` times the words of ``offline``."""
    return len(normalize_text(committed).split()) < share * len(normalize_text(offline).split())


def incomplete_events(records: Iterable[dict[str, Any]]) -> int:
    """``translation_incomplete`` error events of a trace."""
    return sum(1 for r in records
               if r["event"] == "error" and r.get("code") == "translation_incomplete")


def utterance_regret_fields(pairs: Sequence[tuple[str, str]], side: str,
                            name: str = "utterance") -> dict[str, Any]:
    """A clip's utterance regret on one ``side`` from (committed, reference text) per
    utterance: the share and the word counts behind it. ``name``: ``utterance`` (the
    reference is the offline decode of each span) or ``hindsight`` (the pipeline's own
    final decode of each whole utterance, ``evaluation.hindsight``)."""
    unmatched = total = 0
    for committed, offline in pairs:
        u, t = regret_counts(committed, offline)
        unmatched += u
        total += t
    return {f"{name}_regret_{side}": None if not total else round(unmatched / total, 4),
            f"{name}_unmatched_words_{side}": unmatched,
            f"{name}_committed_words_{side}": total}


def commit_fields(
    records: Sequence[dict[str, Any]], source_text: str, target_text: str, target: str,
    source: str, offline_source: str | None = None, offline_target: str | None = None,
) -> dict[str, Any]:
    """A clip's row fields: wrong-language utterances and ``translation_incomplete`` events
    always; with the offline texts, commit regret per side (with the word counts behind it)
    and the extra sentence ends. ``source``: the clip's language (an utterance's detected
    language, when the trace has one, takes its place)."""
    texts = [(r.get("text") or "", r.get("language") or source)
             for r in records if r["event"] == "utterance.end"]
    row: dict[str, Any] = {"wrong_language_utterances": wrong_language_utterances(texts, target),
                           "translation_incomplete": incomplete_events(records)}
    for side, committed, offline in (("source", source_text, offline_source),
                                     ("target", target_text, offline_target)):
        if offline is None:
            continue
        unmatched, total = regret_counts(committed, offline)
        row[f"regret_{side}"] = None if not total else round(unmatched / total, 4)
        row[f"unmatched_words_{side}"] = unmatched
        row[f"committed_words_{side}"] = total
    if offline_target is not None:
        kept, wanted = content_kept(target_text, offline_target, target)
        row["content_kept"] = kept
        row["content_offline"] = wanted
        row["extra_sentence_ends"] = extra_sentence_ends(target_text, offline_target)
        utterances = [text for text, _ in texts] or [target_text]
        row["extra_mid_sentence_ends"] = extra_mid_sentence_ends(utterances, offline_target)
    return row


def commit_aggregate(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Word-weighted regret per side, clips with extra sentence ends (count and share),
    clips and utterances in the wrong language, utterances short of their span's offline
    translation, ``translation_incomplete`` events; each only where the rows carry it."""
    out: dict[str, Any] = {}
    for side in ("source", "target"):
        # whole-clip regret, then against each utterance's offline span, then hindsight,
        # then the hindsight yardstick's own noise
        for prefix in ("", "utterance_", "hindsight_", "hindsight_noise_"):
            counted = [r for r in rows if f"{prefix}committed_words_{side}" in r]
            if counted:
                total = sum(r[f"{prefix}committed_words_{side}"] for r in counted)
                unmatched = sum(r[f"{prefix}unmatched_words_{side}"] for r in counted)
                out[f"{prefix}regret_{side}"] = round(unmatched / total, 4) if total else None
        if any(f"hindsight_unjudged_{side}" in r for r in rows):
            out[f"hindsight_unjudged_{side}"] = sum(r.get(f"hindsight_unjudged_{side}", 0)
                                                    for r in rows)
    judged = [r for r in rows if "extra_sentence_ends" in r]
    if judged:
        extra = sum(1 for r in judged if r["extra_sentence_ends"] > 0)
        out["clips_with_extra_sentence_ends"] = extra
        out["share_extra_sentence_ends"] = round(extra / len(judged), 4)
        mid = sum(1 for r in judged if r.get("extra_mid_sentence_ends", 0) > 0)
        out["clips_with_extra_mid_sentence_ends"] = mid
        out["share_extra_mid_sentence_ends"] = round(mid / len(judged), 4)
    if any("wrong_language_utterances" in r for r in rows):
        out["wrong_language_utterances"] = sum(r.get("wrong_language_utterances", 0)
                                               for r in rows)
        out["clips_wrong_language"] = sum(1 for r in rows
                                          if r.get("wrong_language_utterances", 0))
        out["translation_incomplete"] = sum(r.get("translation_incomplete", 0) for r in rows)
    contents = [r for r in rows if "content_offline" in r]
    if contents:
        wanted = sum(r["content_offline"] for r in contents)
        out["content_kept"] = (round(sum(r["content_kept"] for r in contents) / wanted, 4)
                               if wanted else None)
        out["clips_losing_content"] = sum(1 for r in contents
                                          if r["content_kept"] < r["content_offline"])
    spanned = [r for r in rows if "utterances_spanned" in r]
    if spanned:
        out["utterances_spanned"] = sum(r["utterances_spanned"] for r in spanned)
        out["utterances_short_of_offline"] = sum(r["utterances_short_of_offline"]
                                                 for r in spanned)
    return out


def _paddings(paddings: Sequence[tuple[float, float]]) -> str:
    """``((0.1, 0.0), (0.0, 0.3))`` -> "0.1 s before / 0.3 s after"."""
    return " / ".join(" and ".join(f"{s:g} s {where}" for s, where in
                                   zip(pair, ("before", "after"), strict=True) if s)
                      for pair in paddings)


def _pct(value: Any) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def _num(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def print_commit_figures(report: dict[str, Any], out: TextIO | None = None) -> None:
    """The regret section: totals, per category, the worst clips (translation regret) with
    their streamed - offline BLEU, extra sentence ends, wrong-language pieces and, for
    clips of several utterances, those short of their span's offline translation."""
    out = out or sys.stdout
    a = report["aggregate"]
    rows = report["clips"]
    if "wrong_language_utterances" in a:
        print(f"wrong-language pieces: {a['wrong_language_utterances']} utterances in "
              f"{a['clips_wrong_language']} clips"
              + "".join(f"; {r['id']}: {r['wrong_language_utterances']}" for r in rows
                        if r.get("wrong_language_utterances")), file=out)
        print(f"translation_incomplete events: {a['translation_incomplete']}", file=out)
    if "regret_target" not in a and "regret_source" not in a:
        return
    judged = [r for r in rows if "extra_sentence_ends" in r]
    print(f"\ncommit regret (committed words the same model's offline decode lacks): captions "
          f"{_pct(a.get('regret_source'))}, translation {_pct(a.get('regret_target'))}; "
          f"extra sentence ends on {a.get('clips_with_extra_sentence_ends', 0)} of "
          f"{len(judged)} clips ({_pct(a.get('share_extra_sentence_ends'))}), inside an "
          f"utterance on {a.get('clips_with_extra_mid_sentence_ends', 0)} "
          f"({_pct(a.get('share_extra_mid_sentence_ends'))})", file=out)
    if "utterance_regret_target" in a or "utterance_regret_source" in a:
        print(f"utterance regret (committed words the same model's decode of each "
              f"utterance's own audio lacks): captions {_pct(a.get('utterance_regret_source'))}"
              f", translation {_pct(a.get('utterance_regret_target'))}", file=out)
    if "hindsight_regret_target" in a or "hindsight_regret_source" in a:
        print(f"hindsight regret (committed words the pipeline's own final decode of each "
              f"whole utterance, nothing forced, lacks): captions "
              f"{_pct(a.get('hindsight_regret_source'))}, translation "
              f"{_pct(a.get('hindsight_regret_target'))}; utterances it says nothing for, "
              f"not judged: captions {a.get('hindsight_unjudged_source', 0)}, translation "
              f"{a.get('hindsight_unjudged_target', 0)}", file=out)
    if "hindsight_noise_regret_target" in a or "hindsight_noise_regret_source" in a:
        print(f"the yardstick's own noise (the same final decode of each utterance with "
              f"silence around it, {_paddings(NOISE_PADDINGS_S)}, held against it: no commit "
              f"rule can be shown below this): captions "
              f"{_pct(a.get('hindsight_noise_regret_source'))}, translation "
              f"{_pct(a.get('hindsight_noise_regret_target'))}", file=out)
    categories = a.get("by_category") or {}
    if categories:
        print(f"{'category':<28}{'regret capt':>12}{'regret transl':>14}{'utt capt':>10}"
              f"{'utt transl':>11}{'hind capt':>10}{'hind transl':>12}{'noise capt':>11}"
              f"{'noise transl':>13}{'extra ends':>12}"
              f"{'inside':>8}{'wrong lang':>12}", file=out)
        for name, figures in categories.items():
            print(f"{name[:27]:<28}{_pct(figures.get('regret_source')):>12}"
                  f"{_pct(figures.get('regret_target')):>14}"
                  f"{_pct(figures.get('utterance_regret_source')):>10}"
                  f"{_pct(figures.get('utterance_regret_target')):>11}"
                  f"{_pct(figures.get('hindsight_regret_source')):>10}"
                  f"{_pct(figures.get('hindsight_regret_target')):>12}"
                  f"{_pct(figures.get('hindsight_noise_regret_source')):>11}"
                  f"{_pct(figures.get('hindsight_noise_regret_target')):>13}"
                  f"{_pct(figures.get('share_extra_sentence_ends')):>12}"
                  f"{_pct(figures.get('share_extra_mid_sentence_ends')):>8}"
                  f"{_num(figures.get('clips_wrong_language')):>12}", file=out)
    key = ("hindsight_regret_target" if any(r.get("hindsight_regret_target") is not None
                                           for r in rows) else "regret_target")
    worst = sorted((r for r in rows if r.get(key) is not None),
                   key=lambda r: -r[key])[:WORST_CLIPS]
    if worst:
        print(f"worst clips ({'hindsight ' if key.startswith('hindsight') else ''}translation "
              f"regret)\n{'clip':<28}{'capt':>9}{'transl':>9}{'hind c':>9}{'hind t':>9}"
              f"{'noise t':>9}{'BLEU-off':>10}{'extra .':>9}", file=out)
        for r in worst:
            print(f"{r['id'][:27]:<28}{_pct(r.get('regret_source')):>9}"
                  f"{_pct(r.get('regret_target')):>9}"
                  f"{_pct(r.get('hindsight_regret_source')):>9}"
                  f"{_pct(r.get('hindsight_regret_target')):>9}"
                  f"{_pct(r.get('hindsight_noise_regret_target')):>9}"
                  f"{_num(r.get('bleu_gap')):>10}"
                  f"{_num(r.get('extra_sentence_ends')):>9}", file=out)
    contents = [r for r in rows if "content_offline" in r]
    if contents:
        print(f"content words of the offline translation the stream says too: "
              f"{_pct(a.get('content_kept'))}; per clip: "
              + ", ".join(f"{r['id']} {r['content_kept']}/{r['content_offline']}"
                          for r in contents), file=out)
    spanned = [r for r in rows if r.get("utterances_spanned")]
    if spanned:
        print(f"utterances under {SPAN_COVERAGE:.0%} of the offline translation of their span: "
              f"{a.get('utterances_short_of_offline', 0)} of {a.get('utterances_spanned', 0)}"
              + "".join(f"; {r['id']}: {r['utterances_short_of_offline']} of "
                        f"{r['utterances_spanned']}, translation_incomplete "
                        f"{r.get('translation_incomplete', 0)}" for r in spanned), file=out)
