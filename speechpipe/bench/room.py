"""``speechpipe bench room --listeners N``: one speaker heard by N WebSocket listeners.

Starts ``speechpipe serve`` itself (a subprocess on 127.0.0.1, real models) and, in the same
run, plays one real clip at real time three times:

0. an unmeasured warm-up talk (one ordinary session): what the server loads on its first
   session does not count against the lone phase;
1. **lone**: one ordinary session (no room) — the server CPU a speaker costs by itself;
2. **room**: the same clip from a room ``speaker`` with N ``listener`` connections (all in the
   speaker's language, ``en``), which join before the speech starts.

It prints the server's CPU seconds in each phase, the fan-out cost the server measured
(``speechpipe_room_fanout_cpu_seconds_total``: CPU spent writing room messages to listeners'
sockets), whether room CPU <= 1.15 x lone + fan-out, whether every listener received the same
committed captions and the same speech bytes (SHA-256 per listener), and the delay between the
first and the last listener receiving each speech chunk (and each message), p50/p95: as the
listeners' processes read it and, with ``--client-procs`` above 1, as the kernel received it at
their sockets (``room_listeners``: what listeners on their own machines would see). Then what
N listeners cost per 100 of them ((room - lone) / N x 100): server CPU seconds, and server RSS
(sampled before the listeners join, with all of them in, and at its peak in each phase); and
the speaker's EndOffset in each phase (its own client's clock: end of its translated speech
laid back to back, ``ClientRun.offsets``, after the end of its last utterance) against the
bar of at most +0.2 s in the room. Each phase uses its own phrase-cache namespace, so the
room's speaker synthesizes everything anew. Bounded: at most ``MAX_LISTENERS`` listeners, a
hard time limit per phase.

Lifted for the run (all connections come from 127.0.0.1): ``--max-sessions-per-ip 0``,
``--max-listeners 0``, ``--max-listeners-per-room 0``, ``rooms.join_per_ip_s=0`` and
``rooms.join_per_room_s=0`` (``--server-arg`` adds to or overrides them); the open-files soft
limit is raised to the hard limit, which the started server and the client processes inherit
(a one-line error when the hard limit is below what N listeners need).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from speechpipe.bench.own_samples import own_samples
from speechpipe.bench.record import note
from speechpipe.bench.room_listeners import run_listeners
from speechpipe.bench.room_spread import arrival_times, spread, spread_lines
from speechpipe.bench.server_process import (
    PeakRss,
    ServerProcess,
    bucket_quantile,
    bucket_share,
    histogram_buckets,
    metric,
    metrics_text,
)
from speechpipe.bench.stats import percentile_ms
from speechpipe.errors import InputError
from speechpipe.transport.client import ClientRun, ListenerRun, listen_room, stream_session

__all__ = ["register_room", "run_room_bench", "spread", "listener_digest", "per_hundred",
           "speaker_end_offsets", "open_files_soft_limit", "LIFTED_LIMITS"]

DEFAULT_CLIP = own_samples() / "wav" / "es_gato.wav"
MAX_LISTENERS = 1000
LEAD_S = 1.0  # silence before the clip (listeners are all in before it)
TAIL_S = 3.0
PHASE_LIMIT_S = 600.0
CPU_MARGIN = 0.15
FANOUT_DELAY = "speechpipe_room_fanout_delay_seconds"
END_OFFSET_BAR_S = 0.2  # the room may raise the speaker's EndOffset by at most this
FILES_SLACK = 256  # open files beyond one per listener: models, logs, the speaker, /metrics
# what the bench lifts for its run (every listener comes from 127.0.0.1, all at once)
LIFTED_LIMITS = ("--max-sessions-per-ip", "0", "--max-listeners", "0",
                 "--max-listeners-per-room", "0",
                 "--set", "rooms.join_per_ip_s=0", "--set", "rooms.join_per_room_s=0")


def per_hundred(room: float, lone: float, listeners: int) -> float:
    """What 100 listeners add to a lone speaker's figure: (room - lone) / N x 100."""
    return (room - lone) / listeners * 100 if listeners > 0 else math.nan


