"""``bench load --starts``: solo, synchronized and staggered starts against one server, judged
per recording of the playlists at the client's clock."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from speechpipe.bench.clips import RATE, Clip, find_manifest, load_clips, playlist_recordings
from speechpipe.bench.load_client import (
    ClientRun,
    end_offset_split,
    recording_offsets,
    run_client,
)
from speechpipe.bench.server_process import ServerProcess, metrics_text, sums_by_label
from speechpipe.bench.stats import rounded_percentile
from speechpipe.transport.file_output import write_text_file

__all__ = ["StartCase", "run_start_case", "run_start_cases", "print_cases"]


# -- how sessions start: solo / synchronized / staggered -------------------------------------
@dataclass
class StartCase:
    """One start case's figures, per recording of the playlists, at the client's clock."""
    label: str
    sessions: int
    finished: int = 0
    errors: int = 0
    recordings: int = 0  # recordings played, over every session
    firsts: list[float] = field(default_factory=list)  # first translated audio - first voiced
    session_firsts: list[float] = field(default_factory=list)  # the same, each first recording
    ends: list[float] = field(default_factory=list)  # end of translated audio - last voiced
    # per server utterance, where its EndOffset goes: (queued, late, silence) seconds
    end_split: list[tuple[float, float, float]] = field(default_factory=list)
    audio_s: float = 0.0  # audio streamed, over every session
    server_cpu_s: float | None = None  # the server's CPU during the case (a server started here)
    together: bool = True  # synchronized: every client was admitted before the audio began
    # per urgency class (``workers.batching.urgency``): (requests, mean ASR queue wait s), from
    # the server's metrics before and after the case (a server started by the bench)
    asr_waits: dict[str, tuple[int, float]] = field(default_factory=dict)
    # per "urgency lane": requests and the mean time of the engine call that computed them
    asr_calls: dict[str, tuple[int, float]] = field(default_factory=dict)
    # why: error events by code, the client's own failure, and close codes other than 1000
    causes: dict[str, int] = field(default_factory=dict)

    def add(self, run: ClientRun, spans: Sequence[tuple[float, float]]) -> None:
        """Take one client's run (``spans``: its recordings' voiced spans)."""
        self.finished += run.close_code == 1000
        self.errors += sum(1 for _, e in run.events if e.get("type") == "error") + bool(
            run.error)
        for _, event in run.events:
            if event.get("type") == "error":
                self._count(f"error {event.get('code')}")
        if run.error:
            self._count(f"client {str(run.error).split(':')[0][:40]}")
        if run.close_code != 1000:
            self._count(f"close {run.close_code}")
        if run.queued:
            self._count("queued")
        if run.refused:
            self._count("refused")
        self.recordings += len(spans)
        self.end_split += end_offset_split(run)
        offsets = recording_offsets(run, spans)
        for k, pair in enumerate(offsets):
            if pair is None:
                continue
            self.firsts.append(pair[0])
            self.ends.append(pair[1])
            if k == 0:
                self.session_firsts.append(pair[0])

    def _count(self, cause: str) -> None:
        self.causes[cause] = self.causes.get(cause, 0) + 1

    def row(self) -> dict[str, Any]:
        """The case's figures as one table row."""
        p = rounded_percentile
        return {"case": self.label, "sessions": self.sessions, "finished": self.finished,
                "errors": self.errors, "recordings": self.recordings,
                "heard": len(self.firsts), "first_p50": p(self.firsts, 50),
                "session_first_p50": p(self.session_firsts, 50),
                "end_p50": p(self.ends, 50), "end_p95": p(self.ends, 95),
                "end_split_p50": {part: p([s[k] for s in self.end_split], 50)
                                  for k, part in enumerate(("queued", "late", "silence"))},
                "asr_queue_wait_mean": {k: {"requests": n, "mean_s": round(mean, 3)}
                                        for k, (n, mean) in self.asr_waits.items()},
                "asr_call_mean": {k: {"requests": n, "mean_s": round(mean, 3)}
                                  for k, (n, mean) in sorted(self.asr_calls.items())},
                "together": self.together, "causes": dict(sorted(self.causes.items())),
                "audio_s": round(self.audio_s, 1),
                "server_cpu_per_audio_s": (round(self.server_cpu_s / self.audio_s, 3)
                                           if self.server_cpu_s is not None and self.audio_s
                                           else None)}


