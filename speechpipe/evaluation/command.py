"""The ``speechpipe eval`` command: load the pipeline, then score the manifest's clips
(``speechpipe.evaluation.evaluate``) or compare variants (``speechpipe.evaluation.compare``).

It sits above both, so neither imports the other's caller.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from speechpipe.config import PipelineOptions, with_overrides
from speechpipe.errors import InputError
from speechpipe.evaluation.compare import (
    compare_variants,
    parse_variant,
    print_comparison,
    variant_pipelines,
)
from speechpipe.evaluation.evaluate import (
    evaluate_clips,
    load_manifest,
    print_report,
    select_clips,
)
from speechpipe.session import Pipeline, apply_process_limits
from speechpipe.stages.request import SessionRequest

__all__ = ["run_eval"]


def run_eval(args: argparse.Namespace, options: PipelineOptions, request: SessionRequest) -> int:
    """The ``eval`` command: evaluate the manifest's clips; returns the exit code."""
    clips = select_clips(load_manifest(args.manifest), args, request.target_lang)
    if not clips:
        raise InputError(f"{args.manifest}: no clips to evaluate (check --category/--all)")
    missing = [c["path"] for c in clips if not Path(c["path"]).is_file()]
    if missing:
        raise InputError(f"{missing[0]}: listed in the manifest but missing")
    if getattr(args, "compare", None):  # a bad variant fails before any model loads
        for text in args.compare:
            with_overrides(options, parse_variant(text)[1])
    apply_process_limits(options)
    pipeline = Pipeline.load(options)
    try:
        pipeline.resolve(request)
        pipeline.warm_up()
        if getattr(args, "compare", None):
            return _run_comparison(args, pipeline, clips, request)
        report = asyncio.run(evaluate_clips(
            pipeline, clips, request, detect_language=args.detect_language))
    finally:
        pipeline.close()
    report["settings"] = {"pace": request.pace, "mode": request.mode,
                          "detect_language": args.detect_language}
    print_report(report)
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=2, ensure_ascii=False))
        print(f"\nwrote {args.report}")
    return 0


def _run_comparison(args: argparse.Namespace, pipeline: Pipeline, clips: list[dict[str, Any]],
                    request: SessionRequest) -> int:
    """``--compare``: the base options and each variant, interleaved per clip."""
    pipelines = variant_pipelines(pipeline, args.compare)
    report = asyncio.run(compare_variants(pipelines, clips, request,
                                          detect_language=args.detect_language))
    report["settings"] = {"pace": request.pace, "mode": request.mode,
                          "detect_language": args.detect_language, "compare": args.compare}
    print_comparison(report)
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=2, ensure_ascii=False))
        print(f"\nwrote {args.report}")
    return 0
