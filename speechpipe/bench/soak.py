"""``speechpipe bench soak``: sessions come and go for M minutes; does anything pile up?

An in-process server on 127.0.0.1 (the real models) and ``--sessions`` client loops on the
same event loop. Each loop picks a behaviour per session (seeded): stream a project clip and
``stop`` (most), vanish mid-utterance (TCP reset), close without ``stop``, send garbage, or
stream over WebRTC. Every ``--sample-every`` seconds it records the process RSS, open file
descriptors, asyncio tasks and threads.

Reported:
- **RSS slope** after warm-up (least-squares MB/min over the samples after
  ``--warmup-minutes``): near zero when nothing accumulates;
- **leaked tasks / fds / threads**: what exists after the churn, once every client is gone,
  minus what existed before it (measured after one warm-up session of each behaviour, so
  lazily created pools and caches are in the baseline).

Everything runs on loopback and stops by itself after ``--minutes``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fractions
import gc
import json
import os
import random
import re
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from speechpipe.bench.own_samples import own_samples
from speechpipe.bench.record import note, print_decoder
from speechpipe.bench.server_process import rss_mb as process_rss_mb
from speechpipe.decoder_path import pipeline_decoder_paths
from speechpipe.models.workers.heap import malloc_trim
from speechpipe.transport.file_output import write_text_file

__all__ = ["register_soak", "run_soak", "SoakReport"]

BEHAVIOURS = {  # behaviour -> weight
    "complete": 55,
    "reset": 15,
    "close_early": 10,
    "garbage": 8,
    "webrtc": 12,
}
SAMPLES_DIR = own_samples()


@dataclass
class SoakReport:
    """What a soak measured: RSS and descriptor samples, sessions and close codes."""
    minutes: float
    sessions: Counter[str] = field(default_factory=Counter)
    close_codes: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    captions: int = 0
    speech_chunks: int = 0
    samples: list[dict[str, float]] = field(default_factory=list)
    warmup_s: float = 0.0
    rss_slope_mb_per_min: float | None = None
    py_blocks_slope_k_per_min: float | None = None  # Python objects: flat unless they pile up
    baseline: dict[str, Any] = field(default_factory=dict)
    final: dict[str, Any] = field(default_factory=dict)
    leaked_tasks: list[str] = field(default_factory=list)
    leaked_fds: list[str] = field(default_factory=list)
    leaked_threads: list[str] = field(default_factory=list)
    pool_threads_added: list[str] = field(default_factory=list)  # bounded pools growing

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            "minutes": self.minutes,
            "sessions": dict(self.sessions),
            "close_codes": dict(self.close_codes),
            "errors": dict(self.errors),
            "captions": self.captions,
            "speech_chunks": self.speech_chunks,
            "warmup_s": self.warmup_s,
            "rss_slope_mb_per_min": self.rss_slope_mb_per_min,
            "py_blocks_slope_k_per_min": self.py_blocks_slope_k_per_min,
            "baseline": self.baseline,
            "final": self.final,
            "leaked_tasks": self.leaked_tasks,
            "leaked_fds": self.leaked_fds,
            "leaked_threads": self.leaked_threads,
            "pool_threads_added": self.pool_threads_added,
            "samples": self.samples,
        }


# --------------------------------------------------------------------------- process probes


def rss_mb() -> float:
    """This process's resident memory in MB."""
    return process_rss_mb("self")


def fds() -> dict[str, str]:
    """Open file descriptors of this process."""
    out: dict[str, str] = {}
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if not target.startswith("/proc/"):  # the listing's own directory handle
                out[fd] = target
    return out


def snapshot() -> dict[str, Any]:
    """One sample of this process: memory, descriptors and threads."""
    return {
        "rss_mb": round(rss_mb(), 1),
        "py_blocks_k": round(sys.getallocatedblocks() / 1000, 1),  # Python's own heap
        "fds": len(fds()),
        "tasks": len(asyncio.all_tasks()),
        "threads": threading.active_count(),
    }


