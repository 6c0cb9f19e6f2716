"""Sessions held at real time, real models, on one node with and without cluster mode (A/B).

Run it inside a private network namespace::

    unshare -n -- sh -c 'ip link set lo up && exec .venv/bin/python benchmarks/cluster_realtime.py'

Starts a Ray head (loopback), a plain ``speechpipe serve`` and a ``speechpipe serve --cluster``
node (both with the real models and ``--capacity`` above every level, so admission never
queues), then runs ``speechpipe bench load --url ... --ramp`` against each, interleaved
(plain, cluster, plain, cluster ...) so both see the same background load. Prints each
bench's "sessions held at real time" line and its table. Every process is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.cluster import BIN, HEAD_PORT, Procs, start_head  # noqa: E402

PLAIN, NODE = 8800, 8801


async def run(args: argparse.Namespace, procs: Procs) -> None:
    await start_head(procs)
    from speechpipe.bench.server_process import BENCH_SERVE_ARGS

    common = ["serve", "--no-webrtc", "--capacity", "32", *BENCH_SERVE_ARGS]
    procs.start("plain", [str(BIN / "speechpipe"), *common, "--port", str(PLAIN)])
    procs.start("cluster", [str(BIN / "speechpipe"), *common, "--port", str(NODE), "--cluster",
                            f"127.0.0.1:{HEAD_PORT}", "--public-url",
                            f"ws://127.0.0.1:{NODE}/ws"])
    await procs.wait_for("plain", "speechpipe: ready", 300)
    await procs.wait_for("cluster", "speechpipe: ready", 300)
    for round_ in range(args.rounds):
        for name, port in (("plain", PLAIN), ("cluster", NODE)):
            argv = [str(BIN / "speechpipe"), "bench", "load", "--url",
                    f"ws://127.0.0.1:{port}/ws", "--ramp", "--steps", args.steps,
                    "--duration", str(args.duration)]
            done = await asyncio.to_thread(subprocess.run, argv, capture_output=True,
                                           text=True, timeout=900, cwd=ROOT)
            print(f"--- round {round_ + 1}, {name} node (rc {done.returncode})", flush=True)
            print(done.stdout.strip()[-3000:], flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", default="2,4,6", help="bench load --steps")
    parser.add_argument("--duration", type=float, default=20.0, help="bench load --duration")
    parser.add_argument("--rounds", type=int, default=1, help="A/B rounds")
    args = parser.parse_args()
    procs = Procs(Path(tempfile.mkdtemp(prefix="spr", dir="/tmp")))
    try:
        asyncio.run(asyncio.wait_for(run(args, procs), 3000))
    finally:
        procs.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
