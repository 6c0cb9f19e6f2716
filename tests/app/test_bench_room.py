"""``speechpipe bench room``: its pure figures (digest, spread) and its bad input (exit 2)."""

from __future__ import annotations

import subprocess
import sys

from speechpipe.bench.room import listener_digest, spread
from speechpipe.transport.client import ListenerRun


def run_with(audio: list[tuple[float, bytes]], captions: list[str]) -> ListenerRun:
    run = ListenerRun()
    for i, text in enumerate(captions):
        run.events.append((float(i), {"type": "target", "utterance": i, "committed": text,
                                      "final": True, "speaker": "s"}))
    for t, pcm in audio:
        run.audio.append((t, {"type": "audio"}, pcm))
    return run


def test_digests_differ_when_captions_or_speech_bytes_differ() -> None:
    a = run_with([(0.0, b"\x01\x00")], ["hello"])
    b = run_with([(5.0, b"\x01\x00")], ["hello"])
    assert listener_digest(a) == listener_digest(b), "arrival times do not matter"
    assert listener_digest(a) != listener_digest(run_with([(0.0, b"\x02\x00")], ["hello"]))
    assert listener_digest(a) != listener_digest(run_with([(0.0, b"\x01\x00")], ["hullo"]))


def test_spread_is_first_to_last_listener_per_chunk() -> None:
    runs = [run_with([(1.0, b""), (2.0, b"")], []), run_with([(1.25, b""), (2.5, b"")], [])]
    chunks, _ = spread(runs)
    assert chunks == [0.25, 0.5]


def test_bad_listener_count_exits_2_with_one_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "speechpipe", "bench", "room", "--listeners",
                           "0"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "--listeners" in proc.stderr
