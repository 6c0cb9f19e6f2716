"""The ``speechpipe eval`` command: load the pipeline, then score the manifest's clips
(``speechpipe.evaluation.evaluate``) or compare variants (``speechpipe.evaluation.compare``).

It sits above both, so neither imports the other's caller.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from speechpipe.bench.record import note, print_decoder
from speechpipe.config import PipelineOptions, with_overrides
from speechpipe.decoder_path import pipeline_decoder_paths
from speechpipe.errors import InputError
from speechpipe.evaluation.compare import (
    compare_variants,
    parse_variant,
    print_comparison,
    print_provenance,
    variant_pipelines,
)
from speechpipe.evaluation.evaluate import (
    check_clips,
    evaluate_clips,
    print_report,
    select_clips,
)
from speechpipe.evaluation.manifest import load_manifest
from speechpipe.evaluation.offline import (
    OfflineRun,
    check_offline_request,
    offline_beam,
    offline_references,
)
from speechpipe.machine import describe_cpu
from speechpipe.output_paths import check_outputs_spare_inputs
from speechpipe.session import Pipeline, apply_process_limits, check_request
from speechpipe.stages.request import SessionRequest
from speechpipe.subtitles import ReportSubtitles
from speechpipe.transport.file_output import check_output_path, replace_file

__all__ = ["run_eval"]


def run_eval(args: argparse.Namespace, options: PipelineOptions, request: SessionRequest) -> int:
    """The ``eval`` command: evaluate the manifest's clips; returns the exit code."""
    # Everything a run would trip on fails here, before the models load: the report path,
    # the manifest's lines, every selected clip's audio, the request, the variants.
    if args.limit is not None and args.limit < 1:  # -1 silently dropped the last clip
        raise InputError(f"--limit must be 1 or more, not {args.limit}")
    beam = offline_beam(args)
    if beam is not None:
        check_offline_request(request.target_lang, request.mt)
    if args.report:
        check_output_path(args.report)
    listed = load_manifest(args.manifest)
    # the report replaces no input: not the manifest, a clip it lists (selected or not), or
    # --config (``eval M --report M`` used to overwrite the manifest, exit 0)
    check_outputs_spare_inputs(
        [("the manifest", args.manifest), ("the --config file", getattr(args, "config", None)),
         *((f"a clip of the manifest (line {clip['line']})", clip["path"]) for clip in listed)],
        [("--report", args.report)])
    clips = select_clips(listed, args, request.target_lang)
    if not clips:
        raise InputError(f"{args.manifest}: no clips to evaluate (check --category/--all)")
    missing = [c["path"] for c in clips if not Path(c["path"]).is_file()]
    if missing:
        raise InputError(f"{missing[0]}: listed in the manifest but missing")
    check_clips(clips, args.manifest)
    check_request(request)
    for clip in clips:
        if not args.detect_language:
            check_request(replace(request, source_lang=clip["lang"]))
    if getattr(args, "compare", None):  # a bad variant fails before any model loads
        for text in args.compare:
            with_overrides(options, parse_variant(text)[1])
    subtitles = (ReportSubtitles(args.report)
                 if args.report and not getattr(args, "compare", None) else None)
    apply_process_limits(options)
    pipeline = Pipeline.load(options)
    try:
        pipeline.resolve(request)
        pipeline.warm_up()
        # before the streamed clips: no offline decode loads the machine while they are timed
        offline = None if beam is None else _offline(pipeline, clips, beam, request)
        if getattr(args, "compare", None):
            return _run_comparison(args, pipeline, clips, request, offline)
        report = asyncio.run(evaluate_clips(
            pipeline, clips, request, detect_language=args.detect_language, offline=offline,
            on_run=subtitles.write if subtitles is not None else None,
            progress=sys.stderr.isatty()))
        decoder = pipeline_decoder_paths(pipeline)  # text MT loads with its first session
    finally:
        pipeline.close()
    report["settings"] = {"pace": request.pace, "mode": request.mode,
                          "detect_language": args.detect_language, "machine": describe_cpu()}
    if offline is not None:
        report["offline_reference"] = offline.summary()
    print_provenance()
    print_decoder(decoder)  # the paths the figures ran on (speechpipe.decoder_path)
    print_report(report)
    note(report)  # --record: the aggregate (speechpipe.bench.record leaves the clips out)
    if args.report:
        _write_report(args.report, report)
    return 0


def _offline(pipeline: Pipeline, clips: list[dict[str, Any]], beam: int,
             request: SessionRequest) -> OfflineRun:
    """The offline reference of every clip, on the pipeline's loaded Whisper (the weights
    ``--asr-model`` resolves to), from the cache where it has them."""
    from speechpipe.models.whisper.weights import resolve_whisper_model

    for clip in clips:  # a language the loaded model lacks: one line, not a traceback
        pipeline.engine.check_language(clip["lang"])
    model_dir = resolve_whisper_model(pipeline.options.asr_model)
    return offline_references(pipeline.engine.model, model_dir, clips, beam,
                              request.target_lang.strip().lower(),
                              progress=sys.stderr.isatty())


def _write_report(path: str, report: dict[str, Any]) -> None:
    """Write the JSON report by rename (``replace_file``); a failure now (disk full) is one
    line (``OutputError``), not a traceback."""
    text = json.dumps(report, indent=2, ensure_ascii=False)
    with replace_file(path, "the report") as fh:
        fh.write(text)
    print(f"\nwrote {path}" + (f" (subtitles in {Path(path).stem}-subtitles/)"
                               if "clips" in report else ""))


def _run_comparison(args: argparse.Namespace, pipeline: Pipeline, clips: list[dict[str, Any]],
                    request: SessionRequest, offline: OfflineRun | None = None) -> int:
    """``--compare``: the base options and each variant, interleaved per clip."""
    pipelines = variant_pipelines(pipeline, args.compare)
    report = asyncio.run(compare_variants(
        pipelines, clips, request, detect_language=args.detect_language,
        offline=offline))
    report["settings"] = {"pace": request.pace, "mode": request.mode,
                          "detect_language": args.detect_language, "compare": args.compare,
                          "machine": describe_cpu()}
    if offline is not None:
        report["offline_reference"] = offline.summary()
        for variant in report["variants"].values():
            variant["offline_reference"] = report["offline_reference"]
    print_comparison(report)
    print_decoder(pipeline_decoder_paths(pipeline))  # the paths the figures ran on
    note(report)  # --record (speechpipe.bench.record)
    if args.report:
        _write_report(args.report, report)
    return 0
