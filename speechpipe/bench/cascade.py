"""``speechpipe bench cascade``: what the text-MT cascade (captions -> CTranslate2 MT) costs.

Each ``--file`` is translated as a live session would (real-time pace, ``--mt ct2:MODEL``);
from each trace it reads:

- MT seconds (the ``mt`` timing of every target update: the worker's wall time, one thread,
  so CPU-bound work; queueing inside the worker is included, so it is an upper bound) per
  audio second and per committed source word;
- the added latency from a caption commit (source committed text grew) to the next
  translation update, and to the next translation *commit* (target committed text grew), p50
  and p95, in wall time.

Without ``--model`` it builds a random-weight model of OPUS-MT base size
(``speechpipe.bench.tiny_mt.build_opus_size_pair``): the words mean nothing, the work per
token is a real model's (it also runs to the length cap, so it is, if anything, pessimistic).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from speechpipe.bench.stats import percentile_or_none

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
    target_words: dict[int, int] = {}
    for r in records:
        utt = int(r.get("utterance") or 0)
        if r["event"] in ("asr.commit", "asr.partial") and r.get("language") is not None:
            n = len(str(r.get("committed", "")).split())
            if n > source_done.get(utt, 0):
                words += n - source_done.get(utt, 0)
                source_done[utt] = n
                waiting.append((utt, float(r["wall_t"]), False))
        elif r["event"].startswith("mt."):
            n = len(str(r.get("committed", "")).split())
            grew = n > target_words.get(utt, 0)
            target_words[utt] = max(n, target_words.get(utt, 0))
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

    def p(values: list[float], q: float) -> float | None:
        return percentile_or_none(values, q, 4)

    return {
        "audio_s": round(audio_s, 3), "mt_s": round(mt_s, 4),
        "mt_s_per_audio_s": round(mt_s / audio_s, 5) if audio_s else None,
        "committed_source_words": words,
        "mt_ms_per_word": round(1000 * mt_s / words, 2) if words else None,
        "commit_to_update_s": {"p50": p(to_update, 50), "p95": p(to_update, 95),
                               "n": len(to_update)},
        "commit_to_commit_s": {"p50": p(to_commit, 50), "p95": p(to_commit, 95),
                               "n": len(to_commit)},
    }


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
    import subprocess
    import sys

    import soundfile as sf

    from speechpipe.evaluation.trace import read_trace

    if not args.file and not args.prefix_sweep:
        print("speechpipe bench cascade: give --file PATH (one or more) or --prefix-sweep",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="speechpipe-bench-cascade-") as tmp:
        model = args.model
        if model is None:
            from speechpipe.bench.tiny_mt import build_opus_size_pair

            model = str(build_opus_size_pair(Path(tmp) / "opus-size", args.source_lang,
                                             args.target_lang))
        if args.prefix_sweep:
            from speechpipe.bench.mt_prefix import prefix_sweep, print_prefix_sweep

            try:
                rows = prefix_sweep(Path(model), args.source_lang, args.target_lang,
                                    new_tokens=8)
            except RuntimeError as exc:
                print(f"speechpipe bench cascade: {exc}", file=sys.stderr)
                return 1
            print_prefix_sweep(rows)
            if args.report:
                Path(args.report).write_text(json.dumps({"prefix_sweep": rows}, indent=2) + "\n")
            return 0
        runs = []
        for i, path in enumerate(args.file):
            trace = Path(tmp) / f"{i}.jsonl"
            # a translate subprocess (-P, as the other benches' servers): the bench sits
            # below the CLI and must not import it
            code = subprocess.run(
                [sys.executable, "-P", "-m", "speechpipe", "translate", path, "--out",
                 str(Path(tmp) / f"{i}.wav"), "--trace", str(trace), "--pace", args.pace,
                 "--source-lang", args.source_lang, "--target-lang", args.target_lang,
                 "--mt", f"ct2:{model}", *(["--voice", args.voice] if args.voice else []),
                 *[arg for folder in args.voices_dir for arg in ("--voices-dir", folder)],
                 *[arg for setting in args.settings for arg in ("--set", setting)]],
                stdout=subprocess.DEVNULL, check=False).returncode
            if code != 0:
                return code
            runs.append(cascade_figures(read_trace(trace), sf.info(path).duration))
    records = [dict(r) for r in runs]
    total_audio = sum(r["audio_s"] for r in records)
    total_mt = sum(r["mt_s"] for r in records)
    print(f"{'file':<40} {'MT s/audio s':>12} {'ms/word':>8} {'upd p50':>8} {'upd p95':>8} "
          f"{'commit p50':>10} {'commit p95':>10}")
    for path, r in zip(args.file, records, strict=True):
        print(f"{Path(path).name:<40} {r['mt_s_per_audio_s']!s:>12} {r['mt_ms_per_word']!s:>8} "
              f"{r['commit_to_update_s']['p50']!s:>8} {r['commit_to_update_s']['p95']!s:>8} "
              f"{r['commit_to_commit_s']['p50']!s:>10} {r['commit_to_commit_s']['p95']!s:>10}")
    print(f"all: {total_mt / total_audio:.4f} MT s per audio s over {total_audio:.1f} s")
    if args.report:
        Path(args.report).write_text(json.dumps({"model": args.model or "opus-size random",
                                                 "settings": args.settings,
                                                 "runs": records}, indent=2) + "\n")
    return 0
