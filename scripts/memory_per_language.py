"""Server memory after one session per source language (issue 49's check).

    python scripts/memory_per_language.py [--langs es,fr,de,it,pt,ja] [--set KEY=VALUE ...]

Starts ``speechpipe serve`` on a free loopback port (a subprocess, ``python -P``), waits
until it is ready, then streams the shared picovoice clip of each language in turn (one
session at a time, real time, the language given) and reads the server's resident memory
(VmRSS) after each session ends. Prints one row per session: language, RSS, growth over the
first session, whether it spoke (translated audio came back), its words, and the
``speechpipe_asr_model_bytes`` / ``speechpipe_asr_restricted_decoders`` gauges. The check:
the last row's growth within +300 MB of the first session, every session spoke. ``--set``
is passed to ``serve`` (e.g. ``--set asr.vocabulary_words=0`` for the full vocabulary).
Run it on a quiet machine; the figures go in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
import wave
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CLIPS = ROOT / "../shared/samples/wav"


def _rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024  # type: ignore[union-attr]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _read(path: Path) -> np.ndarray:
    with wave.open(str(path)) as w:
        if w.getframerate() != 16_000 or w.getnchannels() != 1 or w.getsampwidth() != 2:
            raise SystemExit(f"{path}: needs 16 kHz mono 16-bit PCM")
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").copy()


def _gauges(port: int) -> str:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    found = re.findall(r'^speechpipe_asr_(model_bytes\{kind="\w+"\}|restricted_decoders) (\S+)$',
                       body, re.M)
    return " ".join(f"{name.replace('model_bytes', '')}={float(v) / 2**20:.0f}MB"
                    if "bytes" in name or "kind" in name else f"decoders={float(v):.0f}"
                    for name, v in found)


async def _session(port: int, lang: str, audio: np.ndarray) -> tuple[bool, int]:
    from speechpipe.transport.client import stream_session

    async with asyncio.timeout(120):
        run = await stream_session(f"ws://127.0.0.1:{port}/ws", audio,
                                   start={"source_lang": lang, "target_lang": "en"})
    return bool(run.audio), len(run.text("target").split())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--langs", default="es,fr,de,it,pt,ja")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    port = _free_port()
    command = [sys.executable, "-P", "-m", "speechpipe", "serve", "--host", "127.0.0.1",
               "--port", str(port)]
    for item in args.set:
        command += ["--set", item]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            if server.poll() is not None:
                raise SystemExit(f"serve exited: {server.stderr.read()[-2000:]}")  # type: ignore[union-attr]
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("serve did not become ready in 180 s") from None
                time.sleep(0.5)
        print(f"serve ready, RSS {_rss_mb(server.pid):.0f} MB; load average "
              f"{os.getloadavg()[0]:.2f}")
        print(f"{'lang':<5} {'RSS MB':>7} {'+first':>7} {'spoke':>5} {'words':>5}  gauges")
        first = None
        for lang in args.langs.split(","):
            spoke, words = asyncio.run(_session(port, lang, _read(CLIPS /
                                                                  f"{lang}_picovoice_test.wav")))
            time.sleep(1.0)  # the session's teardown
            rss = _rss_mb(server.pid)
            first = rss if first is None else first
            print(f"{lang:<5} {rss:7.0f} {rss - first:+7.0f} {'yes' if spoke else 'NO':>5} "
                  f"{words:5d}  {_gauges(port)}")
        print(f"load average at the end {os.getloadavg()[0]:.2f}")
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    main()