def slope_per_minute(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) points, per minute."""
    if len(points) < 3:
        return None
    t = np.array([p[0] for p in points])
    v = np.array([p[1] for p in points])
    if np.ptp(t) <= 0:
        return None
    return float(np.polyfit(t, v, 1)[0] * 60.0)


# --------------------------------------------------------------------------- clients


def load_clips(folder: Path) -> list[tuple[str, np.ndarray]]:
    """The clips of ``folder/manifest.jsonl`` as (language, int16 16 kHz audio)."""
    from speechpipe.errors import InputError
    from speechpipe.evaluation.manifest import load_manifest
    from speechpipe.transport.file_replay import read_audio

    manifest = folder / "manifest.jsonl"
    if not manifest.is_file():
        raise InputError(f"no clips: {manifest} not found (pass --clips DIR)")
    clips = []
    for entry in load_manifest(manifest):
        if entry["lang"] != "en":
            clips.append((entry["lang"], read_audio(entry["path"])))
    if not clips:
        raise InputError(f"{manifest}: no non-English clips")
    return clips


class _Client:
    """One soak client loop's tools: a URL, clips, a seeded RNG and the shared report."""

    def __init__(self, url: str, clips: list[tuple[str, np.ndarray]], rng: random.Random,
                 report: SoakReport) -> None:
        self.url = url
        self.clips = clips
        self.rng = rng
        self.report = report

    async def run(self, behaviour: str) -> None:
        from websockets.exceptions import ConnectionClosed, InvalidStatus

        lang, audio = self.rng.choice(self.clips)
        self.report.sessions[behaviour] += 1
        try:
            if behaviour == "webrtc":
                code = await self._webrtc(lang, audio)
            else:
                code = await self._websocket(behaviour, lang, audio)
        except (ConnectionClosed, InvalidStatus, OSError, TimeoutError) as exc:
            self.report.close_codes[type(exc).__name__] += 1
            return
        self.report.close_codes[str(code)] += 1

    def _note(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            return
        event = json.loads(message)
        kind = event.get("type")
        if kind == "error":
            self.report.errors[event.get("code", "?")] += 1
        elif kind in ("source", "target"):
            self.report.captions += 1
        elif kind == "audio":
            self.report.speech_chunks += 1

    async def _websocket(self, behaviour: str, lang: str, audio: np.ndarray) -> int | None:
        """One WebSocket client of ``behaviour`` (the one protocol client,
        ``transport.client.stream_session``); returns the close code."""
        from speechpipe.transport.client import stream_session

        total = len(audio) + 16000  # one second of silence after the clip
        cut_s = None
        if behaviour in ("reset", "close_early"):
            cut_s = int(total * self.rng.uniform(0.1, 0.8)) / 16000
        junk: tuple[str | bytes, ...] = ()
        if behaviour == "garbage":
            junk = ("][", '{"type": 7}', b"\x01", '{"type":"ice"}',
                    '{"type":"offer","sdp":"v=0 junk"}', b"")
        end = {"reset": "abort", "close_early": "close"}.get(behaviour, "stop")
        run = await stream_session(
            self.url, audio, start={"source_lang": lang, "output_sample_rate": 16000},
            tail_s=1.0, send_s=cut_s, end=end, junk=junk,  # type: ignore[arg-type]
            on_message=self._note, drain_timeout_s=60)
        return run.close_code

    async def _webrtc(self, lang: str, audio: np.ndarray) -> int | None:
        from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed

        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        mic = make_clip_track(np.concatenate([audio, np.zeros(16000, np.int16)]), pc)
        pc.addTrack(mic)

        @pc.on("track")
        def on_track(track: Any) -> None:
            drains.append(asyncio.ensure_future(_drain(track)))

        drains: list[asyncio.Future[None]] = []
        try:
            async with connect(self.url, max_size=None, open_timeout=30) as ws:
                await ws.send(json.dumps({"type": "start", "source_lang": lang,
                                          "sample_rate": 48000}))
                answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()

                async def receive() -> None:
                    with contextlib.suppress(ConnectionClosed):
                        async for message in ws:
                            self._note(message)
                            if isinstance(message, str) and '"answer"' in message:
                                event = json.loads(message)
                                if event.get("type") == "answer" and not answer.done():
                                    answer.set_result(event["sdp"])

                reader = asyncio.create_task(receive())
                try:
                    await pc.setLocalDescription(await pc.createOffer())
                    await ws.send(json.dumps({"type": "offer", "sdp": pc.localDescription.sdp}))
                    async with asyncio.timeout(20):
                        sdp = await answer
                    await pc.setRemoteDescription(RTCSessionDescription(sdp, "answer"))
                    async with asyncio.timeout(len(audio) / 16000 + 20):
                        await mic.done.wait()
                    await ws.send(json.dumps({"type": "stop"}))
                    async with asyncio.timeout(60):
                        await reader
                finally:
                    reader.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await reader
            return ws.close_code
        finally:
            await pc.close()
            for task in drains:
                task.cancel()
            await asyncio.gather(*drains, return_exceptions=True)


async def _drain(track: Any) -> None:
    from aiortc.mediastreams import MediaStreamError

    with contextlib.suppress(MediaStreamError):
        while True:
            await track.recv()


def _clip_track_class() -> type:
    from aiortc import MediaStreamTrack
    from aiortc.mediastreams import MediaStreamError

    class ClipTrack(MediaStreamTrack):
        """A microphone stand-in: 16 kHz audio resampled to 48 kHz in 20 ms frames, starting
        once the peer is connected (silence before), then ``done``."""

        kind = "audio"

        def __init__(self, audio16k: np.ndarray, pc: Any) -> None:
            import soxr

            super().__init__()
            self.audio = np.asarray(soxr.resample(audio16k, 16000, 48000), dtype=np.int16)
            self.pc = pc
            self.ticks = 0
            self.sent = 0
            self.clock0: float | None = None
            self.done = asyncio.Event()

        async def recv(self) -> Any:
            import av

            if self.readyState != "live":
                raise MediaStreamError
            if self.clock0 is None:
                self.clock0 = time.monotonic()
            await asyncio.sleep(max(0.0, self.clock0 + self.ticks * 0.02 - time.monotonic()))
            chunk = np.zeros(960, np.int16)
            if self.pc.connectionState == "connected":
                part = self.audio[self.sent : self.sent + 960]
                chunk[: len(part)] = part
                self.sent += 960
                if self.sent >= len(self.audio):
                    self.done.set()
            frame = av.AudioFrame.from_ndarray(chunk.reshape(1, -1), format="s16", layout="mono")
            frame.sample_rate = 48000
            frame.pts = self.ticks * 960
            frame.time_base = fractions.Fraction(1, 48000)
            self.ticks += 1
            return frame

    return ClipTrack


def make_clip_track(audio: np.ndarray, pc: Any) -> Any:
    """A ``ClipTrack`` (defined on first use: aiortc is imported only by this bench)."""
    return _clip_track_class()(audio, pc)


# --------------------------------------------------------------------------- the soak


async def run_soak(
    minutes: float,
    *,
    sessions: int = 2,
    warmup_minutes: float | None = None,
    sample_every_s: float = 5.0,
    clips_dir: Path = SAMPLES_DIR,
    seed: int = 1,
    pipeline: Any = None,
    progress: bool = True,
    trim: bool = False,
) -> SoakReport:
    """Run the soak against an in-process server; returns its report."""
    from speechpipe.transport.limits import Quotas, ServerLimits
    from speechpipe.transport.websocket_server import SpeechServer

    clips = load_clips(clips_dir)
    own_pipeline = pipeline is None
    if own_pipeline:
        from speechpipe.config import PipelineOptions
        from speechpipe.session import Pipeline, apply_process_limits

        options = PipelineOptions()
        apply_process_limits(options)
        pipeline = await asyncio.to_thread(Pipeline.load, options)
        await asyncio.to_thread(pipeline.warm_up)
    if hasattr(pipeline, "engine"):  # the decoder the sessions run on
        print_decoder(pipeline_decoder_paths(pipeline))
    report = SoakReport(minutes=minutes)
    limits = ServerLimits(quotas=Quotas(max_sessions_per_ip=None))
    try:
        async with SpeechServer(pipeline.session, port=0, limits=limits) as server:
            url = f"ws://127.0.0.1:{server.port}/ws"
            rng = random.Random(seed)
            warm = _Client(url, clips, rng, SoakReport(minutes=0))
            for behaviour in BEHAVIOURS:  # one of each: lazily made pools are baseline
                await warm.run(behaviour)
            await _quiesce(server)
            if trim:
                malloc_trim()
            base_tasks = {_task_label(t) for t in asyncio.all_tasks()}
            base_fds = fds()
            base_threads = {t.name for t in threading.enumerate()}
            report.baseline = snapshot()

            t0 = time.monotonic()
            deadline = t0 + minutes * 60
            report.warmup_s = (warmup_minutes * 60 if warmup_minutes is not None
                               else min(120.0, minutes * 60 * 0.25))
            names, weights = zip(*BEHAVIOURS.items(), strict=True)

            async def client_loop(k: int) -> None:
                client = _Client(url, clips, random.Random(seed * 1000 + k), report)
                while time.monotonic() < deadline:
                    await client.run(client.rng.choices(names, weights)[0])

            async def sampler() -> None:
                while True:
                    if trim:
                        malloc_trim()
                    sample = {"t": round(time.monotonic() - t0, 1), **snapshot(),
                              "sessions": server.active_sessions}
                    report.samples.append(sample)
                    if progress:
                        print(f"  t={sample['t']:6.0f}s rss={sample['rss_mb']:7.1f} MB "
                              f"py_blocks={sample['py_blocks_k']:7.1f}k "
                              f"fds={sample['fds']:4d} tasks={sample['tasks']:4d} "
                              f"threads={sample['threads']:3d} sessions={sample['sessions']}",
                              flush=True)
                    await asyncio.sleep(sample_every_s)

            sampling = asyncio.create_task(sampler())
            try:
                await asyncio.gather(*(client_loop(k) for k in range(sessions)))
            finally:
                sampling.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sampling
            await _quiesce(server)
            report.final = snapshot()
            report.leaked_tasks = sorted(
                label for label in (_task_label(t) for t in asyncio.all_tasks())
                if label not in base_tasks
            )
            now_fds = fds()
            report.leaked_fds = sorted(
                f"{fd} -> {target}" for fd, target in now_fds.items()
                if base_fds.get(fd) != target
            )
            added = sorted(t.name for t in threading.enumerate() if t.name not in base_threads)
            # asyncio's default executor (to_thread) grows on demand up to min(32, cpus + 4)
            report.pool_threads_added = [n for n in added if re.fullmatch(r"asyncio_\d+", n)]
            report.leaked_threads = [n for n in added if n not in report.pool_threads_added]
    finally:
        if own_pipeline:
            await pipeline.aclose()
    after = [s for s in report.samples if s["t"] >= report.warmup_s]
    report.rss_slope_mb_per_min = slope_per_minute([(s["t"], s["rss_mb"]) for s in after])
    report.py_blocks_slope_k_per_min = slope_per_minute(
        [(s["t"], s["py_blocks_k"]) for s in after]
    )
    return report


def _task_label(task: asyncio.Task[Any]) -> str:
    """A task's identity across the run: its name and id (names repeat per session)."""
    return f"{task.get_name()}#{id(task):x}"


async def _quiesce(server: Any, within: float = 30.0) -> None:
    """Wait until no connection is left, then give closing transports a moment."""
    for _ in range(int(within / 0.1)):
        if not server.connections:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)
    gc.collect()
    await asyncio.sleep(0.2)


