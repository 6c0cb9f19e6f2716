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
import contextlib
import itertools
import json
import math
import os
import resource
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from speechpipe.bench.own_samples import own_samples
from speechpipe.bench.server_process import ServerProcess, scrape
from speechpipe.bench.stats import percentile, rounded_percentile
from speechpipe.evaluation.scores import end_offset_parts, laid_back_to_back
from speechpipe.machine import describe_cpu, usable_cores
from speechpipe.transport.client import ClientRun, stream_session

__all__ = ["run_load_bench", "register_load", "ClientRun", "commit_latencies", "utterance_offsets",
           "end_offset_split", "speaker_language", "percentile", "LevelReport", "ListenerRule",
           "ladder_summary", "solo_demand", "committed_by_end", "playlist_recordings",
           "voiced_span", "recording_offsets", "StartCase", "run_start_case",
           "run_start_cases"]

RATE = 16_000
# one phrase-cache namespace per client session of this process (see ``run_level``)
_SESSIONS = itertools.count()


# -- what one client saw: ``transport.client.ClientRun`` -------------------------------
def commit_latencies(events: Sequence[dict[str, Any]], side: str) -> list[float]:
    """``stream_t - audio_end`` of every ``side`` event whose committed text grew."""
    committed: dict[int, str] = {}
    out = []
    for event in events:
        if event.get("type") != side:
            continue
        utterance = event["utterance"]
        if len(event["committed"]) > len(committed.get(utterance, "")):
            out.append(float(event["stream_t"]) - float(event["audio_end"]))
        committed[utterance] = event["committed"]
    return out


def utterance_offsets(run: ClientRun) -> tuple[list[float], list[float]]:
    """(StartOffsets, EndOffsets) per utterance, as the client hears the speech."""
    starts = {e["utterance"]: e["t"] for e in run.of("vad") if e["kind"] == "start"}
    ends = {e["utterance"]: e["t"] for e in run.of("vad") if e["kind"] == "end"}
    chunks = _chunks(run)
    first_audio: dict[int, float] = {}
    for arrived, u, _ in chunks:
        first_audio.setdefault(u, arrived)
    laid_end = _laid_ends(chunks)
    start_offsets = [first_audio[u] - t for u, t in starts.items() if u in first_audio]
    end_offsets = [laid_end[u] - t for u, t in ends.items() if u in laid_end]
    return start_offsets, end_offsets


def end_offset_split(run: ClientRun) -> list[tuple[float, float, float]]:
    """Where each utterance's EndOffset goes, as ``(queued, late, silence)`` seconds that add
    up to it: speech already received when the speaker stopped and still to play (*queued*,
    whichever utterance it belongs to), the utterance's speech received only afterwards
    (*late*: words committed or synthesized after the end), and the output's idle time in
    between (*silence*: waiting for a commit or the synthesizer). Speech laid back to back as
    in ``utterance_offsets``; the split is ``evaluation.scores.end_offset_parts``, the one
    the trace's uses."""
    ends = {e["utterance"]: e["t"] for e in run.of("vad") if e["kind"] == "end"}
    chunks = _chunks(run)
    laid = [(arrived, end, seconds) for (arrived, _, seconds), end
            in zip(chunks, laid_back_to_back((a, d) for a, _, d in chunks), strict=True)]
    out = []
    for utterance, end in ends.items():
        parts = end_offset_parts(laid, end, [u == utterance for _, u, _ in chunks])
        if parts is not None:
            out.append(parts)
    return out


def committed_by_end(run: ClientRun) -> list[tuple[float, float]]:
    """Per utterance, the share of its final committed words (captions, translation) that
    were already committed when the speaker stopped (the VAD's speech end, on the client's
    stream clock). What is not is committed later, at the pause: spoken after the end.
    Utterances with no committed words on either side are left out."""
    ends = {e["utterance"]: e["t"] for e in run.of("vad") if e["kind"] == "end"}
    at_end: dict[tuple[str, int], int] = {}
    final: dict[tuple[str, int], int] = {}
    for arrived, event in run.events:
        side, utterance = str(event.get("type")), event.get("utterance")
        if side not in ("source", "target") or not isinstance(utterance, int) \
                or utterance not in ends:
            continue
        words = len(event["committed"].split())
        final[side, utterance] = words
        if arrived <= ends[utterance]:
            at_end[side, utterance] = words
    return [(at_end.get(("source", u), 0) / final["source", u],
             at_end.get(("target", u), 0) / final["target", u])
            for u in ends if final.get(("source", u)) and final.get(("target", u))]


def _chunks(run: ClientRun) -> list[tuple[float, int, float]]:
    """``(arrived, utterance, seconds)`` of each speech chunk the client received."""
    return [(arrived, header["utterance"], header["samples"] / header["sample_rate"])
            for arrived, header, _ in run.audio]


