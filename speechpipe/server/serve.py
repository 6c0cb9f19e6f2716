"""``speechpipe serve``: the live server on one port, models loaded once per process.

The port opens at once (``/healthz`` answers, ``/readyz`` says 503); the pipeline loads in a
thread and is warmed with a dummy inference; only then does ``/readyz`` turn 200 and ``/ws``
accept sessions. Each session gets its own stages on the shared models.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import errno
import logging
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from speechpipe.config import MODEL_ALIASES, Alias, add_aliases, apply_aliases, groups_of
from speechpipe.errors import InputError, SessionError, echoed
from speechpipe.server.options import LoadOptions

# The server's machinery (the WebSocket server, metrics, load control) is imported where the
# server is built, not here: every command's parser reads this module for `serve`'s flags
if TYPE_CHECKING:
    from speechpipe.cluster.node import ClusterNode, ClusterOptions
    from speechpipe.config import Config, PipelineOptions
    from speechpipe.server.tracing import SessionTracing
    from speechpipe.session import Pipeline
    from speechpipe.stages.request import SessionRequest
    from speechpipe.transport.limits import ServerLimits
    from speechpipe.transport.session_api import LiveSession

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
        from speechpipe.server.load_control import LoadControl
        from speechpipe.server.metrics import ServerMetrics
        from speechpipe.transport.websocket_server import SpeechServer

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
        self.server.routes.down_workers = self.down_workers
        self.server.routes.models = self.models
        self._models: tuple[float, dict[str, Any]] | None = None  # GET /models, like voices
        self._worker_metrics = False

    def down_workers(self) -> list[str]:
        """The required shared workers whose breaker is open (``/readyz`` is 503 meanwhile;
        ``/healthz`` stays a liveness check)."""
        if self.pipeline is None or not self._ready:
            return []
        return [w.name for w in self.pipeline.worker_health() if w.required and w.down]

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

    def models(self) -> dict[str, Any]:
        """``GET /models``: the target languages ``--mt auto`` reaches (``sources``: the
        spoken languages, ``*`` for any of Whisper's) and the installed MT pairs, by name and
        languages only; read at most every ``VOICES_TTL_S``."""
        from speechpipe.errors import SpeechpipeError
        from speechpipe.models.mt.registry import registered_mt_models
        from speechpipe.models.mt.routes import installed_pairs

        now = time.monotonic()
        if self._models is None or now - self._models[0] >= VOICES_TTL_S:
            try:
                entries = registered_mt_models()
            except SpeechpipeError:
                entries = {}
            targets: dict[str, Any] = {"en": {"sources": ["*"], "route": "whisper"}}
            for target, sources in installed_pairs(entries).items():
                if target == "en":
                    continue
                pivot = "*" in sources or "en" in sources  # Whisper's English, then the pair
                targets[target] = {"sources": ["*"] if pivot else sources,
                                   "route": "pivot" if pivot else "text"}
            from speechpipe.models.mt.backends import backend_pairs

            rule_based = backend_pairs()  # the other backends' (Apertium's): (backend, hop)
            for (source, target) in sorted(rule_based):
                if target == "en" or target in targets and targets[target]["sources"] == ["*"]:
                    continue
                if ("en", target) in rule_based:  # Whisper's English, then the backend's pair
                    targets[target] = {"sources": ["*"], "route": "pivot"}
                else:
                    entry = targets.setdefault(target, {"sources": [], "route": "text"})
                    entry["sources"] = sorted({*entry["sources"], source})
            pairs = [{"name": name, "family": e.get("family"),
                      "source_langs": e.get("source_langs"), "target_langs": e.get("target_langs")}
                     for name, e in sorted(entries.items())]
            pairs += [{"name": hop, "family": family, "source_langs": [source],
                       "target_langs": [target]}
                      for (source, target), (family, hop) in sorted(rule_based.items())]
            self._models = (now, {"targets": targets, "pairs": pairs})
        return self._models[1]

    def session(self, request: SessionRequest) -> AbstractAsyncContextManager[LiveSession]:
        """A session for ``request`` (refused while the models load)."""
        if self.pipeline is None or not self._ready:
            raise SessionError("models are still loading", code="not_ready")
        from speechpipe.server.observe import ObservedSession

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
        if not self._worker_metrics:  # the workers' breakers and deadlines on /metrics
            from speechpipe.server.worker_metrics import WorkerCollector

            self.metrics.registry.register(WorkerCollector(self.pipeline.worker_health))
            from speechpipe.server.model_metrics import ModelMemoryCollector

            # the tests' scripted pipeline (tests/scripted_serve.py) has no ASR model
            engine = getattr(self.pipeline, "engine", None)
            if engine is not None:
                self.metrics.registry.register(ModelMemoryCollector(engine))
            self._worker_metrics = True
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
    try:
        await app.start()
    except (OSError, OverflowError) as exc:  # gaierror is an OSError
        raise bind_error(host, port, exc) from None
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
            if app.pipeline is not None:
                # which decoder runs, on which kernel: before "ready", so the benches that
                # start a server find it once it is ready (bench/server_process.py)
                from speechpipe.decoder_path import (
                    SERVER_PREFIX,
                    describe_decoders,
                    pipeline_decoder_paths,
                )

                print(SERVER_PREFIX + describe_decoders(pipeline_decoder_paths(app.pipeline)),
                      file=sys.stderr, flush=True)
            print("speechpipe: ready", file=sys.stderr, flush=True)
            from speechpipe.machine import describe_cpu

            print(f"speechpipe: CPU {describe_cpu()}", file=sys.stderr, flush=True)
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

    if app.load_control is not None and node.options.capacity <= 0:  # calibrated
        node.options = dataclasses.replace(node.options, capacity=app.load_control.gate.capacity)
    rooms = app.server.rooms  # a room lives on one node; the ledger says which
    node.rooms_report = rooms.registry.report
    rooms.locate = node.room_url
    await node.start()
    cluster = node.options
    print(f"speechpipe: joined the cluster at {cluster.address} as {cluster.name} "
          f"(capacity {cluster.capacity})", file=sys.stderr, flush=True)


async def _close_drained(app: ServerApp, node: ClusterNode) -> None:
    """Drain finished (or its deadline passed): leave; close what still runs with 4021."""
    from speechpipe.transport.codes import CloseCode, ErrorCode
    from speechpipe.transport.protocol import encode_error

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


def _port(text: str) -> int:
    """``--port``: a TCP port number, 0 (any free port) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65_535:
        raise argparse.ArgumentTypeError(f"a port is 0 (any free one) to 65535, got {value}")
    return value


def bind_error(host: str, port: int, exc: BaseException) -> InputError:
    """What failed when the server could not listen on ``host``:``port``, in one line."""
    where = f"{host}:{port}"
    if isinstance(exc, socket.gaierror):
        return InputError(f"--host {host}: not an address or a name this machine can resolve "
                          f"({exc.strerror}); e.g. 127.0.0.1, or 0.0.0.0 for every interface")
    errno_ = getattr(exc, "errno", None)
    if errno_ == errno.EADDRINUSE:
        return InputError(f"{where}: address already in use (another server is listening "
                          "there; choose another --port, or --port 0 for any free one)")
    if errno_ == errno.EADDRNOTAVAIL:
        return InputError(f"--host {host}: not an address of this machine (e.g. 127.0.0.1, "
                          "or 0.0.0.0 for every interface)")
    if errno_ == errno.EACCES:
        return InputError(f"{where}: permission denied (ports below 1024 need privileges; "
                          "choose --port 1024 or above)")
    detail = getattr(exc, "strerror", None) or str(exc)
    return InputError(f"{where}: cannot listen there ({detail})")


def _grace(text: str) -> float:
    value = float(text)
    if not 0 <= value < 3600:  # nan and inf included
        raise argparse.ArgumentTypeError(f"not a number of seconds in [0, 3600): {text!r}")
    return value


# Each a shorthand of one leaf of the tree (``speechpipe.config.Alias``); the security and
# quota flags are ``speechpipe.server.security.SECURITY_ALIASES``.
LIMITS_ALIASES = (
    Alias("--max-listeners", "rooms.max_listeners",
          "room listeners this server serves at most, over every room (0: no limit)", type=int),
    Alias("--max-listeners-per-room", "rooms.max_listeners_per_room",
          "listeners one room takes at most (0: no limit)", type=int),
    Alias("--token", "limits.token", "require this token in every 'start' message"),
    Alias("--start-timeout", "limits.start_timeout_s",
          "seconds a connection may wait before sending 'start'", type=float),
    Alias("--webrtc-timeout", "limits.webrtc_connect_timeout_s",
          "seconds for a WebRTC peer's ICE + DTLS to complete", type=float),
    Alias("--shutdown-grace", "limits.shutdown_grace_s",
          "on SIGTERM/SIGINT: seconds sessions get to close before their connections are "
          "dropped (keep it under the 10 s container runtimes wait before SIGKILL)",
          type=_grace, metavar="S"),
)
LOAD_ALIASES = (
    Alias("--capacity", "admission.capacity",
          "sessions held at once; more wait in line or are refused (none: estimated at "
          "start-up by a short calibration)", type=int),
    Alias("--max-queue", "admission.max_queue", "sessions that may wait for a slot", type=int),
    Alias("--max-queue-wait", "admission.max_wait_s",
          "refuse (1013) when the estimated wait is longer, in seconds", type=float),
    Alias("--per-client-sessions", "admission.per_client",
          "capacity slots (active + waiting) per client address; 0 = no limit (none: half "
          "the capacity, rounded up, for addresses other than loopback)", type=int),
    Alias("--no-degrade", "load.degrade_enabled", "never step down the degrade ladder",
          switch=False),
)
CLUSTER_ALIASES = (
    Alias("--cluster", "cluster.address",
          "join the Ray cluster at HEAD:PORT as one node (docs/scaling.md)", metavar="HEAD:PORT"),
    Alias("--public-url", "cluster.public_url",
          "this node's /ws URL as clients reach it (sent in redirects)"),
    Alias("--drain-deadline", "cluster.drain_deadline_s",
          "seconds a drained node lets sessions finish", type=float),
    Alias("--cluster-lease", "cluster.lease_s",
          "seconds without a heartbeat before the ledger counts a node lost (set by the node "
          "that creates the ledger)", type=float),
    Alias("--resume-window", "cluster.resume_window_s",
          "seconds a lost session may resume ahead of the line (set by the node that creates "
          "the ledger)", type=float),
)


def serve_aliases() -> tuple[Alias, ...]:
    """Every shorthand flag of ``serve`` (and ``config``)."""
    from speechpipe.server.security import SECURITY_ALIASES

    return (*MODEL_ALIASES, *LIMITS_ALIASES, *SECURITY_ALIASES, *LOAD_ALIASES,
            *CLUSTER_ALIASES)


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``speechpipe serve``'s arguments to ``parser``."""
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=8765,
                        help="port (default 8765; 0 = any free port)")
    add_aliases(parser, (*MODEL_ALIASES, *LIMITS_ALIASES))
    parser.add_argument("--no-webrtc", action="store_true", help="refuse WebRTC offers")
    parser.add_argument("--otlp-endpoint", default=None, metavar="URL",
                        help="send one OpenTelemetry trace per session to this OTLP/HTTP "
                             "endpoint, e.g. http://127.0.0.1:4318/v1/traces (off by default; "
                             "needs speechpipe[otel])")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="GROUP.FIELD=VALUE",
                        help="override an option (repeatable), e.g. asr.step_s=1.5 or "
                             f"admission.max_queue=8; groups: {groups_of('pipeline')}, "
                             f"{groups_of('server')}; `speechpipe config` lists every option")
    parser.add_argument("--config", default=None, metavar="FILE",
                        help="read options from this TOML file, in the shape `speechpipe "
                             "config` prints (flags and --set override it)")
    from speechpipe.server.security import add_security_arguments

    add_security_arguments(parser)  # auth, origins, quotas, keepalive, --log-content
    add_aliases(parser.add_argument_group("peak load (admission, degrade ladder)"),
                LOAD_ALIASES)
    add_aliases(parser.add_argument_group("cluster (Ray; pip install 'speechpipe[cluster]')"),
                CLUSTER_ALIASES)
    parser.set_defaults(handler=serve_main)


