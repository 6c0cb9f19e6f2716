"""The plain HTTP side of the server's one port: the demo page and static files (the caption
overlay at ``/captions``), ``/metrics``, ``/healthz``, ``/readyz``, ``/voices``, ``/models``,
a room's ``/rooms/ID/captions.vtt``, and the checks on a ``/ws`` upgrade
(Host, readiness, origin, per-address limits) before any WebSocket exists.

A thin layer like websockets' ``asyncio/router.py``: request in, response (or ``None``: go on
with the upgrade) out; ``transport.websocket_server`` hands it to websockets as
``process_request``.
"""

from __future__ import annotations

import http
import importlib.resources
import json
import logging
from collections.abc import Callable
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from speechpipe.transport.gate import AccessGate
from speechpipe.transport.hosts import HeaderError, HostPolicy, parse_host, single_header

__all__ = ["HttpRoutes", "METRICS_CONTENT_TYPE", "STATIC_TYPES"]

log = logging.getLogger("speechpipe.server")


METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


STATIC_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}


def _load_static() -> dict[str, tuple[str, bytes]]:
    files: dict[str, tuple[str, bytes]] = {}
    try:
        root = importlib.resources.files("speechpipe.transport") / "static"
        for entry in root.iterdir():
            suffix = "." + entry.name.rsplit(".", 1)[-1]
            if entry.is_file() and suffix in STATIC_TYPES:
                files["/" + entry.name] = (STATIC_TYPES[suffix], entry.read_bytes())
    except (FileNotFoundError, NotADirectoryError):
        log.warning("no static files found: the demo page is unavailable")
    if "/index.html" in files:
        files["/"] = files["/index.html"]
    if "/captions.html" in files:  # the caption overlay: /captions#room=ID&lang=xx
        files["/captions"] = files["/captions.html"]
    return files


def _response(status: int, content_type: str, body: bytes) -> Response:
    headers = Headers(
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
            ("Connection", "close"),
        ]
    )
    return Response(status, http.HTTPStatus(status).phrase, headers, body)


class HttpRoutes:
    """The port's HTTP answers (see the module docs)."""

    # the required shared workers that are down now (breaker open: models.workers.guard);
    # /readyz and /ws answer 503 while any is. Set by the app (ServerApp); none by default.
    down_workers: Callable[[], list[str]] = staticmethod(lambda: [])
    # GET /models: which languages a session can reach and the MT pairs installed (names and
    # languages only). Set by the app; by default Whisper's English only.
    models: Callable[[], dict[str, Any]] = staticmethod(
        lambda: {"targets": {"en": {"sources": ["*"], "route": "whisper"}}, "pairs": []})

    def __init__(
        self,
        *,
        is_ready: Callable[[], bool],
        metrics_text: Callable[[], bytes],
        voices: Callable[[], list[dict[str, Any]]],
        gate: AccessGate,
        hosts: HostPolicy,
        observer: Callable[[], Any],
        captions: Callable[[Request], Response | None] | None = None,
    ) -> None:
        self.is_ready = is_ready
        self.metrics_text = metrics_text
        self.voices = voices
        self.gate = gate
        self.hosts = hosts
        self.observer = observer  # the server's observer, read when a request comes
        self.static = _load_static()
        self.captions = captions  # GET /rooms/ID/captions.vtt (transport.caption_routes)

    def __call__(self, connection: ServerConnection, request: Request) -> Response | None:
        """websockets' ``process_request``: a response, or None to go on with the upgrade."""
        path = request.path.split("?", 1)[0]
        refused = self._check_host(request, health=path in ("/healthz", "/readyz"))
        if refused is not None:
            if path == "/ws":
                reason = "host_not_served" if refused.status_code == 403 else "bad_header"
                self.observer().upgrade_refused(refused.status_code, reason)
            return refused
        if path == "/ws":
            if not self.is_ready():
                self.observer().upgrade_refused(503)
                return _response(503, "text/plain; charset=utf-8", b"models are loading\n")
            if down := self.down_workers():
                self.observer().upgrade_refused(503)
                return _response(503, "text/plain; charset=utf-8",
                                 f"worker down: {' '.join(down)}; retry shortly\n".encode())
            refusal = self.gate.check_upgrade(connection.remote_address, request)
            if refusal is not None:
                self.observer().upgrade_refused(refusal.status_code)
            return refusal
        if path == "/healthz":
            return _response(200, "text/plain; charset=utf-8", b"ok\n")
        if path == "/readyz":
            if self.is_ready() and (down := self.down_workers()):
                return _response(503, "text/plain; charset=utf-8",
                                 f"worker down: {' '.join(down)}\n".encode())
            if self.is_ready():
                return _response(200, "text/plain; charset=utf-8", b"ready\n")
            return _response(503, "text/plain; charset=utf-8", b"loading\n")
        if path == "/metrics":
            return _response(200, METRICS_CONTENT_TYPE, self.metrics_text())
        if path == "/models":
            body = json.dumps(self.models(), separators=(",", ":")).encode()
            return _response(200, "application/json", body)
        if path == "/voices":
            body = json.dumps({"voices": self.voices()}, separators=(",", ":")).encode()
            return _response(200, "application/json", body)
        if self.captions is not None and path.startswith("/rooms/"):
            answer = self.captions(request)
            if answer is not None:
                return answer
        static = self.static.get(path)
        if static is not None:
            return _response(200, static[0], static[1])
        return _response(404, "text/plain; charset=utf-8", b"not found\n")

    def _check_host(self, request: Request, *, health: bool) -> Response | None:
        """400 for a missing, repeated or malformed ``Host``; 403 for a name this server does
        not serve (DNS rebinding: ``transport.hosts``). Health checks answer any name."""
        try:
            value = single_header(request.headers, "Host")
            if value is None:
                raise HeaderError("no Host header")
            name, _ = parse_host(value)
        except HeaderError as exc:
            return _response(400, "text/plain; charset=utf-8", f"{exc}\n".encode())
        if health or self.hosts.allows(name):
            return None
        log.info("request refused: host not served")
        return _response(
            403, "text/plain; charset=utf-8",
            b"host not served (the operator can add it with --allow-host)\n",
        )
