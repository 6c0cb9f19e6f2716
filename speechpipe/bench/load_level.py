"""``bench load``'s levels: N clients at once against one server (``run_level``), the level's
figures (``LevelReport``), when it holds (``ListenerRule``) and its table row."""

from __future__ import annotations

import asyncio
import math
import os
import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speechpipe.bench.clips import Clip, playlist, speaker_language
from speechpipe.bench.load_client import (
    ClientRun,
    commit_latencies,
    committed_by_end,
    end_offset_split,
    run_client,
    utterance_offsets,
)
from speechpipe.bench.server_process import ServerProcess, scrape
from speechpipe.bench.stats import percentile, rounded_percentile

__all__ = ["ListenerRule", "ladder_summary", "LevelReport", "run_level", "solo_demand",
           "print_row"]


# -- a level ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ListenerRule:
    """When a level holds: what the listeners got (issue 12's rule)."""

    end_offset_p50: float = 2.0
    end_offset_p95: float = 3.5
    start_offset_p50: float = 2.5


def ladder_summary(samples: Sequence[float]) -> str:
    """Degrade levels sampled during a level, e.g. ``0:40% 3:60%`` (share of samples)."""
    if not samples:
        return "-"
    counts: dict[int, int] = {}
    for value in samples:
        counts[int(value)] = counts.get(int(value), 0) + 1
    return " ".join(f"{level}:{round(100 * n / len(samples))}%"
                    for level, n in sorted(counts.items()))


@dataclass
class LevelReport:
    """The figures of one configuration at one session count."""
    label: str
    sessions: int
    started: int = 0
    queued: int = 0
    refused: int = 0
    finished: int = 0
    errors: int = 0
    target_commit: list[float] = field(default_factory=list)
    target_commit_admitted_at_once: list[float] = field(default_factory=list)
    source_commit: list[float] = field(default_factory=list)
    start_offsets: list[float] = field(default_factory=list)
    end_offsets: list[float] = field(default_factory=list)
    # per utterance: (queued, late, silence), see ``end_offset_split``
    end_split: list[tuple[float, float, float]] = field(default_factory=list)
    # per source language: its utterances' StartOffsets and EndOffsets
    by_language: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    # per source language: ``committed_by_end`` of its utterances (captions, translation)
    committed_by_language: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    server_cpu: float = math.nan  # cores (1.0 = one core busy)
    bench_cpu: float = math.nan
    other_cpu: float = math.nan  # cores used by other processes on the machine meanwhile
    wall_s: float = 0.0
    mean_batch: float = math.nan
    dropped: float = 0.0
    asr_wait_mean: float = math.nan
    max_degrade: float = 0.0
    retry_after: list[float] = field(default_factory=list)
    waited: list[float] = field(default_factory=list)
    ladder: list[float] = field(default_factory=list)  # degrade level, sampled every 2 s
    # each client's (start, end) on the bench's clock, seconds from the level's start
    spans: list[tuple[float, float]] = field(default_factory=list)

    def completed(self) -> bool:
        """Every session admitted at once and finished normally."""
        return (self.started == self.sessions and self.queued == 0 and self.refused == 0
                and self.finished == self.sessions and self.errors == 0)

    def holds(self, rule: ListenerRule = ListenerRule()) -> bool:
        """Every session completed and the listeners' speech offsets are within ``rule``
        (a NaN percentile, i.e. no speech heard, does not hold)."""
        return (self.completed() and bool(self.end_offsets) and bool(self.start_offsets)
                and percentile(self.end_offsets, 50) <= rule.end_offset_p50
                and percentile(self.end_offsets, 95) <= rule.end_offset_p95
                and percentile(self.start_offsets, 50) <= rule.start_offset_p50)

    def row(self) -> dict[str, Any]:
        """The level's figures as one table row."""
        p = rounded_percentile
        return {
            "config": self.label, "sessions": self.sessions, "started": self.started,
            "queued": self.queued, "refused": self.refused, "finished": self.finished,
            "commit_p50": p(self.target_commit, 50), "commit_p95": p(self.target_commit, 95),
            "commit_p99": p(self.target_commit, 99),
            "source_commit_p95": p(self.source_commit, 95),
            "start_offset_p50": p(self.start_offsets, 50),
            "start_offset_p95": p(self.start_offsets, 95),
            "end_offset_p50": p(self.end_offsets, 50), "end_offset_p95": p(self.end_offsets, 95),
            "server_cpu_cores": round(self.server_cpu, 2),
            "bench_cpu_cores": round(self.bench_cpu, 2),
            "other_cpu_cores": round(self.other_cpu, 2),
            "mean_batch": round(self.mean_batch, 2), "dropped": int(self.dropped),
            "asr_wait_mean": round(self.asr_wait_mean, 3), "max_degrade": int(self.max_degrade),
            "ladder": ladder_summary(self.ladder), "holds": self.holds(),
            # medians of EndOffset's parts (each part's own median: they need not add up)
            "end_split_p50": {part: rounded_percentile([s[k] for s in self.end_split], 50)
                              for k, part in enumerate(("queued", "late", "silence"))},
            "by_language": {
                lang: {"utterances": len(ends), "start_offset_p50": p(starts, 50),
                       "end_offset_p50": p(ends, 50), "end_offset_p95": p(ends, 95),
                       **self._committed_by_end(lang)}
                for lang, (starts, ends) in sorted(self.by_language.items())},
        }

    def _committed_by_end(self, lang: str) -> dict[str, float]:
        shares = self.committed_by_language.get(lang, [])
        return {"source_committed_by_end_p50": rounded_percentile([s for s, _ in shares], 50),
                "target_committed_by_end_p50": rounded_percentile([t for _, t in shares], 50)}


