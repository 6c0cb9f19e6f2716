"""``speechpipe bench cost``: what a second of speech costs, and where the time goes.

For each input (a file, or a playlist of a manifest's clips per language, ``--gap`` seconds
apart), at 1 and at N concurrent sessions in one process (the shared ASR worker, as the
server runs them), it prints per audio second of input:

- CPU seconds of the process (``getrusage``; start-up, model load and warm-up excluded), split
  into the Whisper encoder, the decoder (``generate``, alignment included), Piper and the rest
  (VAD, the speech classifier, log-mel features, the event loop). CTranslate2's CPU is that of
  its own threads (``/proc/self/task``: the threads the model load started), split between
  encoder and decoder in the ratio of their call times (``WhisperEngine.stats``); Piper's is
  that of its worker threads (``tts-*``; onnxruntime runs on them with one intra-op thread);
- encoder input seconds (window + trailing silence) per audio second;
- tokens per audio second the decoder generated (kept or cut at a cap), forced (prefixes) and
  read as context (``<|startofprev|>``), and the mean items per ``generate`` call;
- translation commit lag (wall time of each translation commit minus the end of the audio it
  was decided on: how far behind the live audio the pipeline is) p50 / p95 / max;
- speech StartOffset and EndOffset per clip of the input (medians and p95), as ``eval``
  defines them.

``--compare GROUP.FIELD=VALUE[,...]`` runs each input again with those overrides, interleaved,
e.g. ``--compare asr.windowing=false`` for the unbounded windows of earlier builds.
``--repeat N`` runs every (input, sessions, variant) N times, interleaved, and adds a summary:
the median and range of the CPU per audio second, commit lag p95 and EndOffset over the
repeats, and each variant's median CPU against the first variant's. On a 2-core VM the same
build measured 0.306-0.368 CPU-s per audio second on one input in eight runs
(docs/benchmarks-history.md, "Seventh round"): one run cannot decide a bar or a 5 %
difference. Every row also gives the CPU time the hypervisor took from the machine during its
run (``steal``, ``/proc/stat``, as a share of the run's wall time x cores): a run with steal
was not on a quiet machine. Sessions of one run are offset (a rotated playlist, or leading
silence for a file) so that they never send identical requests, and each gets its own
phrase-cache namespace (``SessionRequest.phrase_cache``) so that no session is served
another's phrases.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from speechpipe.transport.file_output import write_text_file

__all__ = ["register_cost", "CostInput", "cost_figures", "playlists", "repeat_summary",
           "steal_seconds"]

GAP_S = 0.8


@dataclass(frozen=True)
class CostInput:
    """One input: audio at 16 kHz, its language and where each clip lies in it (seconds)."""

    name: str
    lang: str
    audio: np.ndarray
    spans: tuple[tuple[float, float], ...]

    @property
    def seconds(self) -> float:
        """Length in seconds."""
        return len(self.audio) / 16_000


def register_cost(kinds: argparse._SubParsersAction) -> None:
    """Add ``bench cost`` to ``speechpipe bench``."""
    cost = kinds.add_parser("cost", help="CPU per audio second, split by stage, and commit lag")
    cost.add_argument("--file", action="append", default=[], metavar="PATH",
                      help="an input file (repeatable); its language from --source-lang")
    cost.add_argument("--source-lang", default="auto", help="language of the --file inputs")
    cost.add_argument("--playlist", metavar="MANIFEST",
                      help="one input per language: the manifest's clips with a reference "
                      "translation, --gap seconds apart")
    cost.add_argument("--category", action="append", default=[],
                      help="only these manifest categories (repeatable)")
    cost.add_argument("--gap", type=float, default=GAP_S, help="seconds between clips")
    cost.add_argument("--max-seconds", type=float, default=None,
                      help="cut each playlist after the clip that reaches this length")
    cost.add_argument("--sessions", default="1", help="session counts, e.g. 1,8")
    cost.add_argument("--pace", choices=("realtime", "fast"), default="realtime")
    cost.add_argument("--set", dest="overrides", action="append", default=[],
                      metavar="GROUP.FIELD=VALUE", help="override one option for every run")
    cost.add_argument("--compare", action="append", default=[], metavar="GROUP.FIELD=VALUE",
                      help="also run with these overrides, interleaved (repeatable)")
    cost.add_argument("--repeat", type=int, default=1, metavar="N",
                      help="run everything N times, interleaved, and summarize (median, range)")
    cost.add_argument("--report", help="write the figures as JSON here")
    cost.set_defaults(handler=_run_cost)


def playlists(manifest: str | Path, categories: list[str], gap_s: float = GAP_S,
              max_seconds: float | None = None, target: str = "en") -> list[CostInput]:
    """Per language, the manifest's x-to-``target`` clips (with a reference translation)
    back to back with ``gap_s`` of silence between them, in manifest order."""
    from speechpipe.evaluation.manifest import load_manifest
    from speechpipe.transport.file_replay import read_audio

    by_lang: dict[str, list[dict[str, Any]]] = {}
    for clip in load_manifest(manifest):
        if clip["lang"] == target or not clip.get("translation_en"):
            continue
        if categories and clip.get("category") not in categories:
            continue
        by_lang.setdefault(clip["lang"], []).append(clip)
    out = []
    gap = np.zeros(int(gap_s * 16_000), np.int16)
    for lang, clips in by_lang.items():
        parts: list[np.ndarray] = []
        spans: list[tuple[float, float]] = []
        at = 0
        for clip in clips:
            audio = read_audio(clip["path"])
            spans.append((at / 16_000, (at + len(audio)) / 16_000))
            parts += [audio, gap]
            at += len(audio) + len(gap)
            if max_seconds is not None and at / 16_000 >= max_seconds:
                break
        out.append(CostInput(f"playlist-{lang} ({len(spans)} clips)", lang,
                             np.concatenate(parts), tuple(spans)))
    return out


def _file_input(path: str, lang: str) -> CostInput:
    from speechpipe.transport.file_replay import read_audio

    audio = read_audio(path)
    return CostInput(Path(path).name, lang, audio, ((0.0, len(audio) / 16_000),))


def _offset(item: CostInput, index: int) -> CostInput:
    """Session ``index``'s copy: a playlist rotated by ``index`` clips; a single file with
    ``0.37 * index`` s of leading silence (no two sessions send identical requests)."""
    if index == 0:
        return item
    if len(item.spans) > 1:
        cut = int(item.spans[index % len(item.spans)][0] * 16_000)
        audio = np.concatenate([item.audio[cut:], item.audio[:cut]])
        shift = cut / 16_000
        total = item.seconds
        spans = tuple(sorted(((a - shift) % total, (a - shift) % total + (b - a))
                             for a, b in item.spans))
        return replace(item, audio=audio, spans=spans)
    lead = int(0.37 * index * 16_000)
    audio = np.concatenate([np.zeros(lead, np.int16), item.audio])
    return replace(item, audio=audio, spans=tuple((a + lead / 16_000, b + lead / 16_000)
                                                  for a, b in item.spans))


def thread_ids() -> set[int]:
    """Native ids of this process's threads now (Linux ``/proc``; empty elsewhere)."""
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return set()