def speaker_end_offsets(run: ClientRun) -> tuple[float, float, float]:
    """The speaker's (EndOffset, last speech chunk, last committed translation), seconds after
    the end of its last utterance (the server's VAD ``end``; on the client's stream clock, so
    when its last voiced sample was sent): the EndOffset of ``ClientRun.offsets`` (speech
    laid back to back), the arrival of the last speech chunk and of the last final
    ``target`` event. NaN where the run has no speech or no such event."""
    span = run.speech_span()
    if span is None:
        return math.nan, math.nan, math.nan
    end_offset = run.offsets()[1]
    last_chunk = max((t for t, _, _ in run.audio), default=math.nan)
    last_final = max((t for t, e in run.events if e.get("type") == "target" and e.get("final")),
                     default=math.nan)
    return (math.nan if end_offset is None else end_offset, last_chunk - span[1],
            last_final - span[1])


def open_files_soft_limit(need: int, soft: int, hard: int) -> int:
    """The open-files soft limit to set for ``need`` descriptors: the hard limit (or ``need``
    when it is unlimited) when ``soft`` is lower, else ``soft``; ``RuntimeError`` (one line)
    when the hard limit is below ``need``."""
    if soft == resource.RLIM_INFINITY or soft >= need:
        return soft
    if hard == resource.RLIM_INFINITY:
        return need
    if hard < need:
        raise RuntimeError(f"about {need} open files are needed but their hard limit is {hard} "
                           f"(raise it: ulimit -Hn {need}, or nofile in limits.conf)")
    return hard


def _raise_open_files(need: int) -> None:
    """Raise this process's open-files soft limit for ``need`` descriptors (the server and
    client processes started afterwards inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = open_files_soft_limit(need, soft, hard)
    if target != soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def listener_digest(run: ListenerRun) -> tuple[str, str]:
    """(SHA-256 of its committed captions, SHA-256 of its speech bytes, in order)."""
    captions = hashlib.sha256()
    for e in run.events:
        event = e[1]
        if event.get("type") in ("source", "target") and event.get("final"):
            captions.update(json.dumps([event["type"], event.get("speaker"), event["utterance"],
                                        event["committed"]]).encode())
    speech = hashlib.sha256()
    for _, _, pcm in run.audio:
        speech.update(pcm)
    return captions.hexdigest(), speech.hexdigest()


async def _speak(url: str, audio: np.ndarray, start: dict[str, Any],
                 ready: asyncio.Event | None = None,
                 room: asyncio.Future[str] | None = None) -> ClientRun:
    """One speaker at real time, ``LEAD_S`` of silence first and ``TAIL_S`` after (``ready``:
    wait for it before the audio starts; ``room``: gets the room id from ``started``). Every
    event and speech chunk is kept with its arrival on the speaker's stream clock."""
    def on_message(message: str | bytes) -> None:
        if room is not None and not room.done() and isinstance(message, str):
            first = json.loads(message)
            if first.get("type") == "started":
                room.set_result(first.get("room", ""))

    lead = np.zeros(int(LEAD_S * 16000), np.int16)
    run = await stream_session(url, np.concatenate([lead, audio]), start=start, tail_s=TAIL_S,
                               begin=ready, on_message=on_message, open_timeout_s=60)
    if not run.started:
        error = RuntimeError(f"the speaker was refused: {run.error or run.close_code}")
        if room is not None and not room.done():
            room.set_exception(error)
        raise error
    return run


@dataclass
class RoomPhase:
    """What the room phase saw."""

    spoke: ClientRun  # the speaker's
    runs: list[ListenerRun]  # the listeners that joined before the speech
    late: ListenerRun | None = None  # joined mid-talk
    late_joined: float = math.nan  # monotonic time its ``started`` arrived
    stalled: list[ListenerRun] = field(default_factory=list)  # stopped reading