def _machine_cpu() -> float:
    """CPU seconds the whole machine has spent busy (every process; /proc/stat)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return math.nan
    busy = sum(fields[:8]) - fields[3] - fields[4]  # minus idle and iowait
    return busy / os.sysconf("SC_CLK_TCK")


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run_level(url: str, clips: Sequence[Clip], sessions: int, *, label: str,
                    duration_s: float, server: ServerProcess | None = None,
                    stagger_s: float = 0.25, frame_ms: int = 20, mix_languages: bool = False,
                    detect_language: bool = False, one_at_a_time: bool = False) -> LevelReport:
    """Run N clients against one server (``one_at_a_time``: each alone, one after the
    other: what the same playlists get with no other session); returns the level's figures."""
    report = LevelReport(label, sessions)
    before = await asyncio.to_thread(scrape, url)  # the server may share this event loop
    cpu0 = server.cpu_seconds() if server else math.nan
    self0 = _self_cpu()
    machine0 = _machine_cpu()
    t0 = time.monotonic()
    peak_degrade = 0.0

    async def client(i: int) -> tuple[ClientRun, str]:
        if not one_at_a_time:
            await asyncio.sleep(i * stagger_s)
        audio, lang = playlist(clips, i, duration_s, mix_languages=mix_languages,
                               detect_language=detect_language)
        start = time.monotonic() - t0
        run = await run_client(url, i, audio, lang, frame_ms=frame_ms,
                               timeout_s=duration_s * 4 + 120)
        report.spans.append((start, time.monotonic() - t0))
        return run, "mixed" if mix_languages else speaker_language(clips, i)

    async def watch() -> None:
        nonlocal peak_degrade
        while True:
            await asyncio.sleep(2.0)
            level = (await asyncio.to_thread(scrape, url)).get("speechpipe_degrade_level", 0.0)
            peak_degrade = max(peak_degrade, level)
            report.ladder.append(level)

    watcher = asyncio.create_task(watch())
    try:
        if one_at_a_time:
            runs = [await client(i) for i in range(sessions)]
        else:
            runs = await asyncio.gather(*(client(i) for i in range(sessions)))
    finally:
        watcher.cancel()
    report.wall_s = time.monotonic() - t0
    after = await asyncio.to_thread(scrape, url)
    if server is not None:
        report.server_cpu = (server.cpu_seconds() - cpu0) / report.wall_s
    report.bench_cpu = (_self_cpu() - self0) / report.wall_s
    # what other tenants took meanwhile: figures from a busy shared machine mean less
    report.other_cpu = (_machine_cpu() - machine0) / report.wall_s - report.bench_cpu - (
        report.server_cpu if server is not None else 0.0)

    def delta(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    calls = delta("speechpipe_asr_batch_size_count")
    report.mean_batch = delta("speechpipe_asr_batch_size_sum") / calls if calls else math.nan
    waits = delta("speechpipe_asr_queue_wait_seconds_count")
    report.asr_wait_mean = delta("speechpipe_asr_queue_wait_seconds_sum") / waits if waits \
        else math.nan
    report.dropped = delta("speechpipe_asr_dropped_total")
    report.max_degrade = max(peak_degrade, after.get("speechpipe_degrade_level", 0.0))
    for run, lang in runs:
        report.started += run.started
        report.queued += run.queued
        report.refused += run.refused
        if run.retry_after_s is not None:
            report.retry_after.append(run.retry_after_s)
        if run.queued and run.started:
            report.waited.append(run.waited_s)
        report.finished += run.close_code == 1000
        events = [e for _, e in run.events]
        report.errors += sum(1 for e in events if e.get("type") == "error") + bool(
            run.error and not run.refused
        )
        target = commit_latencies(events, "target")
        report.target_commit += target
        if run.started and not run.queued:
            report.target_commit_admitted_at_once += target
        report.source_commit += commit_latencies(events, "source")
        starts, ends = utterance_offsets(run)
        report.start_offsets += starts
        report.end_offsets += ends
        report.end_split += end_offset_split(run)
        language = report.by_language.setdefault(lang, ([], []))
        language[0].extend(starts)
        language[1].extend(ends)
        report.committed_by_language.setdefault(lang, []).extend(committed_by_end(run))
    return report


# -- the table ------------------------------------------------------------------------------
def solo_demand(
    per_session_cores: float, sessions: int, machine_cores: int
) -> dict[str, Any] | None:
    """What ``sessions`` sessions would ask of the machine if each cost what one costs alone
    (``--solo``'s server CPU): at or above the machine's cores, that many cannot all run at
    the solo quality and cadence, whatever the scheduling. None when the CPU is unknown (a
    server the bench did not start)."""
    if not math.isfinite(per_session_cores):
        return None
    return {"per_session_cores": round(per_session_cores, 2), "sessions": sessions,
            "cores_needed": round(per_session_cores * sessions, 2),
            "machine_cores": machine_cores}


def print_row(row: dict[str, Any], *, header: bool = False) -> None:
    cols = ("config", "sessions", "started", "queued", "refused", "finished", "commit_p50",
            "commit_p95", "commit_p99", "source_commit_p95", "start_offset_p50",
            "start_offset_p95", "end_offset_p50", "end_offset_p95", "server_cpu_cores",
            "bench_cpu_cores", "other_cpu_cores", "mean_batch", "dropped", "asr_wait_mean",
            "max_degrade")
    names = ("config", "N", "start", "queue", "refus", "done", "c.p50", "c.p95", "c.p99",
             "src.p95", "SO.p50", "SO.p95", "EO.p50", "EO.p95", "srvCPU", "cliCPU", "other",
             "batch", "drop", "wait", "deg")
    if header:
        print(" ".join(f"{n:>8}" for n in names) + "  holds  ladder (level:share)", flush=True)
    # a long configuration name is cut at its end ("no-batching" -> "no-batch", not
    # "batching") and given in full on the next line
    cells = [str(row["config"])[:8], *(str(row[c])[-8:] for c in cols[1:])]
    print(" ".join(f"{cell:>8}" for cell in cells)
          + f"  {'yes' if row.get('holds') else 'no':>5}  {row.get('ladder', '-')}", flush=True)
    if len(str(row["config"])) > 8:
        print(f"{'':>8} config: {row['config']}", flush=True)
    split = row.get("end_split_p50")
    if split:
        print(f"{'':>8} EndOffset parts (p50 each): queued {split['queued']} s, late speech "
              f"{split['late']} s, silence {split['silence']} s", flush=True)
    demand = row.get("demand")
    if demand:
        print(f"{'':>8} one session alone keeps {demand['per_session_cores']} cores busy: "
              f"{demand['sessions']} at that rate would need {demand['cores_needed']} of the "
              f"machine's {demand['machine_cores']} cores", flush=True)
    for lang, figures in (row.get("by_language") or {}).items():
        print(f"{'':>8} {lang}: {figures['utterances']} utterances, StartOffset p50 "
              f"{figures['start_offset_p50']} s, EndOffset p50 {figures['end_offset_p50']} s, "
              f"p95 {figures['end_offset_p95']} s; committed when the speaker stopped (p50): "
              f"captions {_percent(figures.get('source_committed_by_end_p50'))}, translation "
              f"{_percent(figures.get('target_committed_by_end_p50'))}", flush=True)


def _percent(share: float | None) -> str:
    return "-" if share is None or not math.isfinite(share) else f"{share:.0%}"
