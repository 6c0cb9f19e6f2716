"""``speechpipe bench cascade``: what the text-MT cascade (captions -> CTranslate2 MT) costs.

Each ``--file`` is translated as a live session would (real-time pace, ``--mt ct2:MODEL``);
from each trace it reads:

- MT seconds (the ``mt`` timing of every target update: the worker's wall time, one thread,
  so CPU-bound work; queueing inside the worker is included, so it is an upper bound) per
  audio second and per committed source word;
- the added latency from a caption commit (source committed text grew) to the next
  translation update, and to the next translation *commit* (target committed text grew), p50
  and p95, in wall time;
- and to the commit that *covers* it: the committed translation holds as many words as the
  captions did then. With ``--weights copy`` (a translation word for word) that is when the
  caption's own words were translated and committed; the next commit can be an earlier
  word's (LocalAgreement commits a word when the update after it agrees).

Without ``--model`` it builds a random-weight model of OPUS-MT base size
(``speechpipe.bench.tiny_mt.build_opus_size_pair``): the words mean nothing, the work per
token is a real model's (it also runs to the length cap, so it is, if anything, pessimistic).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from speechpipe.bench.stats import percentile_or_none
from speechpipe.transport.file_output import write_text_file

__all__ = ["register_cascade", "cascade_figures"]


def cascade_figures(records: Sequence[dict[str, Any]], audio_s: float) -> dict[str, Any]:
    """The cost and the added latency of the MT stage in one trace (see module docstring)."""
    mt_s = sum(float(r.get("timings", {}).get("mt", 0.0)) for r in records
               if r["event"].startswith("mt."))
    words = 0
    to_update: list[float] = []
    to_commit: list[float] = []
    source_done: dict[int, int] = {}
    waiting: list[tuple[int, float, bool]] = []  # utterance, caption commit wall_t, updated
    uncovered: list[tuple[int, float, int]] = []  # utterance, caption commit wall_t, words
    to_cover: list[float] = []
    target_words: dict[int, int] = {}
    for r in records:
        utt = int(r.get("utterance") or 0)
        if r["event"] in ("asr.commit", "asr.partial") and r.get("language") is not None:
            n = len(str(r.get("committed", "")).split())
            if n > source_done.get(utt, 0):
                words += n - source_done.get(utt, 0)
                source_done[utt] = n
                waiting.append((utt, float(r["wall_t"]), False))
                uncovered.append((utt, float(r["wall_t"]), n))
        elif r["event"].startswith("mt."):
            n = len(str(r.get("committed", "")).split())
            grew = n > target_words.get(utt, 0)
            target_words[utt] = max(n, target_words.get(utt, 0))
            covered = [u for u in uncovered if u[0] == utt and (u[2] <= n or r.get("final"))]
            to_cover += [float(r["wall_t"]) - t0 for _, t0, _ in covered]
            uncovered = [u for u in uncovered if u not in covered]
            kept = []
            for w_utt, t0, updated in waiting:
                if w_utt != utt:
                    kept.append((w_utt, t0, updated))
                    continue
                if not updated:
                    to_update.append(float(r["wall_t"]) - t0)
                if grew or r.get("final"):
                    to_commit.append(float(r["wall_t"]) - t0)
                else:
                    kept.append((w_utt, t0, True))
            waiting = kept

    return {
        "audio_s": round(audio_s, 3), "mt_s": round(mt_s, 4),
        "mt_s_per_audio_s": round(mt_s / audio_s, 5) if audio_s else None,
        "committed_source_words": words,
        "mt_ms_per_word": round(1000 * mt_s / words, 2) if words else None,
        "commit_to_update_s": _spread(to_update),
        "commit_to_commit_s": _spread(to_commit),
        # until the committed translation has as many words as the captions had then: the
        # words' own translation for a model that translates word for word (the copy
        # model); for any other model a count, not a meaning
        "commit_to_covered_s": _spread(to_cover),
    }


def _spread(values: list[float]) -> dict[str, Any]:
    """p50, p95 and the values themselves (so several files' can be pooled)."""
    return {"p50": percentile_or_none(values, 50, 4), "p95": percentile_or_none(values, 95, 4),
            "n": len(values), "values": [round(v, 4) for v in values]}


def pooled_spread(runs: Sequence[dict[str, Any]], key: str) -> dict[str, Any]:
    """``key``'s spread over every run's values at once (each file's caption commits)."""
    return _spread([v for run in runs for v in run[key]["values"]])


def register_cascade(kinds: argparse._SubParsersAction) -> None:
    """Add ``bench cascade`` to ``speechpipe bench``."""
    cascade = kinds.add_parser("cascade", help="text-MT cascade: MT cost per audio second and "
                               "added latency from caption commit to translation commit")
    cascade.add_argument("--file", action="append", default=[], metavar="PATH")
    cascade.add_argument("--prefix-sweep", action="store_true",
                         help="instead of files: an open update's cost as its forced prefix "
                              "grows, step by step against one pass (one thread)")
    cascade.add_argument("--model", default=None,
                         help="CTranslate2 MT folder (default: random weights, OPUS-MT size)")
    cascade.add_argument("--weights", choices=("random", "copy"), default="random",
                         help="without --model: the OPUS-size model's weights: random (its "
                              "outputs run to the length cap; an upper bound) or copy (it "
                              "ends where the source ends and agrees with itself; a lower "
                              "bound), speechpipe/bench/opus_size.py")
    cascade.add_argument("--source-lang", default="en")
    cascade.add_argument("--target-lang", default="es")
    cascade.add_argument("--pace", choices=("realtime", "fast"), default="realtime")
    cascade.add_argument("--voice", default=None,
                         help="Piper voice name (default: by target language); the MT figures "
                         "do not depend on it, so any installed voice measures them")
    cascade.add_argument("--voices-dir", action="append", default=[], metavar="DIR",
                         help="extra folder with Piper voices (repeatable)")
    cascade.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                         dest="settings",
                         help="an option for the translate runs (repeatable), e.g. "
                              "text_mt.open_new_tokens=0")
    cascade.add_argument("--report", default=None, help="write the figures as JSON here")
    cascade.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    import sys

    from speechpipe.bench.record import note
    from speechpipe.errors import SpeechpipeError

    if not args.file and not args.prefix_sweep:
        print("speechpipe bench cascade: give --file PATH (one or more) or --prefix-sweep",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="speechpipe-bench-cascade-") as tmp:
        model = args.model
        if model is None:
            from speechpipe.bench.opus_size import build_opus_size_pair

            model = str(build_opus_size_pair(Path(tmp) / "opus-size", args.source_lang,
                                             args.target_lang, weights=args.weights))
        if args.prefix_sweep:
            from speechpipe.bench.mt_prefix import prefix_sweep, print_prefix_sweep

            try:
                rows = prefix_sweep(Path(model), args.source_lang, args.target_lang,
                                    new_tokens=8)
            except RuntimeError as exc:
                print(f"speechpipe bench cascade: {exc}", file=sys.stderr)
                return 1
            print_prefix_sweep(rows)
            note({"prefix_sweep": rows})  # --record (speechpipe.bench.record)
            if args.report:
                write_text_file(args.report, json.dumps({"prefix_sweep": rows}, indent=2) + "\n",
                                "the report")
            return 0
        try:
            runs, threads = _translate_files(args, model)
        except SpeechpipeError as exc:
            print(f"speechpipe bench cascade: {exc}", file=sys.stderr)
            return 1
    records = [dict(r) for r in runs]
    total_audio = sum(r["audio_s"] for r in records)
    total_mt = sum(r["mt_s"] for r in records)
    total_cpu = sum(r["mt_cpu_s"] for r in records)
    print(f"{'file':<32} {'MT CPU/audio s':>14} {'MT s/audio s':>12} {'ms/word':>8} "
          f"{'upd p50':>8} {'upd p95':>8} {'commit p50':>10} {'commit p95':>10} "
          f"{'covered p50':>11} {'covered p95':>11}")
    for path, r in zip(args.file, records, strict=True):
        print(_row(Path(path).name, r["mt_cpu_per_audio_s"], r["mt_s_per_audio_s"],
                   r["mt_ms_per_word"], r))
    counted = ("the MT worker thread, CTranslate2's only thread" if threads == 1 else
               f"the MT worker thread only: {threads - 1} more CTranslate2 thread(s) not "
               f"counted")
    pooled = {key: pooled_spread(records, key) for key in _LATENCIES}
    print(_row("all files", round(total_cpu / total_audio, 5),
               round(total_mt / total_audio, 5), "", pooled))
    print(f"all: {total_cpu / total_audio:.4f} MT CPU-s per audio s ({counted}), "
          f"{total_mt / total_audio:.4f} MT s per audio s (wall, queue included) over "
          f"{total_audio:.1f} s; caption commit -> translation commit p95 "
          f"{pooled['commit_to_commit_s']['p95']} s over {pooled['commit_to_commit_s']['n']} "
          f"caption commits")
    report = {"model": args.model or f"opus-size {args.weights}", "settings": args.settings,
              "mt_threads": threads, "all_files": pooled, "runs": records}
    note(report)  # --record (speechpipe.bench.record)
    if args.report:
        write_text_file(args.report, json.dumps(report, indent=2) + "\n", "the report")
    return 0