async def run_start_case(
    url: str, clips: Sequence[Clip], sessions: int, *, label: str, mode: str,
    recordings: int = 6, gap_s: float = 0.8, stagger_s: float = 0.25, frame_ms: int = 20,
    begin_timeout_s: float = 60.0, target_lang: str = "en",
) -> StartCase:
    """``sessions`` clients each playing ``recordings`` recordings (``gap_s`` of silence
    between) at real time. ``mode``: ``solo`` (one after the other, each alone),
    ``synchronized`` (all connect, and once every one is admitted, or ``begin_timeout_s``
    passed, all start streaming at the same instant), ``staggered`` (client ``i`` connects
    ``i * stagger_s`` after the first)."""
    if mode not in ("solo", "synchronized", "staggered"):
        raise ValueError(f"unknown start mode {mode!r}")
    case = StartCase(label, sessions)
    begin = asyncio.Event() if mode == "synchronized" else None
    ready = 0

    def one_ready() -> None:
        nonlocal ready
        ready += 1
        if begin is not None and ready >= sessions:
            begin.set()

    async def client(i: int) -> tuple[ClientRun, list[tuple[float, float]]]:
        if mode == "staggered":
            await asyncio.sleep(i * stagger_s)
        audio, lang, spans = playlist_recordings(clips, i, count=recordings, gap_s=gap_s)
        told = False

        def on_message(message: str | bytes) -> None:
            # ready: started, or in the waiting line (beyond --capacity a session queues and
            # starts when a place frees; the admitted ones must not wait for it, or their
            # silence reads as audio fallen behind real time and closes them, too_slow)
            nonlocal told
            if not told and isinstance(message, str) and (
                    '"started"' in message or '"queued"' in message):
                told = True
                one_ready()

        run = await run_client(url, i, audio, lang, frame_ms=frame_ms, target_lang=target_lang,
                               timeout_s=len(audio) / RATE * 4 + 120 + begin_timeout_s,
                               begin=begin, on_message=on_message)
        if not told:  # refused or failed: the others do not wait for it
            told = True
            one_ready()
        case.audio_s += len(audio) / RATE
        return run, spans

    async def release() -> None:  # a session that never gets in does not hold the rest
        assert begin is not None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(begin_timeout_s):
                await begin.wait()
        if not begin.is_set():
            case.together = False
            begin.set()

    released = asyncio.create_task(release()) if begin is not None else None
    try:
        if mode == "solo":
            results = [await client(i) for i in range(sessions)]
        else:
            results = await asyncio.gather(*(client(i) for i in range(sessions)))
    finally:
        if released is not None:
            released.cancel()
    for run, spans in results:
        case.add(run, spans)
    return case


WaitSums = tuple[dict[str, float], dict[str, float]]  # per urgency: (count, sum)


def _asr_sums(url: str) -> tuple[WaitSums, WaitSums]:
    """From one scrape, now: the ASR queue wait histogram's counts and sums per urgency, and
    the call-time histogram's per urgency and lane ("commit urgent", "commit usual", ...);
    empty when unreadable."""
    try:
        text = metrics_text(url)
    except OSError:
        return ({}, {}), ({}, {})

    def sums(name: str, labels: str | tuple[str, ...]) -> WaitSums:
        return (sums_by_label(text, f"{name}_count", labels),
                sums_by_label(text, f"{name}_sum", labels))
    return (sums("speechpipe_asr_queue_wait_seconds", "urgency"),
            sums("speechpipe_asr_call_seconds", ("urgency", "lane")))


def queue_wait_means(before: WaitSums, after: WaitSums) -> dict[str, tuple[int, float]]:
    """Per urgency class (or "urgency lane", ``_asr_sums``), the requests computed between
    two scrapes and their mean queue wait (or call time) (pure); keys with none are left out."""
    out: dict[str, tuple[int, float]] = {}
    for urgency, count in after[0].items():
        n = count - before[0].get(urgency, 0.0)
        if n > 0:
            waited = after[1].get(urgency, 0.0) - before[1].get(urgency, 0.0)
            out[urgency] = (int(round(n)), waited / n)
    return out


def call_label(key: str) -> str:
    """``"commit urgent"`` -> ``"commit on the lane"``; ``"first_words usual"`` -> ``"first
    words on a worker"`` (the bench's words for ``_asr_sums``' keys)."""
    urgency, _, lane = key.partition(" ")
    where = {"urgent": "on the lane", "usual": "on a worker"}.get(lane, lane)
    return f"{urgency.replace('_', ' ')} {where}"