def _laid_ends(chunks: Sequence[tuple[float, int, float]]) -> dict[int, float]:
    """Per utterance, where its speech ends when every chunk is played as it arrives, after
    the speech before it (back to back)."""
    laid_end: dict[int, float] = {}
    for (_, utterance, _), end in zip(
            chunks, laid_back_to_back((a, d) for a, _, d in chunks), strict=True):
        laid_end[utterance] = end
    return laid_end


# -- clips ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Clip:
    """One recording of the playlist, int16 at 16 kHz."""
    id: str
    lang: str
    audio: np.ndarray  # int16 at 16 kHz


def find_manifest(explicit: str | None = None) -> Path:
    """``explicit``, else the project's own ``samples/manifest.jsonl``."""
    candidates = [Path(explicit)] if explicit else [
        Path.cwd() / "samples" / "manifest.jsonl",
        own_samples() / "manifest.jsonl",  # the package's own clips, installed or not
    ]
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError("no clips: pass --clips MANIFEST.jsonl")


def load_clips(manifest: Path, target: str = "en", limit: int = 12, *,
               languages: Sequence[str] = (), per_language: int | None = None) -> list[Clip]:
    """Clips whose language differs from the target (x -> English), resampled to 16 kHz;
    only ``languages`` when given, at most ``per_language`` of each."""
    import soundfile as sf
    import soxr

    clips: list[Clip] = []
    for line in manifest.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if row.get("lang") == target or not row.get("translation_en"):
            continue
        if languages and row.get("lang") not in languages:
            continue
        if per_language is not None and sum(
                c.lang == row.get("lang") for c in clips) >= per_language:
            continue
        if row.get("category") not in (None, "core_x_to_en") or (row.get("duration_s") or 0) > 20:
            continue
        audio, rate = sf.read(manifest.parent / row["file"], dtype="float32")
        if audio.ndim > 1:
            audio = audio.mean(axis=1)
        if rate != RATE:
            audio = soxr.resample(audio, rate, RATE)
        pcm = np.clip(np.round(audio * 32768.0), -32768, 32767).astype(np.int16)
        clips.append(Clip(row.get("id", row["file"]), row["lang"], pcm))
        if len(clips) >= limit:
            break
    if not clips:
        raise FileNotFoundError(f"no x->{target} clips with a reference in {manifest}")
    return clips


def speaker_language(clips: Sequence[Clip], index: int) -> str:
    """The language client ``index`` speaks: the clips' languages in the order they first
    appear, cycling."""
    languages = list(dict.fromkeys(clip.lang for clip in clips))
    return languages[index % len(languages)]


def playlist(clips: Sequence[Clip], index: int, seconds: float, gap_s: float = 1.0, *,
             mix_languages: bool = False, detect_language: bool = False) -> tuple[np.ndarray, str]:
    """Audio for client ``index`` (clips, ``gap_s`` of silence between, >= ``seconds``) and the
    ``source_lang`` it starts with.

    A session is one speaker, and a speaker keeps their language: client ``index`` plays the
    clips of the ``index``-th language (in the order they first appear, cycling), rotated by
    its rank among the clients of that language so that sessions say different things at a
    time, and sends that language (``auto`` with ``detect_language``). With ``mix_languages``
    the playlist cycles through every clip whatever its language and sends ``auto``: the
    server keeps the first language it detects (``asr.keep_detected_language``), so most clips
    are then decoded in a wrong language; a stress of detection, not a conversation."""
    audio, lang, _ = playlist_recordings(clips, index, seconds=seconds, gap_s=gap_s,
                                         mix_languages=mix_languages,
                                         detect_language=detect_language)
    return audio, lang


def playlist_recordings(
    clips: Sequence[Clip], index: int, *, seconds: float = 0.0, count: int | None = None,
    gap_s: float = 1.0, mix_languages: bool = False, detect_language: bool = False,
) -> tuple[np.ndarray, str, list[tuple[float, float]]]:
    """``playlist``'s audio and language, and each recording's voiced span on the stream
    clock (``voiced_span``: first voiced frame, end of the last), for ``count`` recordings
    when given (else as many as fill ``seconds``)."""
    if mix_languages:
        own, k, lang = list(clips), index, "auto"
    else:
        lang = speaker_language(clips, index)
        own = [clip for clip in clips if clip.lang == lang]
        k = index // len({clip.lang for clip in clips})
        if detect_language:
            lang = "auto"
    parts: list[np.ndarray] = []
    spans: list[tuple[float, float]] = []
    total = 0
    gap = np.zeros(int(gap_s * RATE), np.int16)
    while (len(spans) < count) if count is not None else (total < seconds * RATE):
        clip = own[k % len(own)]
        first, end = voiced_span(clip.audio)
        spans.append(((total + first) / RATE, (total + end) / RATE))
        parts += [clip.audio, gap]
        total += len(clip.audio) + len(gap)
        k += 1
    return np.concatenate(parts), lang, spans


