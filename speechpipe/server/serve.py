"""``speechpipe serve``: the live server on one port, models loaded once per process.

The port opens at once (``/healthz`` answers, ``/readyz`` says 503); the pipeline loads in a
thread and is warmed with a dummy inference; only then does ``/readyz`` turn 200 and ``/ws``
accept sessions. Each session gets its own stages on the shared models.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING

from speechpipe.errors import SessionError
from speechpipe.server.load_control import (
    LoadControl,
    LoadOptions,
    add_load_arguments,
    load_options_from_args,
)
from speechpipe.server.metrics import ServerMetrics
from speechpipe.server.observe import ObservedSession
from speechpipe.transport.session_api import LiveSession, SessionRequest
from speechpipe.transport.websocket_server import ServerLimits, SpeechServer

if TYPE_CHECKING:
    from speechpipe.config import PipelineOptions
    from speechpipe.server.tracing import SessionTracing
    from speechpipe.session import Pipeline

__all__ = ["run_server", "add_serve_arguments", "serve_main", "serve_options", "ServerApp"]

log = logging.getLogger("speechpipe.serve")

VOICES_TTL_S = 10.0  # GET /voices: how long one scan of the voices folders is reused


class ServerApp:
    """The pipeline, the metrics and the server, wired; ``start`` returns once listening."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 8765,
        options: PipelineOptions | None = None,
        *,
        limits: ServerLimits | None = None,
        webrtc: bool = True,
        pipeline: Pipeline | None = None,
        load: LoadOptions | None = None,
        tracing: SessionTracing | None = None,
    ) -> None:
        self.options = options
        self.metrics = ServerMetrics()
        self.tracing = tracing  # OpenTelemetry session traces (server.tracing); None: off
        self.pipeline: Pipeline | None = pipeline
        self._ready = False
        self._voices: tuple[float, list[dict[str, object]]] | None = None  # (scanned at, list)
        # admission control + degrade ladder (speechpipe.server.load_control); None: neither
        self.load_control = None if load is None else LoadControl(load, self.metrics.load)
        self.server = SpeechServer(
            self.session,
            host,
            port,
            is_ready=lambda: self._ready,
            metrics_text=self.metrics.text,
            observer=self.metrics,
            limits=limits,
            webrtc=webrtc,
            capacity=None if self.load_control is None else self.load_control.gate,
            voices=self.voices,
        )

    @property
    def ready(self) -> bool:
        return self._ready

    def voices(self) -> list[dict[str, object]]:
        """The voices clients may choose with ``start.voice`` (``GET /voices``): names and
        languages only, never where the files are. The folders are scanned at most every
        ``VOICES_TTL_S``, so requests cannot make the server read files (or log a broken
        voice) at their own rate; voices added meanwhile appear within that time."""
        from speechpipe.voices.registry import list_voices

        now = time.monotonic()
        if self._voices is None or now - self._voices[0] >= VOICES_TTL_S:
            options = self.pipeline.options if self.pipeline is not None else self.options
            dirs = options.voice_dirs if options is not None else ()
            self._voices = (now, [
                {"name": v.name, "language": v.lang, "locale": v.locale,
                 "sample_rate": v.sample_rate}
                for v in list_voices(dirs)
            ])
        return self._voices[1]

    def session(self, request: SessionRequest) -> AbstractAsyncContextManager[LiveSession]:
        if self.pipeline is None or not self._ready:
            raise SessionError("models are still loading", code="not_ready")
        return ObservedSession(self.pipeline.session(request), self.metrics.listener, request,
                               self.tracing)

    async def start(self) -> None:
        await self.server.start()

    async def load(self) -> None:
        """Load (unless given) and warm the models off the event loop, then turn ready."""
        started = time.monotonic()
        if self.pipeline is None:
            from speechpipe.session import Pipeline

            self.pipeline = await asyncio.to_thread(Pipeline.load, self.options)
        await asyncio.to_thread(self.pipeline.warm_up)
        if self.load_control is not None:
            await self.load_control.start(self.pipeline)  # capacity (maybe calibrated)
        else:
            self.pipeline.whisper.observer = self.metrics.load
        self._ready = True
        self.metrics.set_ready(True)
        log.info("models ready in %.1f s", time.monotonic() - started)

    async def stop(self, *, close_pipeline: bool = True) -> None:
        self._ready = False
        self.metrics.set_ready(False)
        if self.load_control is not None:
            await self.load_control.stop()
        await self.server.stop()
        if self.tracing is not None:  # flushes what is queued, bounded by the export timeout
            await asyncio.to_thread(self.tracing.shutdown)
        if close_pipeline and self.pipeline is not None:
            await asyncio.to_thread(self.pipeline.close)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ServerApp]:
        await self.start()
        try:
            await self.load()
            yield self
        finally:
            await self.stop()


