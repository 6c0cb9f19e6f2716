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
from speechpipe.stages.request import SessionRequest
from speechpipe.transport.session_api import LiveSession
from speechpipe.transport.websocket_server import ServerLimits, SpeechServer

if TYPE_CHECKING:
    from speechpipe.cluster.node import ClusterNode, ClusterOptions
    from speechpipe.config import Config, PipelineOptions
    from speechpipe.server.tracing import SessionTracing
    from speechpipe.session import Pipeline

__all__ = ["run_server", "add_serve_arguments", "serve_main", "serve_options", "ServerApp"]

log = logging.getLogger("speechpipe.serve")

VOICES_TTL_S = 10.0  # GET /voices: how long one scan of the voices folders is reused
TRACE_FLUSH_MIN_S = 0.25  # at shutdown, the trace flush gets at least this (past the grace)


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
        self._loading: asyncio.Future[None] | None = None  # the load + warm-up thread
        self._stopping = False
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
        """True once the models are loaded and warmed."""
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
        """A session for ``request`` (refused while the models load)."""
        if self.pipeline is None or not self._ready:
            raise SessionError("models are still loading", code="not_ready")
        return ObservedSession(self.pipeline.session(request), self.metrics.listener, request,
                               self.tracing)

    async def start(self) -> None:
        """Listen; returns once the port is bound (models load separately)."""
        await self.server.start()

    async def load(self) -> None:
        """Load (unless given) and warm the models off the event loop, then turn ready."""
        started = time.monotonic()
        self._loading = asyncio.ensure_future(asyncio.to_thread(self._load_blocking))
        await asyncio.shield(self._loading)  # a thread cannot be cancelled: stop() awaits it
        assert self.pipeline is not None
        if self.load_control is not None:
            await self.load_control.start(self.pipeline)  # capacity (maybe calibrated)
        else:
            self.pipeline.whisper.observer = self.metrics.load
        self._ready = True
        self.metrics.set_ready(True)
        log.info("models ready in %.1f s", time.monotonic() - started)

    def _load_blocking(self) -> None:
        if self.pipeline is None:
            from speechpipe.config import PipelineOptions
            from speechpipe.session import Pipeline, apply_process_limits

            options = self.options or PipelineOptions()
            apply_process_limits(options)  # the server owns its process
            self.pipeline = Pipeline.load(options)
        if not self._stopping:  # no warm-up for a server that is already going away
            self.pipeline.warm_up()

    async def stop(self, *, close_pipeline: bool = True) -> None:
        """Stop serving; then (``close_pipeline``) wait out a load still running, join the
        pipeline's workers and release its models on this thread."""
        began = time.monotonic()
        self._stopping = True
        self._ready = False
        self.metrics.set_ready(False)
        if self.load_control is not None:
            await self.load_control.stop()
        await self.server.stop()
        if self.tracing is not None:  # the last spans get what is left of the grace
            left = began + self.server.limits.shutdown_grace_s - time.monotonic()
            await asyncio.to_thread(self.tracing.shutdown, max(left, TRACE_FLUSH_MIN_S))
        if not close_pipeline:
            return
        loading = self._loading
        if loading is not None and not loading.done():
            if self.pipeline is not None:  # a warm-up in progress then fails at once
                await asyncio.to_thread(self.pipeline.stop_workers)
            await asyncio.wait([loading])
        if loading is not None and loading.done() and not loading.cancelled():
            loading.exception()  # load() reported it already, if anyone was waiting
        if self.pipeline is not None:
            await self.pipeline.aclose()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ServerApp]:
        """``start`` and ``load``, then ``stop`` on exit."""
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
    pipeline: Pipeline | None = None,
    cluster: ClusterOptions | None = None,
    otlp_endpoint: str | None = None,
) -> None:
    """Serve until ``stop`` is set or SIGINT/SIGTERM arrives; then close every session (1001).

    ``cluster``: join a Ray cluster as one node once the models are ready
    (``speechpipe.cluster.node``); a drain ends the server."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    app = ServerApp(host, port, options, limits=limits, webrtc=webrtc, pipeline=pipeline,
                    load=(load or LoadOptions()) if pipeline is None else load)
    if otlp_endpoint is not None:
        from speechpipe.server.tracing import SessionTracing

        app.tracing = SessionTracing.otlp(
            otlp_endpoint, on_failure=app.metrics.trace_export_failures.inc
        )
    await app.start()
    print(f"speechpipe: listening on http://{host}:{app.server.port}/ (loading models)",
          file=sys.stderr, flush=True)
    node: ClusterNode | None = None
    if cluster is not None:
        from speechpipe.cluster.node import ClusterNode

        node = ClusterNode(cluster, registry=app.metrics.registry)
        app.server.capacity = node.gate  # before the ledger answers: this node's own capacity
    try:
        loader = asyncio.create_task(app.load())
        waiter = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({loader, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if loader in done:
            loader.result()  # a model error ends the server with its message
            if node is not None:
                await _join_cluster(app, node)
            print("speechpipe: ready", file=sys.stderr, flush=True)
            if app.load_control is not None:
                print(app.load_control.describe(), file=sys.stderr, flush=True)
            if node is not None:
                drained = asyncio.create_task(node.drain_progress())
                await asyncio.wait({waiter, drained}, return_when=asyncio.FIRST_COMPLETED)
                drained.cancel()
                if not waiter.done():
                    await _close_drained(app, node)
                waiter.cancel()
            else:
                await waiter
        else:
            loader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loader
    finally:
        if node is not None:
            await node.stop()  # sessions still here count as lost: they may resume elsewhere
        await app.stop()
        if node is not None:
            with contextlib.suppress(Exception):
                import ray

                ray.shutdown()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)


async def _join_cluster(app: ServerApp, node: ClusterNode) -> None:
    import dataclasses

    if app.load_control is not None and node.options.capacity <= 0:  # calibrated
        node.options = dataclasses.replace(node.options, capacity=app.load_control.gate.capacity)
    await node.start()
    cluster = node.options
    print(f"speechpipe: joined the cluster at {cluster.address} as {cluster.name} "
          f"(capacity {cluster.capacity})", file=sys.stderr, flush=True)


async def _close_drained(app: ServerApp, node: ClusterNode) -> None:
    """Drain finished (or its deadline passed): leave; close what still runs with 4021."""
    from speechpipe.transport.protocol import CloseCode, ErrorCode, encode_error

    await node.stop()
    closed = await app.server.close_sessions(
        CloseCode.NODE_DRAINED, ErrorCode.NODE_DRAINED,
        lambda session: encode_error(
            ErrorCode.NODE_DRAINED,
            "this node was drained: reconnect with start.resume to continue elsewhere",
            fatal=True, resume=session),
    )
    print(f"speechpipe: drained ({closed} sessions closed at the deadline)",
          file=sys.stderr, flush=True)


def _grace(text: str) -> float:
    value = float(text)
    if not 0 <= value < 3600:  # nan and inf included
        raise argparse.ArgumentTypeError(f"not a number of seconds in [0, 3600): {text!r}")
    return value


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``speechpipe serve``'s arguments to ``parser``."""
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 = any)")
    parser.add_argument("--asr-model", default="whisper-base",
                        help="bundled model name or a CTranslate2 Whisper folder")
    parser.add_argument("--voices-dir", action="append", default=[],
                        help="extra folder with Piper .onnx + .onnx.json voices")
    parser.add_argument("--token", default=None,
                        help="require this token in every 'start' message")
    parser.add_argument("--start-timeout", type=float, default=None,
                        help="seconds a connection may wait before sending 'start' "
                             "(limits.start_timeout_s)")
    parser.add_argument("--webrtc-timeout", type=float, default=None,
                        help="seconds for a WebRTC peer's ICE + DTLS to complete "
                             "(limits.webrtc_connect_timeout_s)")
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
                        help="override an option (repeatable), e.g. asr.step_s=1.5 or "
                             "admission.max_queue=8; groups: pipeline, vad, asr, phrases, "
                             "catch_up, batching, text_mt, faithful, limits, quotas, load, "
                             "admission, degrade; `speechpipe config` lists every option")
    from speechpipe.server.security import add_security_arguments

    add_security_arguments(parser)  # auth, origins, quotas, keepalive, --log-content
    add_load_arguments(parser)  # --capacity, --max-queue, ... (speechpipe.server.load_control)
    group = parser.add_argument_group("cluster (Ray; pip install 'speechpipe[cluster]')")
    group.add_argument("--cluster", metavar="HEAD:PORT", default=None,
                       help="join the Ray cluster at HEAD:PORT as one node (docs/scaling.md)")
    group.add_argument("--public-url", default=None,
                       help="this node's /ws URL as clients reach it (sent in redirects)")
    group.add_argument("--drain-deadline", type=float, default=120.0,
                       help="seconds a drained node lets sessions finish (default %(default)s)")
    group.add_argument("--cluster-lease", type=float, default=6.0,
                       help="seconds without a heartbeat before the ledger counts a node lost "
                            "(set by the node that creates the ledger; default %(default)s)")
    group.add_argument("--resume-window", type=float, default=60.0,
                       help="seconds a lost session may resume ahead of the line "
                            "(set by the node that creates the ledger; default %(default)s)")
    # TEST ONLY: serve scripted sessions without models (speechpipe.cluster.scripted)
    parser.add_argument("--scripted-pipeline", action="store_true", help=argparse.SUPPRESS)
    parser.set_defaults(handler=serve_main)


