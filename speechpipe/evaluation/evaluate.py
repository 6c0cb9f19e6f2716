"""``speechpipe eval``: run every clip of a manifest through the live pipeline and score it.

Clips: by default those whose language differs from the target and that carry a reference
translation into it (``manifest.reference_for``: ``translations[target]``, or
``translation_en`` for English); ``--category`` or ``--all`` widen it. Every BLEU, per clip
and in every aggregate, is taken against that reference. The source language is the
manifest's ``lang`` (what a user picks in the app); ``--detect-language`` lets Whisper detect
it instead.

"What the listener got" (``speechpipe.evaluation.listener``): ASR-BLEU of the produced
speech transcribed in the target language, and the language Whisper detects in it
(``heard_language`` per clip; ``heard_in_target`` of ``clips_with_speech`` in the aggregate).

"Words during non-speech": words of utterances whose source span holds less than 0.3 s of
speech according to an independent, strict VAD pass over the clip (webrtcvad mode 3) — so a
hallucination on noise or silence counts even though the pipeline's own VAD let it through.

"Utterances invented / dropped" (``count_unfaithful``, per clip and in total): utterances
whose translation has words but whose captions have none, and utterances whose translation
has fewer than half as many words as their captions (8 or more source words); the trace's
``utterance.end`` records carry the same verdict as ``faithfulness``.

"Utterances repeated" (``count_repeated``, per clip, per category and in total): utterances
whose translation ends with a phrase of 3 or more words (normalized like the scorer) that
already occurred earlier in the same translation, or that the previous utterance's
translation also ends with, while the captions do not repeat themselves there
(``repeated_phrase``).

"Offline reference" (``--offline-reference``, ``speechpipe.evaluation.offline``): each whole
clip decoded at once by the same weights; ``offline_bleu`` per clip, per category and in
total, scored exactly like ``bleu``, and ``bleu_gap`` = ``bleu`` - ``offline_bleu``; with it
the commit regret per side, extra sentence ends and, on clips of several utterances, the
utterances short of their span's offline translation (``speechpipe.evaluation.regret``).
Wrong-language pieces and ``translation_incomplete`` events are counted on every run.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from speechpipe.errors import InputError
from speechpipe.evaluation.listener import (
    listener_aggregate,
    listener_figures,
    transcribe_speech,
)
from speechpipe.evaluation.manifest import load_manifest, reference_for
from speechpipe.evaluation.offline import OfflineRun
from speechpipe.evaluation.regret import (
    commit_aggregate,
    commit_fields,
    print_commit_figures,
)
from speechpipe.evaluation.scores import (
    corpus_bleu,
    latency_scores,
    normalize_text,
    percentiles,
    sentence_bleu,
    wer,
)

# the per-utterance figures, still importable from here
from speechpipe.evaluation.utterance_figures import (
    hindsight_regret,
    span_coverage,
    utterance_regret,
)
from speechpipe.file_translation import TranslationRun, translate_audio
from speechpipe.session import Pipeline
from speechpipe.stages.coverage import MIN_RATIO, MIN_SOURCE_WORDS, classify_utterance
from speechpipe.stages.frames import FRAME_SAMPLES, STREAM_RATE
from speechpipe.stages.request import SessionRequest
from speechpipe.transport.file_replay import read_audio

__all__ = ["load_manifest", "check_clips", "evaluate_clips", "words_in_non_speech",
           "transcribe_speech", "listener_figures", "count_unfaithful", "utterance_texts",
           "repeated_phrase", "count_repeated", "reference_for", "select_clips"]

END_SPLIT_KEYS = ("queued_at_end", "unsynthesized_at_end", "silence_after_end",
                  "synthesis_after_end")
STAGES = ("vad", "queue.asr", "asr.encode", "asr.langid", "asr.decode", "queue.tts", "tts")


def check_clips(clips: list[dict[str, Any]], manifest: str | Path) -> None:
    """Every selected clip's audio is there and readable (its header), before any clip runs:
    a bad clip is not found after the earlier ones took minutes."""
    from speechpipe.transport.file_replay import probe_audio

    for clip in clips:
        try:
            probe_audio(clip["path"])
        except InputError as exc:
            raise InputError(f"{manifest}:{clip['line']}: {exc}") from None


def select_clips(clips: list[dict[str, Any]], args: argparse.Namespace, target: str):
    """The clips to evaluate, by ``--all``, ``--category``, ``--lang``, ``--split`` and
    ``--limit``; by default those not in ``target`` that have a reference translation into
    it."""
    target = target.strip().lower()
    if args.all:
        chosen = [c for c in clips if c["lang"] != target]
    elif args.category:
        chosen = [c for c in clips if c.get("category") in args.category]
    else:
        chosen = [c for c in clips if c["lang"] != target and reference_for(c, target)]
    languages = getattr(args, "lang", None)
    if languages:
        chosen = [c for c in chosen if c["lang"] in languages]
    half = getattr(args, "split", None)
    if half:
        from speechpipe.evaluation.split import split_of

        chosen = [c for c in chosen if split_of(c) == half]
    return chosen[: args.limit] if args.limit else chosen


def words_in_non_speech(records: list[dict[str, Any]], audio: np.ndarray) -> int:
    """Committed words of utterances whose source span holds under 0.3 s of speech."""
    import webrtcvad

    vad = webrtcvad.Vad(3)
    n = len(audio) // FRAME_SAMPLES
    voiced = np.array(
        [vad.is_speech(audio[i * FRAME_SAMPLES:(i + 1) * FRAME_SAMPLES].tobytes(), STREAM_RATE)
         for i in range(n)], dtype=bool)
    finals: dict[tuple[str, int], dict[str, Any]] = {}
    for r in records:
        if r["event"].startswith(("asr.", "mt.")):
            finals[(r["event"][:3], r["utterance"])] = r
    count = 0
    for r in finals.values():
        words = len(r["committed"].split())
        if not words:
            continue
        a = int(r["source_start"] * STREAM_RATE) // FRAME_SAMPLES
        b = int(r["source_end"] * STREAM_RATE) // FRAME_SAMPLES + 1
        speech_s = voiced[a:b].sum() * FRAME_SAMPLES / STREAM_RATE
        if speech_s < 0.3:
            count += words
    return count


def count_unfaithful(
    utterances: Iterable[tuple[str, str]], min_ratio: float = MIN_RATIO,
    min_source_words: int = MIN_SOURCE_WORDS,
) -> dict[str, int]:
    """Per (source text, target text) of each utterance: ``invented`` counts utterances with
    target words but no source words, ``dropped`` those whose target/source word ratio is
    below ``min_ratio`` (``stages.coverage.classify_utterance``)."""
    counts = {"invented": 0, "dropped": 0}
    for source, target in utterances:
        verdict = classify_utterance(source, target, min_ratio, min_source_words)
        if verdict in counts:
            counts[verdict] += 1
    return counts


MIN_REPEATED_WORDS = 3  # a target phrase this long, repeated at the end, is counted
MIN_SOURCE_REPEAT_WORDS = 2  # a source repeat this long excuses it (languages differ in length)


def _ends_with_repeat(words: list[str], previous: list[str], min_words: int) -> str | None:
    """The shortest phrase of ``min_words`` or more that ``words`` ends with and that occurs
    earlier in ``words`` (not overlapping that end) or that ``previous`` also ends with."""
    for k in range(min_words, len(words) + 1):
        tail = words[-k:]
        if len(previous) >= k and previous[-k:] == tail:
            return " ".join(tail)
        head = words[:-k]
        if any(head[i:i + k] == tail for i in range(len(head) - k + 1)):
            return " ".join(tail)
    return None


def repeated_phrase(source: str, target: str, previous_source: str = "",
                    previous_target: str = "", min_words: int = MIN_REPEATED_WORDS) -> str | None:
    """The phrase (normalized, ``min_words`` or more words) ``target`` ends with that already
    occurred earlier in ``target`` or at the end of ``previous_target``, when the source does
    not repeat itself the same way (its own end repeated, ``MIN_SOURCE_REPEAT_WORDS`` or more
    words, within ``source`` or against ``previous_source``); None when there is none.

    The source is another language, so its repeat is looked for in its own words: a speaker
    who said a phrase twice gives captions that end with a repeat too."""
    words = normalize_text(target).split()
    phrase = _ends_with_repeat(words, normalize_text(previous_target).split(), min_words)
    if phrase is None:
        return None
    if _ends_with_repeat(normalize_text(source).split(), normalize_text(previous_source).split(),
                         MIN_SOURCE_REPEAT_WORDS) is not None:
        return None
    return phrase


def count_repeated(utterances: Iterable[tuple[str, str]],
                   min_words: int = MIN_REPEATED_WORDS) -> int:
    """Utterances, of (source text, target text) in order, whose target ends with a repeated
    phrase (``repeated_phrase``); the previous utterance is the last one with target words."""
    count = 0
    previous = ("", "")
    for source, target in utterances:
        if repeated_phrase(source, target, *previous, min_words=min_words) is not None:
            count += 1
        if normalize_text(target):
            previous = (source, target)
    return count


def utterance_texts(records: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(source text, target text) of every ``utterance.end`` record of a trace."""
    return [(r.get("source_text") or "", r.get("text") or "")
            for r in records if r["event"] == "utterance.end"]


