"""A ``speechpipe serve`` subprocess for the benchmarks, and a scrape of its ``/metrics``."""

from __future__ import annotations

import contextlib
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Collection, Sequence
from pathlib import Path

from speechpipe.bench.record import print_decoder
from speechpipe.decoder_path import DecoderPath, parse_decoder_line

__all__ = ["SPEECHPIPE", "BENCH_SERVE_ARGS", "ServerProcess", "PeakRss", "rss_mb", "scrape",
           "metric", "metric_sums", "metrics_text", "endpoint", "loopback_opener"]


def rss_mb(pid: int | str = "self") -> float:
    """Resident memory of process ``pid`` in MB (``/proc/PID/statm``); NaN once it is gone."""
    try:
        pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return math.nan
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


# -- the server -------------------------------------------------------------------------------
# -P: the working directory is not put on the import path, so a folder there named speechpipe
# (the clone's own folder, run from the folder that holds it) cannot shadow the installed package
SPEECHPIPE = (sys.executable, "-P", "-m", "speechpipe")
# what every bench server is started with, before the bench's own flags: each session a
# phrase cache of its own, so no session is served speech synthesized for another (the benches
# replay the same clips; real traffic shares a voice's cache and would look cheaper)
BENCH_SERVE_ARGS = ("--set", "pipeline.phrase_cache_per_session=true")


class ServerProcess:
    """``speechpipe serve`` in a subprocess on 127.0.0.1 (port chosen by the OS), with
    ``BENCH_SERVE_ARGS`` and then ``extra``."""

    def __init__(self, extra: Sequence[str], port: int = 0,
                 command: Sequence[str] | None = None) -> None:
        self.extra = list(extra)
        self.command = list(command or SPEECHPIPE)  # the program whose ``serve`` runs
        self.requested_port = port  # 0: any free port
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = tempfile.NamedTemporaryFile(prefix="speechpipe-bench-", suffix=".log",
                                               delete=False)
        self.port = 0
        # the decoder paths the server reported once ready (``speechpipe.decoder_path``)
        self.decoder: list[DecoderPath] = []

    def __enter__(self) -> ServerProcess:
        cmd = [*self.command, "serve", "--host", "127.0.0.1",
               "--port", str(self.requested_port), "--no-webrtc", *BENCH_SERVE_ARGS,
               *self.extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 300
        text = ""
        while time.monotonic() < deadline:
            text = Path(self.log.name).read_text(errors="replace")
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)/", text)
            if found:
                self.port = int(found.group(1))
            if "speechpipe: ready" in text and self.port:
                # the server prints its decoder line before "ready" (``speechpipe.serve``)
                self.decoder = parse_decoder_line(text)  # printed with the bench's figures
                extra = " ".join(self.extra)
                print_decoder(self.decoder, label="server" + (f" {extra}" if extra and
                                                              len(extra) <= 60 else ""))
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        self.__exit__()
        raise RuntimeError("the server did not become ready:\n" + text[-2000:])

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with contextlib.suppress(OSError):
            os.unlink(self.log.name)

    @property
    def url(self) -> str:
        """The server's WebSocket URL."""
        return f"ws://127.0.0.1:{self.port}/ws"

    def cpu_seconds(self) -> float:
        """CPU seconds the server process has used so far."""
        assert self.proc is not None
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return math.nan
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mb(self) -> float:
        """The server process's resident memory now, in MB."""
        assert self.proc is not None
        return rss_mb(self.proc.pid)


class PeakRss:
    """The highest RSS of a ``ServerProcess`` while in the ``with`` block, sampled every
    ``every_s`` by a thread (and once on entry and on exit)."""

    def __init__(self, server: ServerProcess, every_s: float = 0.1) -> None:
        self.server, self.every_s = server, every_s
        self.peak_mb = math.nan
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        now = self.server.rss_mb()
        if not math.isnan(now):
            self.peak_mb = now if math.isnan(self.peak_mb) else max(self.peak_mb, now)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._sample()

    def __enter__(self) -> PeakRss:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._sample()