def serve_config(args: argparse.Namespace) -> Config:
    """``serve``'s configuration tree: the defaults, then the flags, then ``--set``."""
    from speechpipe.config import Config, PipelineOptions, ServerOptions, apply_overrides
    from speechpipe.server.security import security_limits

    options = PipelineOptions(
        asr_model=getattr(args, "asr_model", None) or "whisper-base",
        voice_dirs=tuple(getattr(args, "voices_dir", ()) or ()),
    )
    given = {
        "token": getattr(args, "token", None),
        "start_timeout_s": getattr(args, "start_timeout", None),
        "webrtc_connect_timeout_s": getattr(args, "webrtc_timeout", None),
        "shutdown_grace_s": getattr(args, "shutdown_grace", None),
    }
    limits = security_limits(args, ServerLimits(**{k: v for k, v in given.items()
                                                   if v is not None}))
    options, load = load_options_from_args(args, options)
    config = Config(options, ServerOptions(limits=limits, load=load))
    return apply_overrides(config, getattr(args, "overrides", ()) or ())


def serve_options(
    args: argparse.Namespace,
) -> tuple[PipelineOptions, ServerLimits, LoadOptions]:
    """The pipeline options, server limits and load options of ``serve`` (``serve_config``)."""
    config = serve_config(args)
    return config.pipeline, config.server.limits, config.server.load