def threads_cpu(tids: set[int]) -> float:
    """CPU seconds the threads ``tids`` have used (those that still exist)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as fh:
                fields = fh.read().rpartition(")")[2].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def steal_seconds(stat: str | None = None) -> float | None:
    """CPU seconds the hypervisor has taken from this machine (all cores; the ``steal``
    field of ``/proc/stat``'s ``cpu`` line), or None where it cannot be read."""
    try:
        if stat is None:
            with open("/proc/stat") as fh:
                stat = fh.readline()
        fields = stat.split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK") if fields[0] == "cpu" else None
    except (OSError, IndexError, ValueError):
        return None


def repeat_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (input, sessions, variant), in first-seen order: the number of runs, the median
    and range of CPU per audio second, commit lag p95 and EndOffset p50, and the median CPU
    against that of the input's first variant at the same session count."""
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["input"], row["sessions"], row["variant"]), []).append(row)
    out: list[dict[str, Any]] = []
    first: dict[tuple[str, int], float | None] = {}
    for (name, sessions, variant), runs in groups.items():
        summary: dict[str, Any] = {"input": name, "sessions": sessions, "variant": variant,
                                   "runs": len(runs)}
        for key in ("cpu_per_audio_s", "commit_lag_p95", "end_offset_p50"):
            values = [r[key] for r in runs if r.get(key) is not None]
            summary[key] = {"median": round(statistics.median(values), 4),
                            "min": min(values), "max": max(values)} if values else None
        cpu = summary["cpu_per_audio_s"]["median"] if summary["cpu_per_audio_s"] else None
        base = first.setdefault((name, sessions), cpu)
        summary["cpu_vs_first"] = round(cpu / base, 3) if cpu is not None and base else None
        out.append(summary)
    return out