def _stage_samples(records: list[dict[str, Any]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for r in records:
        for stage, seconds in (r.get("timings") or {}).items():
            out.setdefault(stage, []).append(float(seconds))
    return out


async def evaluate_clips(
    pipeline: Pipeline, clips: list[dict[str, Any]], request: SessionRequest,
    detect_language: bool = False, progress: bool = True,
    offline: OfflineRun | None = None,
    on_run: Callable[[dict[str, Any], TranslationRun], None] | None = None,
) -> dict[str, Any]:
    """Translate each clip and score it; returns per-clip rows and an aggregate.
    ``on_run(clip, run)`` sees each clip's run (``eval --report``'s subtitle files).

    ``offline``: the offline reference (``--offline-reference``): its texts scored beside
    the streamed text, and the spans of a clip's utterances decoded after its run."""
    rows: list[dict[str, Any]] = []
    target = request.target_lang.strip().lower()
    stage_values: dict[str, list[float]] = {}
    total_cpu = total_audio = total_wall = 0.0
    iterator = clips
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(clips, desc="eval", unit="clip", file=sys.stderr, leave=False)
        iterator = bar
    for clip in iterator:
        audio = read_audio(clip["path"])
        clip_request = replace(
            request, source_lang="auto" if detect_language else clip["lang"]
        )
        run = await translate_audio(pipeline, audio, clip_request)
        if on_run is not None:
            on_run(clip, run)
        reference = reference_for(clip, target)
        reference_words = len(reference.split()) if reference else None
        scores = latency_scores(run.records, run.input_seconds, reference_words)
        row: dict[str, Any] = {
            "id": clip["id"], "lang": clip["lang"], "duration_s": round(run.input_seconds, 3),
            **{k: (None if v is None else round(v, 4)) for k, v in scores.items()},
            "rtf": round(run.wall_seconds / run.input_seconds, 4),
            "cpu_per_audio_s": round(run.cpu_seconds / run.input_seconds, 4),
            "source_text": run.source_text, "target_text": run.target_text,
            "wer": None, "bleu": None,
            "words_in_non_speech": words_in_non_speech(run.records, audio),
            **{f"utterances_{k}": v
               for k, v in count_unfaithful(utterance_texts(run.records)).items()},
            "utterances_repeated": count_repeated(utterance_texts(run.records)),
        }
        kind = (clip.get("transcript_kind") or "reference").split()[0]
        if clip.get("transcript") and kind.startswith("reference"):
            row["wer"] = wer(clip["transcript"], run.source_text)
        if reference:
            row["bleu"] = round(sentence_bleu(run.target_text, reference), 2)
        if offline is not None:
            row.update(offline_scores(offline.texts[clip["id"]], row["bleu"], reference))
        row.update(commit_fields(
            run.records, run.source_text, run.target_text, target, clip["lang"],
            None if offline is None else offline.source_texts.get(clip["id"]),
            None if offline is None else offline.texts.get(clip["id"])))
        row.update(await listener_figures(pipeline, run, reference, target))
        if offline is not None:
            row.update(await span_coverage(offline, clip, audio, run.records,
                                           run.input_seconds, target))
            row.update(await utterance_regret(offline, clip, audio, run.records,
                                              run.input_seconds, target))
            row.update(await hindsight_regret(pipeline, clip, audio, run.records,
                                              run.input_seconds, target))
        rows.append(row)
        total_cpu += run.cpu_seconds
        total_audio += run.input_seconds
        total_wall += run.wall_seconds
        for stage, values in _stage_samples(run.records).items():
            stage_values.setdefault(stage, []).extend(values)
        stage_values.setdefault("vad", []).append(run.vad_seconds)
    if bar is not None:
        bar.close()
    return {"clips": rows, "aggregate": _aggregate(rows, clips, stage_values, total_cpu,
                                                   total_audio, total_wall, target)}


def offline_scores(offline_text: str, bleu: float | None, reference: str) -> dict[str, Any]:
    """A clip's offline-reference fields: its text, its BLEU (the scorer ``bleu`` uses) and
    the gap streamed - offline."""
    offline_bleu = round(sentence_bleu(offline_text, reference), 2) if reference else None
    gap = None if bleu is None or offline_bleu is None else round(bleu - offline_bleu, 2)
    return {"offline_text": offline_text, "offline_bleu": offline_bleu, "bleu_gap": gap}


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return round(statistics.median(values), 4) if values else None


def _aggregate(rows, clips, stage_values, total_cpu, total_audio, total_wall,
               target: str = "en") -> dict[str, Any]:
    """The figures of ``rows`` together; BLEU against each clip's reference into ``target``
    (``reference_for``). ``stage_values`` None: a category's own aggregate."""
    by_id = {c["id"]: c for c in clips}
    with_ref = [r for r in rows if reference_for(by_id[r["id"]], target)]
    wer_rows = [r for r in rows if r["wer"] is not None]
    corpus_wer = None
    if wer_rows:
        import jiwer

        corpus_wer = float(jiwer.wer(
            [normalize_text(by_id[r["id"]]["transcript"]) for r in wer_rows],
            [normalize_text(r["source_text"]) or "<empty>" for r in wer_rows]))
    top = stage_values is not None  # not a category's own aggregate
    stage_values = stage_values or {}
    totals = {stage: sum(values) for stage, values in stage_values.items()}
    grand = sum(totals.values()) or 1.0
    stages = {}
    for stage in sorted(stage_values, key=lambda s: STAGES.index(s) if s in STAGES else 99):
        figures = percentiles(stage_values[stage]) or {}
        stages[stage] = {**{k: round(v, 4) for k, v in figures.items()},
                         "total_s": round(totals[stage], 3),
                         "share": round(totals[stage] / grand, 4)}
    return {
        "clips": len(rows),
        "target_lang": target,
        "median_start_offset": _median(rows, "start_offset"),
        "median_end_offset": _median(rows, "end_offset"),
        "median_text_start_offset": _median(rows, "text_start_offset"),
        "median_text_end_offset": _median(rows, "text_end_offset"),
        "median_al": _median(rows, "al"),
        "median_laal": _median(rows, "laal"),
        "median_ne": _median(rows, "ne"),
        "bleu": (None if not with_ref else round(corpus_bleu(
            [r["target_text"] for r in with_ref],
            [reference_for(by_id[r["id"]], target) for r in with_ref]) or 0.0, 2)),
        **_offline_aggregate(with_ref, by_id, target),
        **commit_aggregate(rows),
        **listener_aggregate(rows, by_id, target),
        **{f"median_{key}": _median(rows, key) for key in END_SPLIT_KEYS},
        "wer": None if corpus_wer is None else round(corpus_wer, 4),
        "cpu_per_audio_s": round(total_cpu / total_audio, 4) if total_audio else None,
        "rtf": round(total_wall / total_audio, 4) if total_audio else None,
        "words_in_non_speech": sum(r["words_in_non_speech"] for r in rows),
        "utterances_invented": sum(r["utterances_invented"] for r in rows),
        "utterances_dropped": sum(r["utterances_dropped"] for r in rows),
        "utterances_repeated": sum(r.get("utterances_repeated", 0) for r in rows),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "stages": stages,
        "by_category": _by_category(rows, clips, target) if top else {},
    }


def _offline_aggregate(with_ref: list[dict[str, Any]], by_id: dict[str, Any],
                       target: str) -> dict[str, Any]:
    """Corpus BLEU of the offline reference over the clips the streamed BLEU is taken on, and
    the gap streamed - offline; nothing without ``--offline-reference``."""
    if not with_ref or any("offline_text" not in r for r in with_ref):
        return {}
    references = [reference_for(by_id[r["id"]], target) for r in with_ref]
    streamed = corpus_bleu([r["target_text"] for r in with_ref], references) or 0.0
    offline = corpus_bleu([r["offline_text"] for r in with_ref], references) or 0.0
    return {"offline_bleu": round(offline, 2), "bleu_gap": round(streamed - offline, 2)}


def _by_category(rows: list[dict[str, Any]], clips: list[dict[str, Any]],
                 target: str) -> dict[str, Any]:
    """The aggregate of each manifest ``category`` apart (a set that flatters one kind of
    speech hides another's losses)."""
    by_id = {c["id"]: c for c in clips}
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(str(by_id[row["id"]].get("category") or "-"), []).append(row)
    if len(groups) < 2:
        return {}
    out = {}
    for category, members in sorted(groups.items()):
        audio = sum(r["duration_s"] for r in members)
        cpu = sum(r["cpu_per_audio_s"] * r["duration_s"] for r in members)
        wall = sum(r["rtf"] * r["duration_s"] for r in members)
        figures = _aggregate(members, clips, None, cpu, audio, wall, target)
        out[category] = {k: v for k, v in figures.items() if k not in ("stages", "by_category")}
    return out


CATEGORY_COLUMNS = (("clips", "clips"), ("BLEU", "bleu"), ("ASR-BLEU", "asr_bleu"),
                    ("inTarget", "heard_in_target"), ("WER", "wer"),
                    ("StartOff", "median_start_offset"),
                    ("EndOff", "median_end_offset"), ("tStart", "median_text_start_offset"),
                    ("NE", "median_ne"), ("CPU/s", "cpu_per_audio_s"),
                    ("invented", "utterances_invented"), ("dropped", "utterances_dropped"),
                    ("repeated", "utterances_repeated"))
OFFLINE_COLUMNS = (("offBLEU", "offline_bleu"), ("gap", "bleu_gap"))


def print_categories(aggregate: dict[str, Any], out=None, label: str = "") -> None:
    """One row per category of ``aggregate["by_category"]`` (nothing for a single one)."""
    out = out or sys.stdout
    categories = aggregate.get("by_category") or {}
    if not categories:
        return
    columns: tuple[tuple[str, str], ...] = CATEGORY_COLUMNS
    if any("offline_bleu" in figures for figures in categories.values()):
        columns = (*columns[:2], *OFFLINE_COLUMNS, *columns[2:])  # gap = BLEU - offBLEU
    title = f"by category ({label})" if label else "by category"
    print(f"\n{title}\n{'category':<28}"
          + "".join(f"{name:>9}" for name, _ in columns), file=out)
    for category, figures in categories.items():
        print(f"{category[:27]:<28}" + "".join(f"{_fmt(figures.get(key)):>9}"
                                             for _, key in columns), file=out)


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}{unit}"
    return f"{value}{unit}"


def print_report(report: dict[str, Any], out=sys.stdout) -> None:
    """Print an evaluation report: a row per clip, then the aggregate."""
    header = (f"{'clip':<28}{'dur':>6}{'Start':>7}{'End':>7}{'tEnd':>7}{'queue':>7}"
              f"{'unsyn':>7}{'silen':>7}{'synth':>7}{'LAAL':>7}"
              f"{'NE':>6}{'WER':>6}{'BLEU':>7}{'aBLEU':>7}{'heard':>6}{'CPU/s':>7}")
    with_offline = any("offline_bleu" in r for r in report["clips"])
    print(header + (f"{'oBLEU':>7}" if with_offline else ""), file=out)
    for r in report["clips"]:
        print(f"{r['id'][:27]:<28}{r['duration_s']:>6.1f}{_fmt(r['start_offset']):>7}"
              f"{_fmt(r['end_offset']):>7}{_fmt(r['text_end_offset']):>7}"
              f"{_fmt(r.get('queued_at_end')):>7}{_fmt(r.get('unsynthesized_at_end')):>7}"
              f"{_fmt(r.get('silence_after_end')):>7}{_fmt(r.get('synthesis_after_end')):>7}"
              f"{_fmt(r['laal']):>7}"
              f"{_fmt(r['ne']):>6}{_fmt(r['wer']):>6}{_fmt(r['bleu']):>7}"
              f"{_fmt(r.get('asr_bleu')):>7}{_fmt(r.get('heard_language')):>6}"
              f"{_fmt(r['cpu_per_audio_s']):>7}"
              + (f"{_fmt(r.get('offline_bleu')):>7}" if with_offline else ""), file=out)
    a = report["aggregate"]
    target = a.get("target_lang") or ""
    print(f"\n{a['clips']} clips: median StartOffset {_fmt(a['median_start_offset'], ' s')}, "
          f"EndOffset {_fmt(a['median_end_offset'], ' s')}, text StartOffset "
          f"{_fmt(a['median_text_start_offset'], ' s')}, text EndOffset "
          f"{_fmt(a['median_text_end_offset'], ' s')}, AL {_fmt(a['median_al'], ' s')}, "
          f"LAAL {_fmt(a['median_laal'], ' s')}, NE {_fmt(a['median_ne'])}", file=out)
    print(f"EndOffset split (medians): text EndOffset {_fmt(a['median_text_end_offset'], ' s')}"
          f", speech queued at the source end {_fmt(a.get('median_queued_at_end'), ' s')}, "
          f"unsynthesized {_fmt(a.get('median_unsynthesized_at_end'), ' s')}, silence after "
          f"{_fmt(a.get('median_silence_after_end'), ' s')}, synthesis time after "
          f"{_fmt(a.get('median_synthesis_after_end'), ' s')}", file=out)
    wer_text = "-" if a["wer"] is None else f"{a['wer'] * 100:.1f} %"
    print(f"BLEU {_fmt(a['bleu'])}, ASR-BLEU {_fmt(a.get('asr_bleu'))}, "
          f"heard in {target or 'the target language'} {_fmt(a.get('heard_in_target'))} of "
          f"{a.get('clips_with_speech', 0)} clips with speech, WER {wer_text}, "
          f"CPU {_fmt(a['cpu_per_audio_s'])} s per "
          f"audio s, RTF {_fmt(a['rtf'])}, peak RSS {_fmt(a['peak_rss_mb'])} MB, words during "
          f"non-speech {a['words_in_non_speech']}", file=out)
    print(f"utterances invented {a['utterances_invented']}, dropped {a['utterances_dropped']}"
          f", repeated {a.get('utterances_repeated', 0)}"
          + "".join(f"; {r['id']}: {r['utterances_invented']} invented, "
                    f"{r['utterances_dropped']} dropped, {r.get('utterances_repeated', 0)} "
                    "repeated" for r in report["clips"]
                    if r["utterances_invented"] or r["utterances_dropped"]
                    or r.get("utterances_repeated")), file=out)
    if "offline_bleu" in a:
        offline = report.get("offline_reference") or {}
        print(f"offline reference (whole clips, beam {offline.get('beam', '?')}): BLEU "
              f"{_fmt(a['offline_bleu'])}, streamed - offline {_fmt(a['bleu_gap'])}"
              + "".join(f"; {name} {_fmt(figures.get('bleu_gap'))}" for name, figures in
                        (a.get("by_category") or {}).items())
              + f" ({offline.get('decoded', 0)} decoded, {offline.get('cached', 0)} "
                "from the cache"
              + (f"; utterance spans {offline.get('spans_decoded', 0)} decoded, "
                 f"{offline.get('spans_cached', 0)} from the cache"
                 if offline.get("spans_decoded") or offline.get("spans_cached") else "")
              + ")", file=out)
    print_commit_figures(report, out)
    print_categories(a, out)
    print(f"\n{'stage':<12}{'p50':>8}{'p95':>8}{'p99':>8}{'n':>6}{'share':>8}", file=out)
    for stage, f in a["stages"].items():
        print(f"{stage:<12}{_fmt(f.get('p50')):>8}{_fmt(f.get('p95')):>8}"
              f"{_fmt(f.get('p99')):>8}{f.get('n', 0):>6}{f['share'] * 100:>7.1f}%", file=out)