def print_report(report: SoakReport) -> None:
    """Print a soak report."""
    rss = [s["rss_mb"] for s in report.samples]
    after = [s for s in report.samples if s["t"] >= report.warmup_s]
    total = sum(report.sessions.values())
    print(f"\nsoak: {report.minutes:g} min, {total} sessions {dict(report.sessions)}")
    print(f"  close codes: {dict(report.close_codes)}")
    print(f"  errors seen by clients: {dict(report.errors) or 'none'}")
    print(f"  captions {report.captions}, speech chunks {report.speech_chunks}")
    if rss:
        slope = report.rss_slope_mb_per_min
        print(f"  RSS: baseline {report.baseline.get('rss_mb')} MB, "
              f"after warm-up ({report.warmup_s:.0f} s) "
              f"{after[0]['rss_mb'] if after else float('nan')} MB, "
              f"end {rss[-1]} MB, peak {max(rss)} MB; slope after warm-up "
              + (f"{slope:+.2f} MB/min" if slope is not None else "n/a (too few samples)"))
    if report.py_blocks_slope_k_per_min is not None:
        print(f"  Python heap blocks slope after warm-up: "
              f"{report.py_blocks_slope_k_per_min:+.1f}k/min")
    print(f"  before churn: {report.baseline}")
    print(f"  after churn:  {report.final}")
    print(f"  leaked tasks: {len(report.leaked_tasks)} {report.leaked_tasks[:10]}")
    print(f"  leaked fds: {len(report.leaked_fds)} {report.leaked_fds[:10]}")
    print(f"  leaked threads: {len(report.leaked_threads)} {report.leaked_threads[:10]} "
          f"(default executor threads added, bounded: {len(report.pool_threads_added)})")