def print_summary(summary: list[dict[str, Any]], out: Any = None) -> None:
    """``repeat_summary`` as a table: median [min-max] per figure."""
    out = out or sys.stdout

    def cell(figure: dict[str, float] | None, digits: int) -> str:
        if figure is None:
            return "-"
        return (f"{figure['median']:.{digits}f} [{figure['min']:.{digits}f}-"
                f"{figure['max']:.{digits}f}]")

    print(f"{'input':<28}{'N':>3} {'variant':<26}{'runs':>5}  {'CPU/s median [range]':<24}"
          f"{'vs first':>9}  {'lag95 [range]':<19}{'EO50 [range]':<19}", file=out)
    for s in summary:
        ratio = "-" if s["cpu_vs_first"] is None else f"{s['cpu_vs_first']:.3f}"
        print(f"{s['input'][:27]:<28}{s['sessions']:>3} {s['variant'][:25]:<26}{s['runs']:>5}  "
              f"{cell(s['cpu_per_audio_s'], 3):<24}{ratio:>9}  "
              f"{cell(s['commit_lag_p95'], 2):<19}{cell(s['end_offset_p50'], 2):<19}", file=out)


def _pct(values: list[float], q: float) -> float | None:
    from speechpipe.bench.stats import percentile_or_none  # the project's one definition

    return percentile_or_none(values, q)


def clip_offsets(records: list[dict[str, Any]], spans: tuple[tuple[float, float], ...],
                 seconds: float) -> list[dict[str, float | None]]:
    """Speech StartOffset/EndOffset of each clip of an input (``eval``'s definitions, on the
    records of the utterances that start inside the clip)."""
    from speechpipe.evaluation.scores import latency_scores

    starts = {r["utterance"]: r["audio_t"] for r in records if r["event"] == "vad.start"}
    out = []
    for begin, end in spans:
        inside = {u for u, t in starts.items() if begin - 0.3 <= t < end}
        if not inside:
            continue
        subset = [r for r in records if r.get("utterance") in inside]
        out.append(latency_scores(subset, seconds))
    return out


def cost_figures(records_per_session: list[list[dict[str, Any]]],
                 inputs: list[CostInput], cpu_s: float, engine: dict[str, float],
                 wall_s: float, ct2_cpu_s: float, tts_cpu_s: float,
                 realtime: bool = True) -> dict[str, Any]:
    """The figures of one run of N sessions (see the module docs)."""
    audio_s = sum(i.seconds for i in inputs)
    tts_s = tts_cpu_s
    calls = engine["encode_s"] + engine["decode_s"] + engine["align_s"]
    encode_s = ct2_cpu_s * engine["encode_s"] / calls if calls else 0.0
    decode_s = ct2_cpu_s - encode_s
    lags = [r["wall_t"] - r["source_end"] for records in records_per_session for r in records
            if r["event"] == "mt.commit" and r["committed"]] if realtime else []
    offsets = [o for records, item in zip(records_per_session, inputs, strict=True)
               for o in clip_offsets(records, item.spans, item.seconds)]
    ends = [o["end_offset"] for o in offsets if o["end_offset"] is not None]
    start = [o["start_offset"] for o in offsets if o["start_offset"] is not None]
    per = (lambda x: round(x / audio_s, 4)) if audio_s else (lambda x: None)
    return {
        "sessions": len(inputs), "audio_s": round(audio_s, 1), "wall_s": round(wall_s, 1),
        "cpu_per_audio_s": per(cpu_s), "encoder_per_audio_s": per(encode_s),
        "decoder_per_audio_s": per(decode_s), "tts_per_audio_s": per(tts_s),
        "rest_per_audio_s": per(max(0.0, cpu_s - encode_s - decode_s - tts_s)),
        "encoded_audio_per_audio_s": per(engine["encoded_s"]),
        "generated_tokens_per_audio_s": per(engine["generated_tokens"]),
        "kept_tokens_per_audio_s": per(engine["kept_tokens"]),
        "forced_tokens_per_audio_s": per(engine["forced_tokens"]),
        # of the forced ones, read in the prompt pass (models.whisper.prefill), not in beam steps
        "prefilled_tokens_per_audio_s": per(engine["prefilled_tokens"]),
        # sequential decoder steps (a generate call's longest item), the decoder's main cost
        "decoder_steps_per_audio_s": per(engine["decoder_steps"]),
        "context_tokens_per_audio_s": per(engine["context_tokens"]),
        "items_per_generate": (round(engine["decode_items"] / engine["generate_calls"], 2)
                               if engine["generate_calls"] else None),
        "commit_lag_p50": _pct(lags, 50), "commit_lag_p95": _pct(lags, 95),
        "commit_lag_max": max(lags) if lags else None,
        "start_offset_p50": statistics.median(start) if start else None,
        "end_offset_p50": statistics.median(ends) if ends else None,
        "end_offset_p95": _pct(ends, 95), "clips": len(offsets),
    }