def _slim(run: ListenerRun) -> ListenerRun:
    """A run with each speech chunk replaced by its SHA-256 (small enough to pass between
    processes; identical chunks stay identical)."""
    run.audio = [(t, header, hashlib.sha256(pcm).digest()) for t, header, pcm in run.audio]
    return run


def _listener_worker(url: str, room: str, count: int, joined: Any, stop: Any,
                     out: Any, nice: int = 0) -> None:
    """A client process holding ``count`` listeners on raw sockets (``room_listeners``: read
    times on the machine's monotonic clock, which every process shares, and the kernel's
    receive times): reports each join on ``joined`` (or a refusal), listens until ``stop`` is
    set (at most ``PHASE_LIMIT_S``), then sends its slimmed runs on ``out``."""
    if nice:
        os.nice(nice)  # below the server: listeners elsewhere would not take its cores

    def report(run: ListenerRun) -> None:
        joined.put("ok" if run.started else f"refused: {run.error} (close {run.close_code})")

    runs = run_listeners(url, room, count, stop=stop.is_set, on_joined=report,
                         limit_s=PHASE_LIMIT_S, open_timeout_s=120)
    out.put([_slim(run) for run in runs])


async def _room_phase(url: str, audio: np.ndarray, listeners: int, source_lang: str,
                      stalled: int, client_procs: int = 1,
                      on_joined: Callable[[], None] = lambda: None,
                      client_nice: int = 0) -> RoomPhase:
    """The room phase (``on_joined``: called once every listener is in, before the talk)."""
    if client_procs > 1:
        return await _room_phase_procs(url, audio, listeners, source_lang, stalled,
                                       client_procs, on_joined, client_nice)
    loop = asyncio.get_running_loop()
    room: asyncio.Future[str] = loop.create_future()
    ready, stop = asyncio.Event(), asyncio.Event()
    speaker = asyncio.create_task(_speak(
        url, audio, {"role": "speaker", "source_lang": source_lang}, ready, room))
    room_id = await room
    joined = 0
    all_in = asyncio.Event()

    def one_in(_: dict[str, Any]) -> None:
        nonlocal joined
        joined += 1
        if joined == listeners:
            all_in.set()

    tasks = [asyncio.create_task(listen_room(url, room_id, stop=stop, on_started=one_in,
                                             open_timeout_s=120))
             for _ in range(listeners)]
    stalls = [asyncio.create_task(listen_room(url, room_id, stop=stop, stall=True,
                                              open_timeout_s=120)) for _ in range(stalled)]
    waiting = asyncio.ensure_future(all_in.wait())
    done, _ = await asyncio.wait([waiting, *tasks], return_when=asyncio.FIRST_COMPLETED)
    if waiting not in done:  # a listener ended before all were in: refused
        failed = next(t for t in tasks if t.done())
        raise RuntimeError(f"a listener was refused: {failed.result().error}")
    on_joined()
    spoke, late, late_joined = await _talk_with_late_joiner(url, room_id, audio, ready, stop,
                                                            speaker)
    runs = [await t for t in tasks]
    return RoomPhase(spoke, runs, await late, late_joined[0], [await t for t in stalls])


async def _talk_with_late_joiner(
    url: str, room_id: str, audio: np.ndarray, ready: asyncio.Event, stop: asyncio.Event,
    speaker: asyncio.Task[ClientRun],
) -> tuple[ClientRun, asyncio.Task[ListenerRun], list[float]]:
    """Everyone is in: let the speaker talk, send a late joiner in mid-talk, wait for the end
    of the talk and its last fan-out, then stop the listeners. Returns what the speaker's task
    gave, the late joiner's task and its admission time (``_late_joiner``)."""
    ready.set()
    await asyncio.sleep(LEAD_S + len(audio) / 16000 / 2)  # mid-talk
    late, late_joined = _late_joiner(url, room_id, stop)
    spoke = await speaker
    await asyncio.sleep(1.0)  # the last fan-out reaches the sockets
    stop.set()
    return spoke, late, late_joined