# -- its HTTP endpoints -----------------------------------------------------------------------
SCRAPED = ("speechpipe_asr_batch_size_sum", "speechpipe_asr_batch_size_count",
           "speechpipe_asr_dropped_total", "speechpipe_degrade_level",
           "speechpipe_degrade_transitions_total", "speechpipe_asr_queue_wait_seconds_sum",
           "speechpipe_asr_queue_wait_seconds_count", "speechpipe_sessions_refused_total",
           "speechpipe_capacity_sessions")


def endpoint(url: str, path: str) -> str:
    """The HTTP address of ``path`` (``/metrics``, ``/healthz``) on the server of a
    ``ws://host:port/ws`` URL."""
    return url.replace("ws://", "http://").rsplit("/ws", 1)[0] + path


def loopback_opener() -> urllib.request.OpenerDirector:
    """A URL opener that ignores proxy settings (the benches' servers are on loopback)."""
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def metrics_text(url: str) -> str:
    """The server's ``/metrics`` (Prometheus text); ``OSError`` when it cannot be read."""
    with loopback_opener().open(endpoint(url, "/metrics"), timeout=10) as response:
        return response.read().decode()


def metric_sums(text: str, names: Collection[str]) -> dict[str, float]:
    """Per metric of ``names`` present in ``text`` (Prometheus text), the sum of its samples
    over every label set."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, value = line.rsplit(" ", 1)
        key = name.split("{", 1)[0]
        if key in names:
            with contextlib.suppress(ValueError):
                out[key] = out.get(key, 0.0) + float(value)
    return out


def histogram_buckets(text: str, name: str) -> dict[float, float]:
    """A histogram's cumulative bucket counts from ``/metrics`` text (Prometheus), summed
    over its label sets: upper bound (``le``) -> count."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        for sample in family.samples:
            if sample.name == f"{name}_bucket":
                bound = float(sample.labels["le"])
                out[bound] = out.get(bound, 0.0) + sample.value
    return out


def bucket_quantile(before: dict[float, float], after: dict[float, float],
                    q: float) -> float | None:
    """The ``q`` quantile (0-1) of what a histogram counted between two scrapes, as the upper
    bound of the bucket it falls in (an upper estimate, never an interpolation); None when
    nothing was counted."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0.0
    if total <= 0:
        return None
    for bound, count in zip(bounds, counts, strict=True):
        if count >= q * total:
            return bound
    return bounds[-1]


def bucket_share(before: dict[float, float], after: dict[float, float],
                 bound: float) -> float | None:
    """The share (0-1) of what a histogram counted between two scrapes that fell at or below
    ``bound`` (one of its bucket bounds); None when nothing was counted or ``bound`` is not
    a bucket bound."""
    total = after.get(max(after), 0.0) - before.get(max(after), 0.0) if after else 0.0
    if total <= 0 or bound not in after:
        return None
    return (after[bound] - before.get(bound, 0.0)) / total


def sums_by_label(text: str, name: str, label: str | tuple[str, ...]) -> dict[str, float]:
    """Per value of ``label``, the sum of metric ``name``'s samples that carry it (Prometheus
    text; samples without the label are left out). With several labels the key is their
    values joined by a space, in the order given (samples missing one are left out)."""
    out: dict[str, float] = {}
    names = (label,) if isinstance(label, str) else label
    patterns = [re.compile(rf'[{{,]{re.escape(n)}="([^"]*)"') for n in names]
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        labels = line.split("}", 1)[0]
        found = [p.search(labels) for p in patterns]
        if all(found):
            key = " ".join(f.group(1) for f in found if f)
            with contextlib.suppress(ValueError):
                out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def scrape(url: str) -> dict[str, float]:
    """A few sums from ``/metrics`` (``SCRAPED``); empty when it cannot be read."""
    try:
        text = metrics_text(url)
    except OSError:
        return {}
    return metric_sums(text, SCRAPED)


def metric(url: str, name: str) -> float:
    """One metric's sum over its label sets from ``/metrics`` (0 when absent; ``OSError``
    when it cannot be read)."""
    return metric_sums(metrics_text(url), (name,)).get(name, 0.0)