RunResult = tuple[list[list[dict[str, Any]]], float, float, dict[str, float]]


async def _run_sessions(pipeline: Any, inputs: list[CostInput], pace: str,
                        run: int, ct2_threads: set[int]) -> RunResult:
    from speechpipe.file_translation import _cpu_seconds, translate_audio
    from speechpipe.stages.request import SessionRequest

    before, cpu0, wall0 = pipeline.engine.stats.snapshot(), _cpu_seconds(), time.monotonic()
    steal0 = steal_seconds()
    ct2_0 = threads_cpu(ct2_threads)
    tts_before = {tid: threads_cpu({tid}) for tid in _tts_thread_ids()}
    runs = await asyncio.gather(*(
        translate_audio(pipeline, item.audio, SessionRequest(
            source_lang=item.lang, pace=pace, priority="live",  # type: ignore[arg-type]
            phrase_cache=f"bench cost {run}.{index}"))
        for index, item in enumerate(inputs)))
    cpu, wall = _cpu_seconds() - cpu0, time.monotonic() - wall0
    steal1 = steal_seconds()
    steal = (steal1 - steal0) / (wall * (os.cpu_count() or 1)) if (
        steal0 is not None and steal1 is not None and wall > 0) else None
    # Piper's worker thread starts with its first phrase: a new thread counts from zero
    tts = sum(threads_cpu({tid}) - tts_before.get(tid, 0.0) for tid in _tts_thread_ids())
    after = pipeline.engine.stats.snapshot()
    engine = {k: after[k] - before[k] for k in after}
    # the native prefill decoder (models.whisper.prefill) runs CTranslate2 on the ASR worker's own
    # thread: the engine measures that thread's CPU during those calls
    ct2 = threads_cpu(ct2_threads) - ct2_0 + engine["native_cpu_s"]
    return [run.records for run in runs], cpu, wall, {
        **engine, "ct2_cpu": ct2, "tts_cpu": tts, "steal": steal}


def _python_threads() -> set[int]:
    """Native ids of the threads Python started (workers, executors): not the engines'."""
    import threading

    return {t.native_id for t in threading.enumerate() if t.native_id is not None}


def _tts_thread_ids() -> set[int]:
    """The Python threads that run Piper (their names say so)."""
    import threading

    return {t.native_id for t in threading.enumerate()
            if t.native_id is not None and "tts" in t.name.lower()}


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


COLUMNS = (("CPU/s", "cpu_per_audio_s", 3), ("enc", "encoder_per_audio_s", 3),
           ("dec", "decoder_per_audio_s", 3), ("tts", "tts_per_audio_s", 3),
           ("rest", "rest_per_audio_s", 3), ("encIn/s", "encoded_audio_per_audio_s", 2),
           ("gen/s", "generated_tokens_per_audio_s", 1),
           ("forced/s", "forced_tokens_per_audio_s", 1),
           ("pre/s", "prefilled_tokens_per_audio_s", 1),
           ("steps/s", "decoder_steps_per_audio_s", 1),
           ("ctx/s", "context_tokens_per_audio_s", 1), ("items", "items_per_generate", 2),
           ("lag50", "commit_lag_p50", 2), ("lag95", "commit_lag_p95", 2),
           ("lagMax", "commit_lag_max", 2), ("SO50", "start_offset_p50", 2),
           ("EO50", "end_offset_p50", 2), ("EO95", "end_offset_p95", 2),
           ("steal", "steal_share", 3))