def voiced_span(pcm: np.ndarray, frame_ms: int = 20, below_peak_db: float = 30.0,
                floor_dbfs: float = -60.0) -> tuple[int, int]:
    """(first sample, end sample) of a recording's voiced frames: ``frame_ms`` frames whose
    RMS is within ``below_peak_db`` of its loudest frame and above ``floor_dbfs`` (what the
    client can tell of its own speech, with no server VAD); the whole recording when no
    frame is."""
    step = RATE * frame_ms // 1000
    n = len(pcm) // step
    if n == 0:
        return 0, len(pcm)
    frames = pcm[: n * step].astype(np.float64).reshape(n, step) / 32768.0
    rms = np.sqrt(np.mean(frames * frames, axis=1))
    threshold = max(float(rms.max()) * 10 ** (-below_peak_db / 20), 10 ** (floor_dbfs / 20))
    voiced = np.flatnonzero(rms >= threshold)
    if len(voiced) == 0:
        return 0, len(pcm)
    return int(voiced[0]) * step, (int(voiced[-1]) + 1) * step


def recording_offsets(
    run: ClientRun, spans: Sequence[tuple[float, float]], margin_s: float = 0.5,
) -> list[tuple[float, float] | None]:
    """Per recording of a playlist (its voiced span on the stream clock, ``spans`` in
    order): (first translated audio after its first voiced frame, end of its translated audio
    after its last voiced frame), judged at the client: arrival on the client's clock, chunks
    laid back to back (``evaluation.scores.laid_back_to_back``). The server's utterances
    belong to the recording during which they started (VAD start at most ``margin_s``
    before its first voiced frame, and before the next one's); None for a recording of
    which no translated audio arrived."""
    if not spans:
        return []
    owner: dict[int, int] = {}
    for e in run.of("vad"):
        if e["kind"] != "start":
            continue
        k = 0
        for j, (first, _) in enumerate(spans):
            if e["t"] >= first - margin_s:
                k = j
        owner[e["utterance"]] = k
    chunks = _chunks(run)
    firsts: dict[int, float] = {}
    ends: dict[int, float] = {}
    for (arrived, utterance, _), end in zip(
            chunks, laid_back_to_back((a, d) for a, _, d in chunks), strict=True):
        if utterance not in owner:
            continue
        firsts.setdefault(owner[utterance], arrived)
        ends[owner[utterance]] = end
    return [(firsts[k] - first, ends[k] - end) if k in firsts else None
            for k, (first, end) in enumerate(spans)]