_LATENCIES = ("commit_to_update_s", "commit_to_commit_s", "commit_to_covered_s")


def _row(name: str, cpu: Any, wall: Any, ms_per_word: Any, figures: dict[str, Any]) -> str:
    """One line of the table under the header ``_run`` prints."""
    latencies = [figures[key][q] for key in _LATENCIES for q in ("p50", "p95")]
    widths = (8, 8, 10, 10, 11, 11)
    return (f"{name:<32} {cpu!s:>14} {wall!s:>12} {ms_per_word!s:>8} "
            + " ".join(f"{v!s:>{w}}" for v, w in zip(latencies, widths, strict=True)))


def _translate_files(args: argparse.Namespace, model: str
                     ) -> tuple[list[dict[str, Any]], int]:
    """Translate each ``--file`` as a live session would, in this process (one pipeline,
    loaded once), with the MT worker thread's CPU read around each file (``mt_cpu_s``): the
    decoder runs on that thread (greedy, through the native reader; beam search and
    ``pipeline.mt_prefill=false`` run on CTranslate2's own threads and are not counted).
    Also ``pipeline.mt_threads``: with more than one, CTranslate2's other threads are not
    counted."""
    import asyncio
    import threading

    from speechpipe.bench.cost import threads_cpu
    from speechpipe.bench.record import print_decoder
    from speechpipe.config import with_overrides
    from speechpipe.decoder_path import pipeline_decoder_paths
    from speechpipe.file_translation import translate_audio
    from speechpipe.session import Pipeline, PipelineOptions, apply_process_limits
    from speechpipe.stages.request import SessionRequest
    from speechpipe.transport.file_replay import read_audio

    options = with_overrides(PipelineOptions(), args.settings)
    if args.voices_dir:
        options = dataclasses.replace(options, voice_dirs=(*options.voice_dirs,
                                                           *args.voices_dir))
    apply_process_limits(options)

    def mt_threads() -> set[int]:
        return {t.native_id for t in threading.enumerate()
                if t.native_id is not None and t.name.startswith("ct2-mt")}

    async def run_all() -> list[dict[str, Any]]:
        out = []
        async with Pipeline.load(options) as pipeline:
            for index, path in enumerate(args.file):
                audio = read_audio(path)
                request = SessionRequest(
                    source_lang=args.source_lang, target_lang=args.target_lang,
                    voice=args.voice, mt=f"ct2:{model}", priority="replay", pace=args.pace,
                    phrase_cache=f"bench cascade {index}")
                threads = mt_threads()
                cpu0 = {tid: threads_cpu({tid}) for tid in threads}
                run = await translate_audio(pipeline, audio, request)
                # the worker's thread starts with the first request: a new one counts from 0
                mt_cpu = sum(threads_cpu({tid}) - cpu0.get(tid, 0.0) for tid in mt_threads())
                figures = cascade_figures(run.records, run.input_seconds)
                figures["mt_cpu_s"] = round(mt_cpu, 3)
                figures["mt_cpu_per_audio_s"] = (round(mt_cpu / run.input_seconds, 5)
                                                 if run.input_seconds else None)
                out.append(figures)
            print_decoder(pipeline_decoder_paths(pipeline))  # the paths the figures ran on
        return out

    return asyncio.run(run_all()), options.mt_threads