def print_rows(rows: list[dict[str, Any]], out: Any = None) -> None:
    """The figures as a table, one row per (input, sessions, variant)."""
    out = out or sys.stdout
    print(f"{'input':<28}{'N':>3} {'variant':<26}" + "".join(f"{c:>9}" for c, _, _ in COLUMNS),
          file=out)
    for row in rows:
        print(f"{row['input'][:27]:<28}{row['sessions']:>3} {row['variant'][:25]:<26}"
              + "".join(f"{_fmt(row.get(key), digits):>9}" for _, key, digits in COLUMNS),
              file=out)


def _run_cost(args: argparse.Namespace) -> int:
    from speechpipe.bench.record import note, print_decoder
    from speechpipe.config import with_overrides
    from speechpipe.decoder_path import pipeline_decoder_paths
    from speechpipe.errors import InputError
    from speechpipe.evaluation.compare import variant_pipelines
    from speechpipe.machine import describe_cpu
    from speechpipe.session import Pipeline, PipelineOptions, apply_process_limits
    from speechpipe.stages.model_api import DecodeTask, WhisperRequest

    try:
        counts = [int(n) for n in args.sessions.split(",") if n.strip()]
    except ValueError:
        raise InputError(f"--sessions {args.sessions!r}: give counts like 1,8") from None
    if not counts or min(counts) < 1:
        raise InputError("--sessions: counts must be >= 1")
    if args.repeat < 1:
        raise InputError(f"--repeat {args.repeat}: give a count >= 1")
    options = with_overrides(PipelineOptions(), args.overrides)
    for text in args.compare:  # a bad variant fails before any model loads
        with_overrides(options, [p for p in text.split(",") if p.strip()])
    inputs = [_file_input(path, args.source_lang) for path in args.file]
    if args.playlist:
        inputs += playlists(args.playlist, args.category, args.gap, args.max_seconds)
    if not inputs:
        raise InputError("give --file PATH or --playlist MANIFEST")
    apply_process_limits(options)
    before_load = thread_ids()
    pipeline = Pipeline.load(options)
    rows: list[dict[str, Any]] = []
    try:
        pipeline.engine.warm_up()  # CTranslate2 may start its threads on first use
        pipeline.whisper.warm_up()
        # restricted decoders (asr.vocabulary_words) are models of their own, with threads of
        # their own: loaded now, so their CPU counts as the decoder's, not the rest's
        views = variant_pipelines(pipeline, args.compare)
        for _, view in views:
            for item in inputs:
                words = view.options.asr.vocabulary_words
                if item.lang != "auto" and words:
                    pipeline.engine.run(WhisperRequest(  # a decode starts its threads
                        audio=np.zeros(8_000, np.float32), language=item.lang,
                        tasks=(DecodeTask("translate"),), vocabulary_words=words))
        engine_threads = thread_ids()
        pipeline.warm_up()
        ct2_threads = engine_threads - before_load - _python_threads()
        print(f"command: speechpipe {' '.join(sys.argv[1:])}")
        print(f"machine: {describe_cpu()}; load average at start "
              + " ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)
        print_decoder(pipeline_decoder_paths(pipeline))  # the path the figures ran on
        run = 0
        plan = [(count, item, label, view) for _ in range(args.repeat) for count in counts
                for item in inputs for label, view in views]
        for count, item, label, view in plan:
            copies = [_offset(item, k) for k in range(count)]
            records, cpu, wall, engine = asyncio.run(
                _run_sessions(view, copies, args.pace, run, ct2_threads))
            run += 1
            row = {"input": item.name, "variant": label,
                   **cost_figures(records, copies, cpu, engine, wall,
                                  engine["ct2_cpu"], engine["tts_cpu"],
                                  args.pace == "realtime"),
                   "steal_share": (None if engine["steal"] is None
                                   else round(engine["steal"], 4))}
            rows.append(row)
            print(f"  {item.name} x{count} {label}: CPU {_fmt(row['cpu_per_audio_s'])}"
                  f" s per audio s, lag p95 {_fmt(row['commit_lag_p95'], 2)} s",
                  file=sys.stderr, flush=True)
    finally:
        pipeline.close()
    print_rows(rows)
    summary = repeat_summary(rows) if args.repeat > 1 else []
    if summary:
        print(f"over {args.repeat} interleaved runs:")
        print_summary(summary)
    print("machine: load average at end " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    note({"rows": rows, "summary": summary})  # --record (speechpipe.bench.record)
    if args.report:
        write_text_file(args.report, json.dumps({"rows": rows, "summary": summary}, indent=2),
                        "the report")
        print(f"wrote {args.report}")
    return 0