# -- one client -------------------------------------------------------------------------------
async def run_client(url: str, index: int, audio: np.ndarray, lang: str, *,
                     frame_ms: int = 20, tail_s: float = 2.0, timeout_s: float = 180.0,
                     output_rate: int = 16_000, phrase_cache: str = "",
                     begin: asyncio.Event | None = None,
                     on_message: Callable[[str | bytes], None] | None = None) -> ClientRun:
    """One client: stream its playlist at real time and record every event (the one
    protocol client, ``transport.client.stream_session``); ``begin``: the audio starts once
    it is set (the stream clock starts then)."""
    from websockets.exceptions import ConnectionClosed

    try:
        async with asyncio.timeout(timeout_s):
            return await stream_session(
                url, audio, rate=RATE, frame_ms=frame_ms, tail_s=tail_s, index=index,
                start={"source_lang": lang, "target_lang": "en",
                       "output_sample_rate": output_rate, "phrase_cache": phrase_cache},
                begin=begin, on_message=on_message)
    except TimeoutError:
        return ClientRun(index, error="timeout")
    except (OSError, ConnectionClosed) as exc:
        return ClientRun(index, error=type(exc).__name__)


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
        # a phrase-cache namespace per client and level: no session gets speech synthesized
        # earlier for free, neither another client's nor its own from an earlier level (the
        # bench replays the same clips)
        start = time.monotonic() - t0
        run = await run_client(url, i, audio, lang, frame_ms=frame_ms,
                               phrase_cache=f"bench-{next(_SESSIONS)}",
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
    together: bool = True  # synchronized: every client was admitted before the audio began

    def add(self, run: ClientRun, spans: Sequence[tuple[float, float]]) -> None:
        """Take one client's run (``spans``: its recordings' voiced spans)."""
        self.finished += run.close_code == 1000
        self.errors += sum(1 for _, e in run.events if e.get("type") == "error") + bool(
            run.error)
        self.recordings += len(spans)
        offsets = recording_offsets(run, spans)
        for k, pair in enumerate(offsets):
            if pair is None:
                continue
            self.firsts.append(pair[0])
            self.ends.append(pair[1])
            if k == 0:
                self.session_firsts.append(pair[0])

    def row(self) -> dict[str, Any]:
        """The case's figures as one table row."""
        p = rounded_percentile
        return {"case": self.label, "sessions": self.sessions, "finished": self.finished,
                "errors": self.errors, "recordings": self.recordings,
                "heard": len(self.firsts), "first_p50": p(self.firsts, 50),
                "session_first_p50": p(self.session_firsts, 50),
                "end_p50": p(self.ends, 50), "end_p95": p(self.ends, 95),
                "together": self.together}


async def run_start_case(
    url: str, clips: Sequence[Clip], sessions: int, *, label: str, mode: str,
    recordings: int = 6, gap_s: float = 0.8, stagger_s: float = 0.25, frame_ms: int = 20,
    begin_timeout_s: float = 60.0,
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
            nonlocal told
            if not told and isinstance(message, str) and '"started"' in message:
                told = True
                one_ready()

        run = await run_client(url, i, audio, lang, frame_ms=frame_ms,
                               phrase_cache=f"bench-{next(_SESSIONS)}",
                               timeout_s=len(audio) / RATE * 4 + 120 + begin_timeout_s,
                               begin=begin, on_message=on_message)
        if not told:  # refused or failed: the others do not wait for it
            told = True
            one_ready()
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


def _print_cases(rows: Sequence[dict[str, Any]]) -> None:
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


async def run_start_cases(
    *, url: str | None = None, sessions: int = 8, recordings: int = 6, gap_s: float = 0.8,
    stagger_s: float = 0.25, languages: Sequence[str] = ("es", "fr"),
    clips_manifest: str | None = None, capacity: int | None = None,
    server_args: Sequence[str] = (), report_path: str | None = None, frame_ms: int = 20,
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
    print(f"clips: {len(clips)} from {manifest} ({', '.join(langs)}); {recordings} recordings "
          f"per session, {gap_s} s of silence between", flush=True)
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
            case = await run_start_case(target, clips, n, label=label, mode=mode,
                                        recordings=recordings, gap_s=gap_s,
                                        stagger_s=stagger_s, frame_ms=frame_ms)
            rows.append(case.row())
    finally:
        if server is not None:
            await asyncio.to_thread(server.__exit__)
    _print_cases(rows)
    results: dict[str, Any] = {"cases": rows, "recordings": recordings, "gap_s": gap_s,
                               "languages": langs}
    if report_path:
        await asyncio.to_thread(Path(report_path).write_text, json.dumps(results, indent=2))
    return results


# -- the whole bench --------------------------------------------------------------------------
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


def _levels(sessions: int | None, ramp: bool, steps: Sequence[int], max_sessions: int) -> list[int]:
    if sessions is not None and not ramp:
        return [min(sessions, max_sessions)]
    return [n for n in steps if n <= max_sessions]


def _print_row(row: dict[str, Any], *, header: bool = False) -> None:
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


async def run_load_bench(
    *,
    url: str | None = None,
    sessions: int | None = None,
    ramp: bool = False,
    steps: Sequence[int] = (2, 4, 6, 8, 10, 12),
    batching: str = "both",
    duration_s: float = 30.0,
    target_p95: float = 1.5,
    rule: ListenerRule = ListenerRule(),
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
                _print_row(row, header=first)
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
                _print_row(row, header=first)
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
        await asyncio.to_thread(Path(report_path).write_text, json.dumps(results, indent=2))
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
                      help="a running server's ws://.../ws (default: start one on 127.0.0.1)")
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
        asyncio.run(run_start_cases(
            url=args.url, sessions=min(args.sessions, args.max_sessions),
            recordings=args.recordings, gap_s=args.gap, stagger_s=args.stagger,
            languages=[lang.strip() for lang in args.languages.split(",") if lang.strip()],
            clips_manifest=args.clips, capacity=args.capacity, server_args=args.server_arg,
            report_path=args.report, frame_ms=args.frame_ms))
        return 0
    asyncio.run(run_load_bench(
        url=args.url, sessions=args.sessions, ramp=args.ramp, steps=list(iter_steps(args.steps)),
        batching=args.batching, duration_s=args.duration, target_p95=args.target_p95,
        rule=ListenerRule(args.end_p50, args.end_p95, args.start_p50), variants=args.variant,
        max_sessions=args.max_sessions, capacity=args.capacity, overload=args.overload,
        clips_manifest=args.clips, server_args=args.server_arg, report_path=args.report,
        frame_ms=args.frame_ms, mix_languages=args.mix_languages,
        detect_language=args.detect_language, solo=args.solo,
    ))
    return 0