def serve_config(args: argparse.Namespace) -> Config:
    """``serve``'s configuration tree: the defaults, then the flags, then ``--set``; then the
    auth secret (never a leaf) and the check of the allowed origins and hosts."""
    from speechpipe.config import Config, apply_overrides
    from speechpipe.server.security import security_limits

    config = Config()
    if getattr(args, "config", None):
        from speechpipe.config_file import load_config_file

        config = load_config_file(args.config, config)
    config = apply_aliases(config, args, serve_aliases())
    config = apply_overrides(config, getattr(args, "overrides", ()) or ())
    server = config.server
    return dataclasses.replace(
        config, server=dataclasses.replace(server, limits=security_limits(args, server.limits)))


def serve_options(
    args: argparse.Namespace,
) -> tuple[PipelineOptions, ServerLimits, LoadOptions]:
    """The pipeline options, server limits and load options of ``serve`` (``serve_config``)."""
    config = serve_config(args)
    return config.pipeline, config.server.limits, config.server.load


def cluster_options(config: Config) -> ClusterOptions | None:
    """The tree's ``cluster`` group as this node's ``ClusterOptions`` (None: no ``--cluster``);
    ``InputError`` (exit 2) when the settings do not fit, ``SystemExit`` without Ray."""
    settings = config.server.cluster
    if not settings.address:
        return None
    from speechpipe.cluster.node import ClusterOptions, cluster_secret, connect_ray

    if not settings.public_url:
        raise InputError("--cluster needs --public-url (this node's ws:// URL)")
    if ":" not in settings.address:
        raise InputError(f"--cluster wants HEAD:PORT, got {settings.address!r}")
    if not settings.public_url.startswith(("ws://", "wss://")):
        raise InputError("--public-url must start with ws:// or wss://")
    try:
        import ray  # noqa: F401  (fail before loading models when Ray is missing)
    except ImportError:
        connect_ray(settings.address)  # raises SystemExit with what to install
    from speechpipe.cluster.ledger_core import LedgerOptions

    admission = config.server.load.admission
    return ClusterOptions(
        address=settings.address,
        public_url=settings.public_url,
        capacity=admission.capacity or 0,  # 0: the calibrated capacity, once loaded
        drain_deadline_s=settings.drain_deadline_s,
        secret=cluster_secret(),  # from the environment: never on the command line
        ledger=LedgerOptions(max_queue=admission.max_queue, max_wait_s=admission.max_wait_s,
                             per_client=admission.per_client or 0,  # explicit only
                             expected_session_s=admission.expected_session_s,
                             min_retry_s=admission.min_retry_s, lease_s=settings.lease_s,
                             resume_window_s=settings.resume_window_s,
                             per_token=config.server.limits.quotas.max_sessions_per_token or 0),
    )