def _late_joiner(url: str, room_id: str,
                 stop: asyncio.Event) -> tuple[asyncio.Task[ListenerRun], list[float]]:
    """A listener that joins now (mid-talk), and a one-item list that gets the monotonic time
    it was admitted (NaN until then)."""
    joined = [math.nan]

    def late_in(_: dict[str, Any]) -> None:
        joined[0] = time.monotonic()

    return asyncio.create_task(listen_room(url, room_id, stop=stop, on_started=late_in)), joined


async def _room_phase_procs(url: str, audio: np.ndarray, listeners: int, source_lang: str,
                            stalled: int, procs: int,
                            on_joined: Callable[[], None] = lambda: None,
                            nice: int = 0) -> RoomPhase:
    """``_room_phase`` with the listeners spread over ``procs`` client processes, so the
    first-to-last spread is not the bench's own event loop working through N sockets."""
    import multiprocessing
    import queue

    loop = asyncio.get_running_loop()
    room: asyncio.Future[str] = loop.create_future()
    ready, stop = asyncio.Event(), asyncio.Event()
    speaker = asyncio.create_task(_speak(
        url, audio, {"role": "speaker", "source_lang": source_lang}, ready, room))
    room_id = await room
    ctx = multiprocessing.get_context("spawn")
    joined, out, stop_all = ctx.Queue(), ctx.Queue(), ctx.Event()
    shares = [listeners // procs + (1 if i < listeners % procs else 0) for i in range(procs)]
    workers = [ctx.Process(target=_listener_worker, args=(url, room_id, n, joined, stop_all,
                                                          out, nice), daemon=True)
               for n in shares if n]
    for worker in workers:
        worker.start()
    try:
        stalls = [asyncio.create_task(listen_room(url, room_id, stop=stop, stall=True,
                                                  open_timeout_s=120)) for _ in range(stalled)]
        for _ in range(listeners):
            answer = await loop.run_in_executor(None, joined.get, True, 180)
            if answer != "ok":
                raise RuntimeError(f"a listener was {answer}")
        on_joined()
        spoke, late, late_joined = await _talk_with_late_joiner(url, room_id, audio, ready,
                                                                stop, speaker)
        stop_all.set()
        runs: list[ListenerRun] = []
        for _ in workers:
            runs += await loop.run_in_executor(None, out.get, True, 180)
        phase = RoomPhase(spoke, runs, _slim(await late), late_joined[0],
                          [await t for t in stalls])
    except queue.Empty:
        raise RuntimeError("the listener processes did not answer in time") from None
    finally:
        stop_all.set()
        for worker in workers:
            worker.join(10)
            if worker.is_alive():
                worker.terminate()
    return phase


def run_room_bench(listeners: int, clip: Path, source_lang: str,
                   server_args: list[str], stalled: int = 0, repeat: int = 1,
                   client_procs: int = 1, port: int = 0, client_nice: int = 0) -> int:
    """Run both phases and print the figures; 0 when every check held, 1 otherwise."""
    from speechpipe.transport.file_replay import read_audio

    one = read_audio(clip)
    audio = np.concatenate([np.concatenate([one, np.zeros(16000, np.int16)])] * repeat)
    _raise_open_files(listeners + stalled + FILES_SLACK)
    extra = [*LIFTED_LIMITS, "--capacity", "4", *server_args]
    with ServerProcess(extra, port=port) as server:
        url = server.url
        # an unmeasured talk first: what the server loads or fills on its first session
        # (voices, caches, allocator arenas) would otherwise count against the lone phase
        warm = {"source_lang": source_lang}
        asyncio.run(asyncio.wait_for(_speak(url, audio, warm), PHASE_LIMIT_S))
        lone_start = {"source_lang": source_lang}
        rss_lone = server.rss_mb()
        cpu0 = server.cpu_seconds()
        t0 = time.monotonic()
        with PeakRss(server) as lone_peak:
            alone = asyncio.run(asyncio.wait_for(_speak(url, audio, lone_start), PHASE_LIMIT_S))
        lone_cpu, lone_wall = server.cpu_seconds() - cpu0, time.monotonic() - t0

        fan0 = metric(url, "speechpipe_room_fanout_cpu_seconds_total")
        delay0 = histogram_buckets(metrics_text(url), FANOUT_DELAY)
        rss_before = server.rss_mb()
        at_joined: dict[str, float] = {}

        def joined() -> None:
            at_joined.update(rss=server.rss_mb(), cpu=server.cpu_seconds() - cpu0)

        cpu0 = server.cpu_seconds()
        t0 = time.monotonic()
        with PeakRss(server) as room_peak:
            phase = asyncio.run(asyncio.wait_for(
                _room_phase(url, audio, listeners, source_lang, stalled, client_procs,
                            joined, client_nice),
                PHASE_LIMIT_S))
        spoke, runs = phase.spoke, phase.runs
        room_cpu, room_wall = server.cpu_seconds() - cpu0, time.monotonic() - t0
        fanout = metric(url, "speechpipe_room_fanout_cpu_seconds_total") - fan0
        delay1 = histogram_buckets(metrics_text(url), FANOUT_DELAY)
        drops = metric(url, "speechpipe_room_fanout_drops_total")

    digests = {listener_digest(r) for r in runs}
    closed_ok = sum(1 for r in runs if r.close_code == 1000)
    identical = len(digests) == 1 and bool(runs) and bool(runs[0].audio)
    within = room_cpu <= (1 + CPU_MARGIN) * lone_cpu + fanout
    plays = f"{repeat} plays, " if repeat > 1 else ""
    print(f"speechpipe bench room: {listeners} listeners, clip {clip.name} "
          f"({len(one) / 16000:.1f} s; {plays}{len(audio) / 16000:.1f} s streamed with 1 s of "
          "silence after each play), real time, after an unmeasured warm-up talk")
    print(f"  lone session:  server CPU {lone_cpu:.2f} s over {lone_wall:.1f} s")
    print(f"  room:          server CPU {room_cpu:.2f} s over {room_wall:.1f} s "
          f"(speaker close {spoke.close_code}; {closed_ok}/{listeners} listeners closed "
          f"normally; fan-out drops {drops:g})")
    print(f"  fan-out cost:  {fanout:.3f} s CPU measured by the server "
          f"({fanout / max(listeners, 1) * 1000:.2f} ms per listener)")
    print(f"  CPU check:     room {room_cpu:.2f} s <= 1.15 x lone {lone_cpu:.2f} s + fan-out "
          f"{fanout:.2f} s = {(1 + CPU_MARGIN) * lone_cpu + fanout:.2f} s: "
          f"{'yes' if within else 'NO'}")
    print(f"  identical:     every listener got the same committed captions and speech bytes: "
          f"{'yes' if identical else 'NO'} ({len(digests)} distinct, "
          f"{len(runs[0].audio) if runs else 0} chunks each)")
    for line in spread_lines(runs):
        print(line)
    written = [bucket_quantile(delay0, delay1, q) for q in (0.5, 0.95)]
    print("  server side:   publication -> last byte written to a listener's socket, by the "
          "server's histogram (bucket upper bounds): p50 "
          + " ms, p95 ".join("-" if w is None else f"<= {w * 1000:g}" for w in written)
          + " ms (the read spread adds the listeners' client processes reading on the same "
          "cores)")
    share = bucket_share(delay0, delay1, 0.05)
    if share is not None:
        print(f"                 written within 50 ms of publication: {share:.1%} of "
              "(listener, message) deliveries")
    streamed = LEAD_S + len(audio) / 16000 + TAIL_S
    hundred = per_hundred(room_cpu, lone_cpu, listeners)
    print(f"  per 100:       server CPU {hundred:+.2f} s (room - lone; "
          f"{hundred / streamed:.3f} of a core over the {streamed:.1f} s streamed; joining "
          f"took {at_joined.get('cpu', math.nan):.2f} s of the room's), fan-out "
          f"{fanout / max(listeners, 1) * 100:.3f} s")
    joined_rss = at_joined.get("rss", math.nan)
    print(f"  server RSS:    lone {rss_lone:.0f} MB, peak {lone_peak.peak_mb:.0f} MB; room "
          f"{rss_before:.0f} MB before the listeners, {joined_rss:.0f} MB with all {listeners} "
          f"in, peak {room_peak.peak_mb:.0f} MB; per 100 listeners "
          f"{per_hundred(joined_rss, rss_before, listeners):+.1f} MB joined, peak "
          f"{per_hundred(room_peak.peak_mb, lone_peak.peak_mb, listeners):+.1f} MB")
    lone_end, lone_chunk, lone_text = speaker_end_offsets(alone)
    room_end, room_chunk, room_text = speaker_end_offsets(spoke)
    rise = room_end - lone_end
    held = rise <= END_OFFSET_BAR_S  # False when either is NaN
    print(f"  speaker:       EndOffset lone {lone_end:.2f} s, room {room_end:.2f} s "
          f"({rise:+.2f} s <= +{END_OFFSET_BAR_S:.2f} s: {'yes' if held else 'NO'}); after "
          f"its last voiced sample, lone / room: last speech chunk {lone_chunk:.2f} / "
          f"{room_chunk:.2f} s, last committed translation {lone_text:.2f} / {room_text:.2f} s")
    late = phase.late
    if late is not None and late.started:
        first = late.events[0][0] - phase.late_joined if late.events else math.nan
        speech = late.audio[0][0] - phase.late_joined if late.audio else math.nan
        late_pcm = [c for _, _, c in late.audio]
        ours = [c for _, _, c in runs[0].audio] if runs else []
        aligned = bool(late_pcm) and late_pcm == ours[len(ours) - len(late_pcm):]
        print(f"  late joiner:   first message (history) {first * 1000:.0f} ms after it joined, "
              f"first speech {speech * 1000:.0f} ms after; its speech is the others' from a "
              f"chunk boundary on: {'yes' if aligned else 'NO'}")
    if phase.stalled:
        closed = sum(1 for r in phase.stalled if r.close_code == 4012)
        print(f"  not reading:   {len(phase.stalled)} listeners stopped reading; {closed} closed "
              f"with 4012 listener_too_slow (the others' spread above includes them)")
    ok = (identical and within and held and closed_ok == listeners
          and spoke.close_code == alone.close_code == 1000)
    read, at_sockets = spread(runs), spread(runs, arrival_times)
    note({  # --record (speechpipe.bench.record): the figures printed above
        "listeners": listeners, "clip": clip.name, "plays": repeat,
        "lone_cpu_s": lone_cpu, "room_cpu_s": room_cpu, "fanout_cpu_s": fanout,
        "cpu_check": within, "identical": identical, "closed_normally": closed_ok,
        "spread_read_p95_ms": {"chunk": percentile_ms(read[0], 95),
                               "message": percentile_ms(read[1], 95)},
        "spread_sockets_p95_ms": {"chunk": percentile_ms(at_sockets[0], 95),
                                  "message": percentile_ms(at_sockets[1], 95)},
        "written_within_50ms": share, "per_100_cpu_s": hundred,
        "per_100_rss_mb": per_hundred(joined_rss, rss_before, listeners),
        "speaker_end_offset_s": {"lone": lone_end, "room": room_end}, "ok": ok})
    return 0 if ok else 1


def register_room(kinds: Any) -> None:
    """``speechpipe bench room`` (called by ``speechpipe.bench.register``)."""
    room = kinds.add_parser(
        "room", help="one speaker, N WebSocket listeners: CPU, fan-out, identical output, "
                     "first-to-last delay, RSS and CPU per 100 listeners, the speaker's EndOffset",
        description="One speaker heard by N WebSocket listeners on a server the bench starts. "
                    "Lifted for the run (every listener connects from 127.0.0.1): "
                    "--max-sessions-per-ip 0, --max-listeners 0, --max-listeners-per-room 0, "
                    "rooms.join_per_ip_s=0, rooms.join_per_room_s=0 (--server-arg overrides); "
                    "the open-files soft limit is raised to the hard limit (an error when that "
                    "is below N + 256). --join-storm keeps the join limits.")
    room.add_argument("--listeners", type=int, default=20, help="listeners (default 20)")
    room.add_argument("--clip", default=str(DEFAULT_CLIP),
                      help="the recording the speaker plays (default: samples/wav/es_gato.wav)")
    room.add_argument("--source-lang", default="es", help="its language (default es)")
    room.add_argument("--stalled", type=int, default=0,
                      help="also this many listeners that stop reading (default 0)")
    room.add_argument("--repeat", type=int, default=1,
                      help="the speaker plays the clip this many times (default 1)")
    room.add_argument("--client-procs", type=int, default=4,
                      help="client processes the listeners are spread over (default 4; 1: "
                           "all in the bench's own event loop)")
    room.add_argument("--client-nice", type=int, default=0, metavar="N",
                      help="niceness of the listeners' client processes (0-19, default 0): "
                           "19 lets the server have the cores first, as listeners on other "
                           "machines would; the spread at the listeners then includes their "
                           "wait for a core")
    room.add_argument("--port", type=int, default=0,
                      help="port of the server the bench starts on 127.0.0.1 (default 0: any "
                           "free one; the bench always starts its own)")
    room.add_argument("--join-storm", type=float, default=0.0, metavar="RATE",
                      help="instead: a talk alone, then the same talk while listeners join "
                           "at RATE per second (/healthz latency, the speaker's caption lag)")
    room.add_argument("--storm-listeners", type=int, default=1000,
                      help="with --join-storm: at most this many joins (default 1000)")
    room.add_argument("--storm-addresses", type=int, default=40,
                      help="with --join-storm: loopback source addresses the joins come from "
                           "(127.0.0.2...; default 40)")
    room.add_argument("--server-arg", action="append", default=[],
                      help="extra argument for the started server (repeatable)")
    room.set_defaults(handler=_bench_room)


def _bench_storm(args: argparse.Namespace, clip: Path) -> int:
    from speechpipe.bench.room_storm import MAX_RATE, MAX_STORM, run_storm_bench
    from speechpipe.transport.file_replay import read_audio

    if not (0 < args.join_storm <= MAX_RATE and 1 <= args.storm_listeners <= MAX_STORM
            and 1 <= args.storm_addresses <= 250):
        raise InputError(f"--join-storm must be above 0 and at most {MAX_RATE:g} joins/s, "
                         f"--storm-listeners 1-{MAX_STORM}, --storm-addresses 1-250")
    try:
        _raise_open_files(args.storm_listeners + FILES_SLACK)
        return run_storm_bench(args.join_storm, args.storm_listeners, args.storm_addresses,
                               read_audio(clip), clip.name, args.source_lang, args.server_arg,
                               port=args.port)
    except RuntimeError as exc:
        print(f"speechpipe bench room: {exc}", file=sys.stderr)
        return 1


def _bench_room(args: argparse.Namespace) -> int:
    if not (0 <= args.stalled <= MAX_LISTENERS and 1 <= args.repeat <= 100
            and 1 <= args.client_procs <= 64 and 0 <= args.client_nice <= 19):
        raise InputError("--stalled must be 0-1000, --repeat 1-100, --client-procs 1-64 and "
                         "--client-nice 0-19")
    if not 0 <= args.port <= 65_535:
        raise InputError(f"--port must be 0-65535 (got {args.port})")
    if not 1 <= args.listeners <= MAX_LISTENERS:
        raise InputError(f"--listeners must be 1-{MAX_LISTENERS} (got {args.listeners})")
    clip = Path(args.clip)
    if not clip.is_file():
        raise InputError(f"no such clip: {clip}")
    if args.join_storm:
        return _bench_storm(args, clip)
    try:
        return run_room_bench(args.listeners, clip, args.source_lang, args.server_arg,
                              stalled=args.stalled, repeat=args.repeat,
                              client_procs=args.client_procs, port=args.port,
                              client_nice=args.client_nice)
    except RuntimeError as exc:
        print(f"speechpipe bench room: {exc}", file=sys.stderr)
        return 1
