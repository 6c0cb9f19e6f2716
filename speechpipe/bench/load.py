"""``speechpipe bench load``: N concurrent WebSocket clients replaying real clips at real time.

Each client plays a playlist of recordings (``--clips MANIFEST``, default the project's
``samples/manifest.jsonl``; 1 s of silence between clips) at real-time pace in 20 ms frames,
then ``stop``, and records every event with its arrival time on its own stream clock. A client
is one speaker: it plays the clips of one language (clients take the languages in turn, and
clips rotated so sessions say different things at a time) and gives that language
(``--detect-language``: ``auto``; ``--mix-languages``: every language in one playlist, the
bench's playlists before the fifth round). Per level it reports:

- **commit latency**: for each event whose ``committed`` text grew, ``stream_t - audio_end``
  (the stream time of the commit minus the end of the audio it covers), p50/p95/p99, target
  side (what is spoken) and source side;
- **StartOffset / EndOffset** per utterance as the client hears it (first translated audio
  minus the speech start; end of the audio laid back to back minus the speech end);
- queued / refused sessions, errors, the server's CPU (its process), the bench's own and other
  processes' (on a busy shared machine the figures mean less);
- from ``/metrics``: mean ASR batch size, dropped (superseded) requests, degrade level.

A level **holds** when the listeners are served (``ListenerRule``): every session was
admitted at once and finished normally, and the speech each client heard ended soon after the
speaker (speech EndOffset p50 <= 2.0 s, p95 <= 3.5 s) and started soon enough (StartOffset
p50 <= 2.5 s). The commit latency is still reported, no longer decisive. Each level prints the
degrade-ladder levels the server ran at while it lasted (sampled every 2 s from ``/metrics``).
``--variant "asr.commit_policy=align,..."`` adds a server with those ``--set`` overrides (one
per variant), run in the same bench, levels alternating, against the defaults.
*Sessions held at real time* is the largest level that holds. Without ``--url`` the bench
starts the server itself (a subprocess on 127.0.0.1, port chosen by the OS), once with
batching and once with ``--set batching.enabled=false``, in the same run, and prints the
ratio. Everything is bounded: at most ``--max-sessions`` clients, each session ``--duration``
seconds of audio, a hard time limit per level; the bench stops by itself.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from speechpipe.bench.clips import (
    RATE,
    Clip,
    find_manifest,
    load_clips,
    playlist,
    playlist_recordings,
    speaker_language,
    voiced_span,
)
from speechpipe.bench.load_client import (
    ClientRun,
    commit_latencies,
    committed_by_end,
    end_offset_split,
    recording_offsets,
    run_client,
    utterance_offsets,
)
from speechpipe.bench.load_level import (
    LevelReport,
    ListenerRule,
    ladder_summary,
    print_row,
    run_level,
    solo_demand,
)
from speechpipe.bench.load_starts import StartCase, print_cases, run_start_case, run_start_cases
from speechpipe.bench.record import note
from speechpipe.bench.server_process import ServerProcess, scrape
from speechpipe.bench.stats import percentile, rounded_percentile
from speechpipe.machine import describe_cpu, usable_cores
from speechpipe.transport.file_output import write_text_file

# the bench's pieces live in clips, load_client, load_level and load_starts; they are
# importable from here as before
__all__ = ["run_load_bench", "register_load", "ClientRun", "commit_latencies", "utterance_offsets",
           "end_offset_split", "speaker_language", "percentile", "LevelReport", "ListenerRule",
           "ladder_summary", "solo_demand", "committed_by_end", "playlist_recordings",
           "voiced_span", "recording_offsets", "StartCase", "run_start_case",
           "run_start_cases", "Clip", "RATE", "find_manifest", "load_clips", "playlist",
           "run_client", "run_level"]

_print_row = print_row  # the names the tests and older callers use
_print_cases = print_cases
DEFAULT_RULE = ListenerRule()  # issue 12's rule (frozen)


# -- the whole bench --------------------------------------------------------------------------
def _levels(sessions: int | None, ramp: bool, steps: Sequence[int], max_sessions: int) -> list[int]:
    if sessions is not None and not ramp:
        return [min(sessions, max_sessions)]
    return [n for n in steps if n <= max_sessions]


async def run_load_bench(
    *,
    url: str | None = None,
    sessions: int | None = None,
    ramp: bool = False,
    steps: Sequence[int] = (2, 4, 6, 8, 10, 12),
    batching: str = "both",
    duration_s: float = 30.0,
    target_p95: float = 1.5,
    rule: ListenerRule = DEFAULT_RULE,
    variants: Sequence[str] = (),
    max_sessions: int = 32,
    capacity: int | None = None,
    overload: float | None = None,
    clips_manifest: str | None = None,
    server_args: Sequence[str] = (),
    report_path: str | None = None,
    frame_ms: int = 20,
    mix_languages: bool = False,
    detect_language: bool = False,
    solo: bool = False,
) -> dict[str, Any]:
    """Run ``bench load`` (levels, configurations) and print the figures."""
    manifest = find_manifest(clips_manifest)
    clips = load_clips(manifest)
    speakers = ("every language in each playlist, source_lang auto" if mix_languages else
                "one language per session, source_lang "
                + ("auto" if detect_language else "given"))
    print(f"clips: {len(clips)} from {manifest} "
          f"({sum(len(c.audio) for c in clips) / RATE:.0f} s); session audio {duration_s:.0f} s; "
          f"{speakers}", flush=True)
    results: dict[str, Any] = {"levels": [], "held": {}, "target_p95": target_p95,
                               "rule": {"end_offset_p50": rule.end_offset_p50,
                                        "end_offset_p95": rule.end_offset_p95,
                                        "start_offset_p50": rule.start_offset_p50}}
    print(f"a level holds when every session completes, speech EndOffset p50 <= "
          f"{rule.end_offset_p50} s and p95 <= {rule.end_offset_p95} s, StartOffset p50 <= "
          f"{rule.start_offset_p50} s (commit p95 reported; {target_p95} s for reference)",
          flush=True)
    levels = _levels(sessions, ramp, steps, max_sessions)
    if solo:
        print("solo: the first playlist of each language, one session at a time on the same "
              "server, before the levels: the listener latency no session count can beat",
              flush=True)
    configs = [("batching", []), ("no-batching", ["--set", "batching.enabled=false"])]
    if url is not None:
        configs = [("server", [])]
    elif batching == "on":
        configs = configs[:1]
    elif batching == "off":
        configs = configs[1:]
    if variants and url is None:  # policies against the defaults, all with batching
        configs = [("defaults", [])] + [
            (variant, [arg for item in variant.split(",") if item.strip()
                       for arg in ("--set", item.strip())]) for variant in variants]
    if overload is not None:
        # without --capacity the servers calibrate their own, and each configuration gets
        # ceil(overload x the capacity it announced)
        cap_args = ["--capacity", str(capacity)] if capacity else []
        levels = [0]
    else:
        cap_args = ["--capacity", str(capacity if capacity else max_sessions + 1)]
    # every configuration's server stays up and the levels alternate between them, so a
    # change in the machine's background load hits both alike (idle servers cost ~nothing)
    servers: dict[str, ServerProcess] = {}
    held = {label: 0 for label, _ in configs}
    active = [label for label, _ in configs]
    first = True
    try:
        if url is None:  # starting takes a while (models, warm-up): off the event loop
            for label, extra in configs:
                servers[label] = await asyncio.to_thread(
                    ServerProcess([*extra, *cap_args, *server_args]).__enter__
                )
        overload_sessions: dict[str, tuple[int, int]] = {}
        if overload is not None:
            for label, _ in configs:
                server = servers.get(label)
                announced = (await asyncio.to_thread(scrape, url or server.url)).get(  # type: ignore[union-attr]
                    "speechpipe_capacity_sessions")
                cap = capacity or int(announced or 4)
                overload_sessions[label] = (cap, min(max_sessions,
                                                     max(cap + 1, math.ceil(cap * overload))))
            results["capacity"] = {label: cap for label, (cap, _) in overload_sessions.items()}
        if solo and overload is None:
            languages = 1 if mix_languages else len({clip.lang for clip in clips})
            most = max(levels) if levels else 1
            for label in active:
                server = servers.get(label)
                report = await run_level(url or server.url,  # type: ignore[union-attr]
                                         clips, min(languages, most),
                                         label=f"solo/{label}", duration_s=duration_s,
                                         server=server, frame_ms=frame_ms,
                                         mix_languages=mix_languages,
                                         detect_language=detect_language, one_at_a_time=True)
                row = report.row()
                row["holds"] = report.holds(rule)
                row["demand"] = solo_demand(row["server_cpu_cores"], most, usable_cores())
                results["solo"] = results.get("solo", []) + [row]
                print_row(row, header=first)
                first = False
        for step, level_n in enumerate(levels):
            # which configuration goes first alternates: no systematic head start
            for label in (list(active) if step % 2 == 0 else list(reversed(active))):
                server = servers.get(label)
                target_url = url or server.url  # type: ignore[union-attr]
                n = overload_sessions[label][1] if overload is not None else level_n
                report = await run_level(target_url, clips, n, label=label,
                                         duration_s=duration_s, server=server,
                                         frame_ms=frame_ms, mix_languages=mix_languages,
                                         detect_language=detect_language)
                row = report.row()
                row["holds"] = report.holds(rule)
                if overload is not None:
                    row["capacity"] = overload_sessions[label][0]
                    row["admitted_at_once_commit_p95"] = rounded_percentile(
                        report.target_commit_admitted_at_once, 95)
                    row["retry_after_s"] = report.retry_after
                    row["waited_s"] = [round(w, 1) for w in report.waited]
                results["levels"].append(row)
                print_row(row, header=first)
                first = False
                if overload is None:
                    if report.holds(rule):
                        held[label] = max(held[label], n)
                    elif ramp:
                        active.remove(label)  # its next levels would not hold either
            if not active:
                break
    finally:
        for server in servers.values():
            await asyncio.to_thread(server.__exit__)
    results["held"] = held
    if overload is None:
        for label, held in results["held"].items():
            print(f"sessions held at real time (listener rule): {label} {held}")
        on, off = results["held"].get("batching"), results["held"].get("no-batching")
        if on is not None and off is not None:
            ratio = on / off if off else math.inf
            results["ratio"] = ratio
            print(f"batching / no batching: {ratio:.2f}x")
    if report_path:
        await asyncio.to_thread(write_text_file, report_path, json.dumps(results, indent=2),
                                "the report")
    return results


def iter_steps(text: str) -> Iterator[int]:
    """Session counts from a comma-separated list."""
    for part in text.split(","):
        if part.strip():
            yield int(part)


def register_load(kinds: Any) -> None:
    """``speechpipe bench load`` (called by ``speechpipe.bench.register``)."""
    load = kinds.add_parser(
        "load", help="N concurrent WebSocket sessions at real time, batching on and off"
    )
    count = load.add_mutually_exclusive_group()
    count.add_argument("--sessions", type=int, default=None, help="run N sessions at once")
    count.add_argument("--ramp", action="store_true",
                       help="raise the session count (--steps) until a level does not hold")
    load.add_argument("--steps", default="2,4,6,8,10,12",
                      help="session counts for --ramp (default %(default)s)")
    load.add_argument("--url", default=None,
                      help="a running server's ws://.../ws (default: start one on 127.0.0.1); "
                           "start it with --set pipeline.phrase_cache_per_session=true, as the "
                           "bench starts its own, so no session is served another's cached speech")
    load.add_argument("--batching", choices=("both", "on", "off"), default="both",
                      help="server configurations to compare (default: both, same run)")
    load.add_argument("--duration", type=float, default=30.0,
                      help="seconds of audio per session (default %(default)s)")
    load.add_argument("--target-p95", type=float, default=1.5,
                      help="p95 commit latency shown for reference (default %(default)s)")
    load.add_argument("--end-p50", type=float, default=2.0,
                      help="a level holds with speech EndOffset p50 <= this (default 2.0 s)")
    load.add_argument("--end-p95", type=float, default=3.5,
                      help="... and speech EndOffset p95 <= this (default 3.5 s)")
    load.add_argument("--start-p50", type=float, default=2.5,
                      help="... and StartOffset p50 <= this (default 2.5 s)")
    load.add_argument("--solo", action="store_true",
                      help="first run each language's playlist alone, one session at a time: "
                           "the floor the levels are compared with")
    load.add_argument("--variant", action="append", default=[],
                      metavar="GROUP.FIELD=VALUE[,...]",
                      help="also start a server with these --set overrides and run it level "
                           "by level against the defaults (repeatable)")
    load.add_argument("--max-sessions", type=int, default=32, help="hard cap on clients")
    load.add_argument("--capacity", type=int, default=None,
                      help="the server's --capacity (default: above the session count; with "
                           "--overload, the capacity each server calibrates at start-up)")
    load.add_argument("--overload", type=float, default=None,
                      help="run ceil(F x capacity) sessions (e.g. 1.5): --capacity, or what "
                           "the server calibrated")
    load.add_argument("--clips", default=None,
                      help="manifest of clips (default: the project's samples/manifest.jsonl)")
    load.add_argument("--frame-ms", type=int, default=20, help="client frame size")
    speakers = load.add_mutually_exclusive_group()
    speakers.add_argument("--detect-language", action="store_true",
                          help="each session still plays one language but sends source_lang "
                               "auto (the server detects it)")
    speakers.add_argument("--mix-languages", action="store_true",
                          help="each session's playlist cycles through every language and "
                               "sends auto (the server keeps the first it detects; the old "
                               "playlists, a stress of detection)")
    load.add_argument("--starts", action="store_true",
                      help="compare how sessions start instead of levels: solo, --sessions "
                           "synchronized (all stream from the same instant) and --sessions "
                           "staggered, on playlists of real recordings, figures per recording "
                           "at the client's clock")
    load.add_argument("--recordings", type=int, default=6,
                      help="--starts: recordings per playlist (default %(default)s)")
    load.add_argument("--gap", type=float, default=0.8,
                      help="--starts: seconds of silence between recordings (default %(default)s)")
    load.add_argument("--languages", default="es,fr",
                      help="--starts: the playlists' languages, one per session in turn "
                           "(default %(default)s)")
    load.add_argument("--target-lang", default="en",
                      help="--starts: the sessions' target language (default %(default)s; "
                           "another needs an installed pair or a pivot, as a user's would)")
    load.add_argument("--stagger", type=float, default=0.25,
                      help="--starts: seconds between the staggered clients' connections "
                           "(default %(default)s)")
    load.add_argument("--server-arg", action="append", default=[],
                      help="extra argument for the started server (repeatable)")
    load.add_argument("--report", default=None, help="write the figures as JSON here")
    load.set_defaults(handler=_bench_load_main)


def _bench_load_main(args: Any) -> int:
    if args.sessions is None and not args.ramp:
        args.sessions = 8
    import shlex

    print("command: speechpipe " + shlex.join(sys.argv[1:]), flush=True)  # to re-run it
    print(f"machine: {describe_cpu()}; load average "
          + " ".join(f"{v:.2f}" for v in os.getloadavg()), flush=True)
    if args.starts:
        note(asyncio.run(run_start_cases(
            url=args.url, sessions=min(args.sessions, args.max_sessions),
            recordings=args.recordings, gap_s=args.gap, stagger_s=args.stagger,
            languages=[lang.strip() for lang in args.languages.split(",") if lang.strip()],
            clips_manifest=args.clips, capacity=args.capacity, server_args=args.server_arg,
            report_path=args.report, frame_ms=args.frame_ms, target_lang=args.target_lang)))
        return 0
    note(asyncio.run(run_load_bench(
        url=args.url, sessions=args.sessions, ramp=args.ramp, steps=list(iter_steps(args.steps)),
        batching=args.batching, duration_s=args.duration, target_p95=args.target_p95,
        rule=ListenerRule(args.end_p50, args.end_p95, args.start_p50), variants=args.variant,
        max_sessions=args.max_sessions, capacity=args.capacity, overload=args.overload,
        clips_manifest=args.clips, server_args=args.server_arg, report_path=args.report,
        frame_ms=args.frame_ms, mix_languages=args.mix_languages,
        detect_language=args.detect_language, solo=args.solo,
    )))  # --record: the figures --report writes (speechpipe.bench.record)
    return 0