def print_cases(rows: Sequence[dict[str, Any]]) -> None:
    print("per recording, at the client's clock: first translated audio after its first voiced "
          "frame (all recordings; each session's first), end of translated audio after its "
          "last voiced frame", flush=True)
    print(f"{'case':<22} {'N':>3} {'done':>5} {'heard':>9} {'first p50':>10} "
          f"{'1st rec p50':>12} {'end p50':>8} {'end p95':>8}", flush=True)
    for row in rows:
        print(f"{row['case']:<22} {row['sessions']:>3} {row['finished']:>5} "
              f"{row['heard']:>4}/{row['recordings']:<4} {row['first_p50']:>10} "
              f"{row['session_first_p50']:>12} {row['end_p50']:>8} {row['end_p95']:>8}"
              + ("" if row["together"] else "  (not all admitted in time: started apart)"),
              flush=True)
    for row in rows:
        split = row.get("end_split_p50")
        if split:
            print(f"  {row['case']}: EndOffset parts per utterance (p50 each): queued "
                  f"{split['queued']} s, late speech {split['late']} s, silence "
                  f"{split['silence']} s", flush=True)
    for row in rows:
        waits = row.get("asr_queue_wait_mean")
        if waits:
            print(f"  {row['case']}: ASR queue wait, mean (requests): " + ", ".join(
                f"{k.replace('_', ' ')} {w['mean_s']} s ({w['requests']})"
                for k, w in waits.items()), flush=True)
        calls = row.get("asr_call_mean")
        if calls:
            print(f"  {row['case']}: ASR call time, mean (requests): " + ", ".join(
                f"{call_label(k)} {w['mean_s']} s ({w['requests']})"
                for k, w in calls.items()), flush=True)
    cpu = [f"{row['case']} {row['server_cpu_per_audio_s']}" for row in rows
           if row.get("server_cpu_per_audio_s") is not None]
    if cpu:
        print("server CPU-s per audio second streamed: " + ", ".join(cpu), flush=True)
    for row in rows:
        if row.get("causes"):
            print(f"  {row['case']}: " + ", ".join(f"{cause} x{n}"
                                                   for cause, n in row["causes"].items()),
                  flush=True)


async def run_start_cases(
    *, url: str | None = None, sessions: int = 8, recordings: int = 6, gap_s: float = 0.8,
    stagger_s: float = 0.25, languages: Sequence[str] = ("es", "fr"),
    clips_manifest: str | None = None, capacity: int | None = None,
    server_args: Sequence[str] = (), report_path: str | None = None, frame_ms: int = 20,
    target_lang: str = "en",
) -> dict[str, Any]:
    """Solo, ``sessions`` synchronized and ``sessions`` staggered starts in one run against
    one server (started here on 127.0.0.1 without ``url``), and the table. Each session
    plays ``recordings`` recordings of one language (``languages`` in turn), the same
    recordings in every case (at most ``recordings`` per language are loaded, rotated per
    session), so *solo* (one session per language, each alone) is the floor of the other
    two."""
    manifest = find_manifest(clips_manifest)
    clips = load_clips(manifest, limit=10_000, languages=languages, per_language=recordings)
    langs = list(dict.fromkeys(clip.lang for clip in clips))
    print(f"clips: {len(clips)} from {manifest} ({', '.join(langs)} -> {target_lang}); "
          f"{recordings} recordings per session, {gap_s} s of silence between", flush=True)
    server: ServerProcess | None = None
    rows: list[dict[str, Any]] = []
    try:
        if url is None:
            server = await asyncio.to_thread(ServerProcess(
                ["--capacity", str(capacity or sessions), *server_args]).__enter__)
        target = url or server.url  # type: ignore[union-attr]
        for label, mode, n in (("solo", "solo", len(langs)),
                               (f"{sessions} synchronized", "synchronized", sessions),
                               (f"{sessions} staggered {stagger_s} s", "staggered", sessions)):
            cpu0 = server.cpu_seconds() if server is not None else None
            sums0 = await asyncio.to_thread(_asr_sums, target) if server is not None \
                else None
            case = await run_start_case(target, clips, n, label=label, mode=mode,
                                        recordings=recordings, gap_s=gap_s,
                                        stagger_s=stagger_s, frame_ms=frame_ms,
                                        target_lang=target_lang)
            if server is not None and cpu0 is not None:
                case.server_cpu_s = server.cpu_seconds() - cpu0
            if sums0 is not None:
                waits1, calls1 = await asyncio.to_thread(_asr_sums, target)
                case.asr_waits = queue_wait_means(sums0[0], waits1)
                case.asr_calls = queue_wait_means(sums0[1], calls1)
            rows.append(case.row())
    finally:
        if server is not None:
            await asyncio.to_thread(server.__exit__)
    print_cases(rows)
    results: dict[str, Any] = {"cases": rows, "recordings": recordings, "gap_s": gap_s,
                               "languages": langs, "target_lang": target_lang}
    if report_path:
        await asyncio.to_thread(write_text_file, report_path, json.dumps(results, indent=2),
                                "the report")
    return results