async def run_server(
    host: str,
    port: int,
    options: PipelineOptions | None = None,
    *,
    limits: ServerLimits | None = None,
    webrtc: bool = True,
    stop: asyncio.Event | None = None,
    load: LoadOptions | None = None,
    otlp_endpoint: str | None = None,
) -> None:
    """Serve until ``stop`` is set or SIGINT/SIGTERM arrives; then close every session (1001)."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    app = ServerApp(host, port, options, limits=limits, webrtc=webrtc,
                    load=load or LoadOptions())
    if otlp_endpoint is not None:
        from speechpipe.server.tracing import SessionTracing

        app.tracing = SessionTracing.otlp(
            otlp_endpoint, on_failure=app.metrics.trace_export_failures.inc
        )
    await app.start()
    print(f"speechpipe: listening on http://{host}:{app.server.port}/ (loading models)",
          file=sys.stderr, flush=True)
    try:
        loader = asyncio.create_task(app.load())
        waiter = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({loader, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if loader in done:
            loader.result()  # a model error ends the server with its message
            print("speechpipe: ready", file=sys.stderr, flush=True)
            if app.load_control is not None:
                print(app.load_control.describe(), file=sys.stderr, flush=True)
            await waiter
        else:
            loader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loader
    finally:
        await app.stop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)


def _grace(text: str) -> float:
    value = float(text)
    if not 0 <= value < 3600:  # nan and inf included
        raise argparse.ArgumentTypeError(f"not a number of seconds in [0, 3600): {text!r}")
    return value


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 = any)")
    parser.add_argument("--asr-model", default="whisper-base",
                        help="bundled model name or a CTranslate2 Whisper folder")
    parser.add_argument("--voices-dir", action="append", default=[],
                        help="extra folder with Piper .onnx + .onnx.json voices")
    parser.add_argument("--token", default=None,
                        help="require this token in every 'start' message")
    parser.add_argument("--start-timeout", type=float, default=30.0,
                        help="seconds a connection may wait before sending 'start'")
    parser.add_argument("--webrtc-timeout", type=float, default=15.0,
                        help="seconds for a WebRTC peer's ICE + DTLS to complete")
    parser.add_argument("--no-webrtc", action="store_true", help="refuse WebRTC offers")
    parser.add_argument("--shutdown-grace", type=_grace, default=ServerLimits().shutdown_grace_s,
                        metavar="S",
                        help="on SIGTERM/SIGINT: seconds sessions get to close before their "
                             "connections are dropped (default %(default)s; keep it under "
                             "the 10 s container runtimes wait before SIGKILL)")
    parser.add_argument("--otlp-endpoint", default=None, metavar="URL",
                        help="send one OpenTelemetry trace per session to this OTLP/HTTP "
                             "endpoint, e.g. http://127.0.0.1:4318/v1/traces (off by default; "
                             "needs speechpipe[otel])")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="GROUP.FIELD=VALUE",
                        help="override a pipeline option for every session, e.g. "
                             "asr.step_s=1.5 or batching.group_min_queue=2")
    from speechpipe.server.security import add_security_arguments

    add_security_arguments(parser)  # auth, origins, quotas, keepalive, --log-content
    add_load_arguments(parser)  # --capacity, --no-batching, ... (speechpipe.server.load_control)
    parser.set_defaults(handler=serve_main)


def serve_options(
    args: argparse.Namespace,
) -> tuple[PipelineOptions, ServerLimits, LoadOptions]:
    """The pipeline options (``--set`` applied), server limits and load options of ``serve``."""
    from speechpipe.config import PipelineOptions, with_overrides
    from speechpipe.server.security import security_limits

    options = with_overrides(PipelineOptions(
        asr_model=getattr(args, "asr_model", "whisper-base"),
        voice_dirs=tuple(getattr(args, "voices_dir", ()) or ()),
    ), getattr(args, "overrides", ()) or ())
    limits = security_limits(args, ServerLimits(
        token=args.token,
        start_timeout_s=args.start_timeout,
        webrtc_connect_timeout_s=args.webrtc_timeout,
        shutdown_grace_s=getattr(args, "shutdown_grace", ServerLimits().shutdown_grace_s),
    ))
    options, load = load_options_from_args(args, options)
    return options, limits, load


def serve_main(args: argparse.Namespace) -> int:
    options, limits, load = serve_options(args)
    otlp = getattr(args, "otlp_endpoint", None)
    if otlp is not None:  # a bad URL or a missing extra fails now, with one line
        from speechpipe.server.tracing import check_otlp_endpoint, require_otel

        check_otlp_endpoint(otlp)
        require_otel()
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_server(args.host, args.port, options, limits=limits,
                               webrtc=not args.no_webrtc, load=load, otlp_endpoint=otlp))
    return 0