def cluster_options(args: argparse.Namespace, load: LoadOptions) -> ClusterOptions | None:
    """``--cluster`` and friends; ``SystemExit`` with one line when they do not fit."""
    if not getattr(args, "cluster", None):
        return None
    from speechpipe.cluster.node import ClusterOptions, cluster_secret, connect_ray

    if not args.public_url:
        raise SystemExit("speechpipe: --cluster needs --public-url (this node's ws:// URL)")
    if ":" not in args.cluster:
        raise SystemExit(f"speechpipe: --cluster wants HEAD:PORT, got {args.cluster!r}")
    if not args.public_url.startswith(("ws://", "wss://")):
        raise SystemExit("speechpipe: --public-url must start with ws:// or wss://")
    try:
        import ray  # noqa: F401  (fail before loading models when Ray is missing)
    except ImportError:
        connect_ray(args.cluster)  # raises SystemExit with what to install
    from speechpipe.cluster.ledger_core import LedgerOptions

    admission = load.admission
    return ClusterOptions(
        address=args.cluster,
        public_url=args.public_url,
        capacity=admission.capacity or 0,  # 0: the calibrated capacity, once loaded
        drain_deadline_s=args.drain_deadline,
        secret=cluster_secret(),  # from the environment: never on the command line
        ledger=LedgerOptions(max_queue=admission.max_queue, max_wait_s=admission.max_wait_s,
                             per_client=admission.per_client or 0,  # explicit only
                             expected_session_s=admission.expected_session_s,
                             min_retry_s=admission.min_retry_s, lease_s=args.cluster_lease,
                             resume_window_s=args.resume_window,
                             per_token=limits_per_token(args)),
    )


def limits_per_token(args: argparse.Namespace) -> int:
    """The ``--max-sessions-per-token`` limit; 0 when unset."""
    value = getattr(args, "max_sessions_per_token", None)
    return int(value) if value else 0


def serve_main(args: argparse.Namespace) -> int:
    """``speechpipe serve``: run until SIGINT/SIGTERM."""
    options, limits, load = serve_options(args)
    otlp = getattr(args, "otlp_endpoint", None)
    if otlp is not None:  # a bad URL or a missing extra fails now, with one line
        from speechpipe.server.tracing import check_otlp_endpoint, require_otel

        check_otlp_endpoint(otlp)
        require_otel()
    cluster = cluster_options(args, load)
    pipeline: Pipeline | None = None
    if getattr(args, "scripted_pipeline", False):  # TEST ONLY
        from speechpipe.cluster.scripted import ScriptedPipeline

        if load.admission.capacity is None:
            raise SystemExit("speechpipe: --scripted-pipeline needs --capacity")
        pipeline = ScriptedPipeline()  # type: ignore[assignment]
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_server(args.host, args.port, options, limits=limits,
                               webrtc=not args.no_webrtc,
                               load=None if pipeline is not None else load,
                               pipeline=pipeline, cluster=cluster, otlp_endpoint=otlp))
    return 0