def check_room_mt(spec: str) -> None:
    """``rooms.mt``, checked before the models load as ``translate --mt`` is: empty (rooms
    into languages other than English use ``--mt auto``'s route) or ``ct2:NAME_OR_PATH`` of a
    registered model or a folder; anything else is ``InputError`` (exit 2) with what to set."""
    if not spec:
        return
    if not spec.startswith("ct2:"):
        raise InputError(f"rooms.mt={echoed(spec, quote=False)}: name a text MT model as "
                         "ct2:NAME_OR_PATH (e.g. --set rooms.mt=ct2:opus-en-de), or leave it "
                         "empty for the installed "
                         "pairs (`speechpipe models list`)")
    from speechpipe.models.mt.registry import resolve_mt_model

    try:
        resolve_mt_model(spec)
    except InputError as exc:
        raise InputError(f"rooms.mt={echoed(spec, quote=False)}: {exc}") from None


def serve_main(args: argparse.Namespace) -> int:
    """``speechpipe serve``: run until SIGINT/SIGTERM."""
    config = serve_config(args)
    options, limits, load = config.pipeline, config.server.limits, config.server.load
    check_room_mt(limits.rooms.mt)  # like translate's --mt: refused before the models load
    otlp = getattr(args, "otlp_endpoint", None)
    if otlp is not None:  # a bad URL or a missing extra fails now, with one line
        from speechpipe.server.tracing import check_otlp_endpoint, require_otel

        check_otlp_endpoint(otlp)
        require_otel()
    cluster = cluster_options(config)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_server(args.host, args.port, options, limits=limits,
                               webrtc=not args.no_webrtc,
                               load=load, cluster=cluster, otlp_endpoint=otlp))
    return 0