def register_soak(kinds: argparse._SubParsersAction) -> None:
    """Add ``bench soak`` to the bench subparsers."""
    soak = kinds.add_parser("soak", help="session churn for M minutes: RSS slope, leaked "
                                         "tasks and file descriptors")
    soak.add_argument("--minutes", type=float, default=10.0, help="how long to churn")
    soak.add_argument("--sessions", type=int, default=2, help="concurrent client loops")
    soak.add_argument("--warmup-minutes", type=float, default=None,
                      help="ignored for the RSS slope (default: a quarter, at most 2 min)")
    soak.add_argument("--sample-every", type=float, default=5.0, help="seconds between samples")
    soak.add_argument("--clips", default=str(SAMPLES_DIR),
                      help="folder with manifest.jsonl and clips (default: the project's "
                           "samples/)")
    soak.add_argument("--seed", type=int, default=1)
    soak.add_argument("--malloc-trim", action="store_true",
                      help="call glibc malloc_trim before each sample, so RSS shows memory in "
                           "use rather than memory the allocator keeps")
    soak.add_argument("--report", default=None, help="write the figures as JSON here")
    soak.set_defaults(handler=_bench_soak)


def _bench_soak(args: argparse.Namespace) -> int:
    report = asyncio.run(run_soak(
        args.minutes, sessions=args.sessions, warmup_minutes=args.warmup_minutes,
        sample_every_s=args.sample_every, clips_dir=Path(args.clips), seed=args.seed,
        trim=args.malloc_trim,
    ))
    print_report(report)
    note(report.as_dict())  # --record (speechpipe.bench.record)
    if args.report:
        write_text_file(args.report, json.dumps(report.as_dict(), indent=1) + "\n", "the report")
        print(f"wrote {args.report}")
    return 0
