"""Issue 21, item 8: SIGTERM with tracing on, a trace collector that accepts connections and
never answers, and a client that never reads: a real ``speechpipe serve`` process (the
test-only scripted pipeline: the models are not the point) still exits within the shutdown
grace, because the last trace flush only gets what is left of it."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from speechpipe.transport.websocket_server import ServerLimits
from tests.helpers import masked_frame, raw_upgrade
from tests.scripted_serve import SCRIPTED_SPEECHPIPE

pytest.importorskip("opentelemetry.sdk.trace", reason="needs the otel extra")


class HangingCollector:
    """A TCP listener on loopback that accepts every connection and never answers."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            self.accepted.append(conn)  # held open, never read, never answered

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


@pytest.fixture
def collector() -> Iterator[HangingCollector]:
    hanging = HangingCollector()
    try:
        yield hanging
    finally:
        hanging.close()


def _serve(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[bytes], int, Path]:
    log = tmp_path / "serve.log"
    proc = subprocess.Popen(
        [*SCRIPTED_SPEECHPIPE, "-v", "serve", "--port", "0", "--no-webrtc", "--capacity",
         "2", *args],
        stdout=subprocess.DEVNULL, stderr=log.open("wb"),
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        text = log.read_text(errors="replace")
        found = re.search(r"listening on http://127\.0\.0\.1:(\d+)/", text)
        if found and "speechpipe: ready" in text:
            return proc, int(found.group(1)), log
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    raise AssertionError("the server did not become ready:\n" + log.read_text()[-2000:])


def test_sigterm_with_a_hanging_collector_and_a_stuck_client_exits_within_the_grace(
    tmp_path: Path, collector: HangingCollector
) -> None:
    grace = ServerLimits().shutdown_grace_s  # the default flags
    proc, port, log = _serve(
        tmp_path, "--otlp-endpoint", f"http://127.0.0.1:{collector.port}/v1/traces")
    sock = None
    try:
        sock = raw_upgrade(port)
        sock.sendall(masked_frame(0x1, b'{"type": "start", "source_lang": "es"}'))
        received = b""
        while b'"started"' not in received:  # the session runs; from now on nothing is read
            part = sock.recv(4096)
            assert part, received
            received += part
        for _ in range(20):  # 2 s of audio: the session has spans to flush at its end
            sock.sendall(masked_frame(0x2, b"\x00" * 120))
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=grace + 30)
        elapsed = time.monotonic() - t0
    finally:
        if sock is not None:
            sock.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text(errors="replace")
    print(f"\nSIGTERM -> exit in {elapsed:.2f} s (grace {grace:g} s), rc {rc}")
    assert rc == 0, text[-2000:]
    assert collector.accepted, "the exporter never reached the collector"
    assert "trace export did not finish" in text, text[-2000:]
    assert elapsed < grace + 3.0, f"{elapsed:.2f} s for a {grace:g} s grace"
