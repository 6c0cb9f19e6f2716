"""``speechpipe eval --compare``: policies side by side, clip by clip, in the same run.

Each ``--compare`` names a variant as overrides on top of the base options (``--set``), e.g.
``--compare asr.commit_policy=align,phrases.cut=just_in_time``. Every clip runs under the base
and then under each variant before the next clip starts, so a change in the machine's load
hits all of them alike. The variants share the loaded models and workers (one Whisper, one
Piper); each gets its own phrase-cache namespace (``SessionRequest.phrase_cache``: its label),
so no variant hears speech the phrase cache kept from another.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import replace
from typing import Any, TextIO

from speechpipe.config import PipelineOptions, with_overrides
from speechpipe.errors import InputError
from speechpipe.evaluation.evaluate import (
    _aggregate,
    evaluate_clips,
    print_categories,
    print_report,
)
from speechpipe.evaluation.offline import OfflineRun
from speechpipe.session import Pipeline
from speechpipe.stages.request import SessionRequest

__all__ = ["parse_variant", "variant_pipelines", "compare_variants", "print_comparison",
           "print_provenance"]

SUMMARY = (
    ("StartOff", "median_start_offset"), ("EndOff", "median_end_offset"),
    ("tEndOff", "median_text_end_offset"), ("queued", "median_queued_at_end"),
    ("unsynth", "median_unsynthesized_at_end"), ("silence", "median_silence_after_end"),
    ("synth", "median_synthesis_after_end"), ("LAAL", "median_laal"), ("BLEU", "bleu"),
    ("ASR-BLEU", "asr_bleu"), ("WER", "wer"), ("CPU/s", "cpu_per_audio_s"),
    ("nonspeech", "words_in_non_speech"), ("repeated", "utterances_repeated"),
)
OFFLINE_SUMMARY = (("offBLEU", "offline_bleu"), ("gap", "bleu_gap"),
                   ("regretS", "regret_source"), ("regretT", "regret_target"),
                   ("uttRegS", "utterance_regret_source"),
                   ("uttRegT", "utterance_regret_target"),
                   ("hindRegS", "hindsight_regret_source"),
                   ("hindRegT", "hindsight_regret_target"),
                   ("noiseS", "hindsight_noise_regret_source"),
                   ("noiseT", "hindsight_noise_regret_target"),
                   ("extra.", "clips_with_extra_sentence_ends"),
                   ("inside.", "clips_with_extra_mid_sentence_ends"))


# option groups read when sessions start; ``pipeline.*`` and ``batching.*`` shape the loaded
# models and shared workers, which all variants share, so they cannot vary here
PER_SESSION_GROUPS = ("vad", "asr", "phrases", "catch_up")


def parse_variant(text: str) -> tuple[str, list[str]]:
    """``a.b=1,c.d=x`` -> (label, overrides); the label is the text itself. Raises
    ``InputError`` for an option the variants cannot vary."""
    overrides = [part.strip() for part in text.split(",") if part.strip()]
    for item in overrides:
        group = item.partition(".")[0].strip()
        if group not in PER_SESSION_GROUPS:
            raise InputError(
                f"--compare {item!r}: only per-session options can vary in one run "
                f"({', '.join(PER_SESSION_GROUPS)}); {group} options are loaded once and shared "
                "(run eval once per value instead)")
    return text, overrides


def variant_pipelines(
    pipeline: Pipeline, variants: list[str]
) -> list[tuple[str, Pipeline]]:
    """The base pipeline and one view of it per variant (same models, other options)."""
    out: list[tuple[str, Pipeline]] = [("base", pipeline)]
    for text in variants:
        label, overrides = parse_variant(text)
        options: PipelineOptions = with_overrides(pipeline.options, overrides)
        view = copy.copy(pipeline)
        view.options = options
        out.append((label, view))
    return out


async def compare_variants(
    pipelines: list[tuple[str, Pipeline]], clips: list[dict[str, Any]],
    request: SessionRequest, detect_language: bool = False,
    offline: OfflineRun | None = None,
) -> dict[str, Any]:
    """Interleaved runs; per variant the report ``evaluate_clips`` gives (without the
    per-stage breakdown, which is pooled per run there). ``offline``: the offline
    reference (one for all variants: the same weights)."""
    rows: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in pipelines}
    totals: dict[str, list[float]] = {label: [0.0, 0.0, 0.0] for label, _ in pipelines}
    for number, clip in enumerate(clips, 1):
        for index, (label, pipeline) in enumerate(pipelines):
            variant_request = replace(request, phrase_cache=f"compare {index}: {label}")
            result = await evaluate_clips(pipeline, [clip], variant_request,
                                          detect_language=detect_language, progress=False,
                                          offline=offline)
            row = result["clips"][0]
            rows[label].append(row)
            total = totals[label]
            total[0] += row["cpu_per_audio_s"] * row["duration_s"]
            total[1] += row["duration_s"]
            total[2] += row["rtf"] * row["duration_s"]
        print(f"clip {number}/{len(clips)} {clip['id']}: EndOffset "
              + "  ".join(f"{label[:24]} {_num(rows[label][-1].get('end_offset'))}"
                          for label, _ in pipelines), file=sys.stderr, flush=True)
    reports = {}
    target = request.target_lang.strip().lower()
    for label, _ in pipelines:
        cpu, audio, wall = totals[label]
        reports[label] = {"clips": rows[label], "aggregate": _aggregate(
            rows[label], clips, {}, cpu, audio, wall, target)}
    return {"variants": reports}


def _num(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def print_provenance(out: TextIO = sys.stdout) -> None:
    """The command (to re-run it) and the machine with its load average now: a figure
    without them cannot be compared with another (docs/benchmarks.md)."""
    import os
    import shlex

    from speechpipe.machine import describe_cpu

    print("command: speechpipe " + shlex.join(sys.argv[1:]), file=out)
    print(f"machine: {describe_cpu()}; load average at the end "
          + " ".join(f"{v:.2f}" for v in os.getloadavg()), file=out)


def print_comparison(report: dict[str, Any], out: TextIO = sys.stdout) -> None:
    """Print the command, the machine, each variant's report, then a summary table."""
    print_provenance(out)
    for label, variant in report["variants"].items():
        print(f"\n== {label}", file=out)
        print_report(variant, out=out)
    labels = list(report["variants"])
    print("\n== same run, medians over clips (seconds; BLEU corpus)", file=out)
    summary: tuple[tuple[str, str], ...] = SUMMARY
    if any("offline_bleu" in report["variants"][label]["aggregate"] for label in labels):
        summary = (*SUMMARY, *OFFLINE_SUMMARY)
    print(f"{'variant':<44}" + "".join(f"{name:>10}" for name, _ in summary), file=out)
    for label in labels:
        a = report["variants"][label]["aggregate"]
        print(f"{label[:43]:<44}" + "".join(f"{_num(a.get(key)):>10}" for _, key in summary),
              file=out)
    if any(report["variants"][label]["aggregate"].get("by_category") for label in labels):
        print("\n== same run, by category", file=out)
        for label in labels:
            print_categories(report["variants"][label]["aggregate"], out, label)
    if len(labels) > 1:
        print(f"\nper-clip speech EndOffset (s)\n{'clip':<28}"
              + "".join(f"{'v' + str(i):>8}" for i in range(len(labels))), file=out)
        for i, row in enumerate(report["variants"][labels[0]]["clips"]):
            print(f"{row['id'][:27]:<28}" + "".join(
                f"{_num(report['variants'][label]['clips'][i].get('end_offset')):>8}"
                for label in labels), file=out)
        for i, label in enumerate(labels):
            print(f"v{i} = {label}", file=out)
