"""The shared ASR worker: micro-batches Whisper requests from every session on one thread.

::

    session A ─┐ submit(request, priority, deadline)
    session B ─┼──► queue ──► worker thread: program.run_batch(most urgent + its bucket)
    session C ─┘      ▲  replace / withdraw a queued partial       │
                      └──────────── futures resolved ◄────────────┘

- **Window**: when every other worker is busy, a free worker lets the first request wait up
  to ``window_s`` for others (or until ``max_batch`` are queued); requests that queued while
  the workers were busy go into the next call at once. While other workers are idle there is
  no window and no grouping beyond what they cannot take: parallel calls on idle cores are
  faster than one batched call (``docs/design.md``).
- **Grouping costs latency on CPU**: the encoder does not get cheaper per item in a batch,
  only the decoder does, and every member waits for the whole call. So a bucket
  is grouped only when ``group_min_queue`` requests wait (a backlog of about two calls per
  worker); below that, calls run one request each.
- **Order**: each call takes the most urgent request — priority class first (live before
  replay/bulk), then the earliest deadline (``decode_deadline_s``: finals, and the partials
  of an utterance with nothing committed yet, get a shorter one than partials that only
  refresh tentative text), then arrival — together with the other queued requests of its
  *encode bucket* (equal canonical length: the only ones that batch exactly, see
  ``whisper_engine``), up to ``max_batch``.
- **Stale work is dropped, not computed**: ``replace(old, new)`` swaps a still-queued partial
  for a newer request of the same utterance (the new one keeps the old one's place in line;
  the old caller gets ``Superseded``); ``withdraw`` drops one; a request whose caller was
  cancelled (session gone) is skipped. Finals are never replaced or withdrawn.
- **Beams when there is time**: a partial dispatched while ``greedy_partials_backlog`` other
  requests still wait is decoded greedy (``greedy_partials`` counts them); decodes that
  commit everything keep their beam.
- **Errors** fail only the requests that caused them (``WorkerError``); the thread goes on.
- **Deadlines and a breaker** (``models.workers.guard``): each engine call has a deadline from
  the measured p99 of recent calls; a call past it fails its requests with ``WorkerTimeout``
  and a new thread takes the stuck one's place (the stuck one exits when, if ever, its call
  returns). Repeated failures open the breaker: new requests fail at once with
  ``WorkerUnavailable`` until a probe succeeds, and ``/readyz`` says unready meanwhile.
  A hang *inside* CTranslate2 also holds one of its ``workers`` inter-threads: the
  replacement thread runs on the others (one worker: it waits for that one).
- ``BatchOptions(enabled=False)`` runs one request per engine call: the no-batching baseline.
- ``workers`` threads take calls concurrently (one CTranslate2 thread each), so a batch never
  waits for another session's long one to finish.
- **The urgent lane** (``models.workers.asr_lanes``; with an ``urgent_engine``): ``urgent_workers``
  more threads, on a model of their own, take only the decodes that commit and (with
  ``urgent_first_words``, the default) an utterance's first words (``urgent_classes``),
  while the ``workers`` threads and their model's CTranslate2 threads run at
  ``background_nice``: those no longer wait for a running partial call to end, the kernel
  lets them overtake. The usual workers still take them when no urgent thread is free to.

Thread-safety: ``submit``/``replace``/``withdraw`` may be called from any thread (the event
loop, normally); every queue change happens under one lock, and a queued entry's future is
always pending or cancelled, never running.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from speechpipe.errors import SpeechpipeError, Superseded, WorkerError, WorkerUnavailable
from speechpipe.models.whisper.engine import WhisperEngine, WhisperRequest, WhisperResult
from speechpipe.models.workers import faults
from speechpipe.models.workers.asr_lanes import lower_priority, lower_this_thread
from speechpipe.models.workers.batch_options import BatchOptions
from speechpipe.models.workers.guard import LatencyBudget, WorkerGuard
from speechpipe.stages.decode_program import program_over

__all__ = [
    "AsrBatcher",
    "BatchRunner",
    "batch_runner",
    "BatchObserver",
    "BatchOptions",
    "BatchStats",
    "SessionAsr",
    "PRIORITY_LIVE",
    "PRIORITY_REPLAY",
    "decode_deadline_s",
    "urgency",
    "URGENCIES",
]

log = logging.getLogger("speechpipe.batching")

PRIORITY_LIVE = 0
PRIORITY_REPLAY = 1
JOIN_TIMEOUT_S = 60.0  # longest an engine call in progress may delay close()
MAX_STUCK_THREADS = 4  # stuck threads replaced at most; beyond, the breaker stays open


def decode_deadline_s(request: WhisperRequest, options: BatchOptions) -> float:
    """How soon ``request`` should be computed (seconds after it queued): a final (or any
    decode that commits) ``final_deadline_s``; a partial of an utterance with nothing
    committed yet (``request.opening``: the listener is waiting for its first words)
    ``opening_deadline_s``, just after; a partial that only refreshes tentative text
    ``partial_deadline_s``. Earliest deadline first, so in a burst (sessions starting on the
    hour) every final, then every session's first words go ahead of refreshes, and a
    refresh that has waited the difference still gets its turn."""
    return {"commit": options.final_deadline_s, "first_words": options.opening_deadline_s,
            "refresh": options.partial_deadline_s}[urgency(request)]


URGENCIES = ("commit", "first_words", "refresh")


def urgent_classes(options: BatchOptions) -> frozenset[str]:
    """The ``urgency`` classes the urgent lane takes (``asr_lanes``): the decodes that
    commit; with ``urgent_first_words``, an utterance's first words too."""
    return frozenset({"commit", "first_words"} if options.urgent_first_words else {"commit"})


def urgency(request: WhisperRequest) -> str:
    """Which of the three classes ``decode_deadline_s`` serves ``request`` as: ``commit`` (a
    final, pause or cut decode: what the listener hears at the end of a phrase waits for
    it), ``first_words`` (a partial of an utterance with nothing committed yet) or
    ``refresh`` (a partial that only updates tentative text)."""
    if not request.partial:
        return "commit"
    return "first_words" if request.opening else "refresh"


class BatchObserver(Protocol):
    """Hooks for the app layer's metrics (called on the worker thread)."""

    def batch_done(self, requests: int, waits: list[float], seconds: float,
                   urgencies: Sequence[str] = (), lane: str = "usual") -> None:
        """A batch of ``requests`` ran in ``seconds`` after these queue waits (and these
        ``urgency`` classes, one per wait) on a usual worker or the ``urgent`` lane."""
        ...

    def dropped(self, reason: str) -> None:
        """A request was dropped for ``reason``."""
        ...


@dataclass
class BatchStats:
    """Counters (written by the worker thread, read anywhere; ints and floats only)."""

    submitted: int = 0
    completed: int = 0
    failed: int = 0
    superseded: int = 0
    withdrawn: int = 0
    cancelled: int = 0
    engine_calls: int = 0
    batched_requests: int = 0  # requests summed over engine calls
    busy_s: float = 0.0  # time the worker spent in engine calls
    wait_ewma_s: float = 0.0  # queue wait of recent dispatched requests (EWMA)
    max_batch_seen: int = 0
    greedy_partials: int = 0  # partials decoded greedy because others waited
    urgent_calls: int = 0  # engine calls the urgent lane ran

    @property
    def mean_batch(self) -> float:
        """Requests per engine call on average."""
        return self.batched_requests / self.engine_calls if self.engine_calls else 0.0


@dataclass(eq=False)
class _Entry:
    request: WhisperRequest
    priority: int
    deadline: float
    arrival: float  # when the caller first queued (kept when replaced)
    seq: int
    bucket: int
    future: concurrent.futures.Future[WhisperResult] = field(
        default_factory=concurrent.futures.Future
    )

    def urgency(self) -> tuple[int, float, int]:
        return (self.priority, self.deadline, self.seq)


class BatchRunner(Protocol):
    """What a worker thread calls with a batch (one encode bucket): ``results[i]`` is request
    i's result or the exception that failed it."""

    def run_batch(self, requests: Sequence[WhisperRequest]) -> list[WhisperResult | Exception]:
        ...


def batch_runner(engine: WhisperEngine | BatchRunner) -> BatchRunner:
    """A Whisper engine is run through the decode program (``stages.decode_program``: its
    passes, then the second decodes the requests ask for: the language check, coverage
    recovery); anything else decodes whole requests itself (a scripted engine) and runs
    as it is."""
    runner: BatchRunner = program_over(engine)
    return runner


class AsrBatcher:
    """``await batcher.recognize(request)``; ``batcher.client(priority)`` per session. Each
    engine call runs a batch through ``batch_runner(engine)``."""

    def __init__(
        self,
        engine: WhisperEngine,
        options: BatchOptions | None = None,
        *,
        observer: BatchObserver | None = None,
        clock: Callable[[], float] = time.monotonic,
        guard: WorkerGuard | None = None,
        urgent_engine: WhisperEngine | None = None,
    ) -> None:
        self.engine = engine
        self.guard = guard or WorkerGuard(
            "asr", required=True, budget=LatencyBudget(floor_s=5.0, ceiling_s=30.0))
        self.options = options or BatchOptions()
        self.observer = observer
        self.stats = BatchStats()
        self._clock = clock
        self._cond = threading.Condition()
        self._queue: list[_Entry] = []
        self._queued: dict[int, _Entry] = {}  # id(request) -> its queued entry
        self._seq = itertools.count()
        self._closed = False
        self._idle = {False: 0, True: 0}  # worker threads waiting for work, by lane (urgent?)
        self._retired: set[threading.Thread] = set()  # stuck past a deadline, replaced
        self.last_dispatch = 0.0  # clock time the latest engine call began (drills: recovery)
        self.urgent_engine = urgent_engine if self.options.urgent_workers else None
        self._runners = {False: batch_runner(engine), True: batch_runner(
            self.urgent_engine if self.urgent_engine is not None else engine)}
        self._urgent = urgent_classes(self.options)
        urgent = self.options.urgent_workers if self.urgent_engine is not None else 0
        if urgent:  # the usual workers' CTranslate2 threads go below the urgent lane's
            lower_priority(engine.native_threads, self.options.background_nice)
        self._threads: list[threading.Thread] = []
        for lane, count in ((False, self.options.workers), (True, urgent)):
            for _ in range(count):
                self._start_thread(lane)

    # -- submitting ---------------------------------------------------------------------
    def submit(
        self, request: WhisperRequest, *, priority: int = PRIORITY_LIVE,
        deadline_s: float | None = None,
    ) -> concurrent.futures.Future[WhisperResult]:
        """Queue a request from any thread; returns its future."""
        now = self._clock()
        entry = self._entry(request, priority, deadline_s, now, now, next(self._seq))
        try:
            self.guard.admit()  # the breaker: refused at once while the worker is down
        except WorkerUnavailable as exc:
            entry.future.set_exception(exc)
            return entry.future
        with self._cond:
            if self._closed:
                entry.future.set_exception(WorkerError("the ASR worker is shut down"))
                return entry.future
            self._enqueue(entry)
        return entry.future

    async def recognize(
        self, request: WhisperRequest, *, priority: int = PRIORITY_LIVE,
        deadline_s: float | None = None,
    ) -> WhisperResult:
        """Run a request through the shared worker and await its result."""
        return await asyncio.wrap_future(
            self.submit(request, priority=priority, deadline_s=deadline_s)
        )

    def replace(
        self, old: WhisperRequest, new: WhisperRequest, *, priority: int = PRIORITY_LIVE,
        deadline_s: float | None = None,
    ) -> concurrent.futures.Future[WhisperResult] | None:
        """Supersede ``old`` by ``new`` if ``old`` is a partial still waiting in the queue:
        ``new`` takes its place in line and ``old``'s caller gets ``Superseded``. Returns
        ``new``'s future, or None when ``old`` is already running or done (nothing changed)."""
        with self._cond:
            entry = self._queued.get(id(old))
            if entry is None or not old.partial or self._closed:
                return None
            self._remove(entry)
            self.stats.superseded += 1
            _fail(entry.future, Superseded("a newer request for this utterance replaced it"))
            now = self._clock()
            newer = self._entry(new, priority, deadline_s, now, entry.arrival, entry.seq)
            newer.deadline = min(newer.deadline, entry.deadline)  # its place in line
            self._enqueue(newer)
        if self.observer is not None:
            self.observer.dropped("superseded")
        return newer.future

    def withdraw(self, old: WhisperRequest) -> bool:
        """Drop ``old`` if it is a partial still waiting (its caller gets ``Superseded``)."""
        with self._cond:
            entry = self._queued.get(id(old))
            if entry is None or not old.partial:
                return False
            self._remove(entry)
            self.stats.withdrawn += 1
            _fail(entry.future, Superseded("withdrawn before it was computed"))
        if self.observer is not None:
            self.observer.dropped("withdrawn")
        return True

    def client(self, priority: int = PRIORITY_LIVE) -> SessionAsr:
        """A per-session view of the worker with a fixed priority."""
        return SessionAsr(self, priority)

    # -- state ----------------------------------------------------------------------------
    @property
    def queue_depth(self) -> int:
        """Requests waiting now."""
        with self._cond:
            return len(self._queue)

    def oldest_wait(self) -> float:
        """Seconds the longest-waiting queued request has waited (0 when the queue is empty)."""
        with self._cond:
            if not self._queue:
                return 0.0
            return max(0.0, self._clock() - min(e.arrival for e in self._queue))

    def warm_up(self, timeout_s: float = 120.0) -> None:
        """Blocking (call from a thread): two requests of one bucket through the worker
        thread, so its first batched call is not a client's; and a commit, which the urgent
        lane takes when there is one."""
        import numpy as np

        from speechpipe.models.whisper.engine import DecodeTask

        audio = (np.random.default_rng(1).standard_normal(16_000) * 0.01).astype(np.float32)
        tasks = (DecodeTask("transcribe"), DecodeTask("translate"))
        measured = self.guard.budget.measured()
        futures = [self.submit(WhisperRequest(audio=audio[: n], language="en", tasks=tasks,
                                              max_new_tokens=8, partial=True))
                   for n in (16_000, 12_000)]
        futures.append(self.submit(WhisperRequest(audio=audio, language="en", tasks=tasks,
                                                  max_new_tokens=8)))
        for future in futures:
            future.result(timeout=timeout_s)
        self.guard.budget.restore(measured)  # 1 s and 8 tokens: not what real calls cost

    def close(self, timeout_s: float = JOIN_TIMEOUT_S) -> None:
        """Stop accepting work (queued requests fail with ``WorkerError``) and join the worker
        threads: a call in progress finishes first. Idempotent; blocking.

        Joining matters at process exit: a worker thread that outlives its owner may drop the
        last reference to the engine, so CTranslate2's destructor would run on that thread
        during interpreter shutdown, which aborts the process (SIGABRT, "terminate called
        without an active exception")."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        current = threading.current_thread()
        for thread in self._threads:
            if thread is not current and thread.is_alive():
                thread.join(timeout_s)
                if thread.is_alive():
                    log.warning("ASR worker thread %s still busy after %.0f s",
                                thread.name, timeout_s)

    @property
    def running_threads(self) -> int:
        """Number of worker threads still alive."""
        return sum(thread.is_alive() for thread in self._threads)

    async def aclose(self) -> None:
        """``close()`` for async callers: the threads are joined off the event loop (a call
        in progress may take a while), so other sessions go on meanwhile."""
        await asyncio.to_thread(self.close)

    async def __aenter__(self) -> AsrBatcher:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- internals ------------------------------------------------------------------------
    def _entry(
        self, request: WhisperRequest, priority: int, deadline_s: float | None, now: float,
        arrival: float, seq: int,
    ) -> _Entry:
        if deadline_s is None:
            deadline_s = decode_deadline_s(request, self.options)
        return _Entry(
            request=request,
            priority=priority,
            deadline=now + deadline_s,
            arrival=arrival,
            seq=seq,
            bucket=self.engine.encode_samples(len(request.audio)),
        )

    def _enqueue(self, entry: _Entry) -> None:
        self._queue.append(entry)
        self._queued[id(entry.request)] = entry
        self.stats.submitted += 1
        self._cond.notify_all()

    def _remove(self, entry: _Entry) -> None:
        self._queue.remove(entry)
        self._queued.pop(id(entry.request), None)

    def _serve(self, urgent: bool) -> None:
        me = threading.current_thread()
        if self.urgent_engine is not None and not urgent:
            lower_this_thread(self.options.background_nice)  # and its native decoder
        while True:
            batch = self._next_batch(urgent)
            if batch is None:
                return
            self._run(batch, urgent)
            with self._cond:
                if me in self._retired:  # replaced while its call was stuck: leave
                    self._retired.discard(me)
                    return

    def _abandon(self, batch: list[_Entry], thread: threading.Thread, error: WorkerError,
                 urgent: bool) -> None:
        """The watchdog: ``thread``'s call passed its deadline. Fail its requests and start a
        thread in its place (the other queued requests go on at once)."""
        for entry in batch:
            _fail(entry.future, error)
        if self.observer is not None:
            self.observer.dropped("abandoned")
        with self._cond:
            if self._closed:
                return
            stuck = sum(t.is_alive() for t in self._retired)
            if stuck >= MAX_STUCK_THREADS:
                log.error("ASR worker: %d threads stuck already; not starting another", stuck)
                return
            self._retired.add(thread)
            self._start_thread(urgent)
        self.guard.replaced()

    def _start_thread(self, urgent: bool) -> None:
        """Start a worker thread of a lane (the urgent one, or the usual workers)."""
        name = f"asr-batcher-{'urgent-' if urgent else ''}{len(self._threads)}"
        thread = threading.Thread(target=self._serve, args=(urgent,), name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _eligible(self, urgent: bool) -> list[_Entry]:
        """Under the lock: the queued requests a worker of this lane may take. The urgent
        lane takes the ``urgent_classes`` only; the usual workers take anything, but leave
        those to an urgent worker that is free to take them."""
        if self.urgent_engine is None:
            return self._queue
        if urgent:
            return [e for e in self._queue if urgency(e.request) in self._urgent]
        if self._idle[True]:
            return [e for e in self._queue if urgency(e.request) not in self._urgent]
        return self._queue

    def _next_batch(self, urgent: bool = False) -> list[_Entry] | None:
        options = self.options
        with self._cond:
            while True:
                self._idle[urgent] += 1
                try:
                    while not self._eligible(urgent) and not self._closed:
                        self._cond.wait()
                finally:
                    self._idle[urgent] -= 1
                if self._closed:
                    for entry in self._queue:
                        _fail(entry.future, WorkerError("the ASR worker is shut down"))
                    self._queue.clear()
                    self._queued.clear()
                    return None
                # workers that would take the next request at once
                idle_others = self._idle[False] + self._idle[True]
                if options.enabled and options.max_batch > 1 and not idle_others:
                    eligible = self._eligible(urgent)
                    due = min(e.arrival for e in eligible) + options.window_s
                    while 0 < len(eligible) < options.max_batch and not self._closed:
                        remaining = due - self._clock()
                        if remaining <= 0:
                            break
                        self._cond.wait(remaining)
                        eligible = self._eligible(urgent)
                    if self._closed or not eligible:
                        continue
                batch = self._select(workers_free=idle_others + 1, urgent=urgent)
                if batch:
                    if self._queue:  # what is left may now be another lane's to take
                        self._cond.notify_all()
                    return batch

    def _select(self, workers_free: int = 1, urgent: bool = False) -> list[_Entry]:
        """Under the lock: the most urgent request and its bucket's most urgent companions —
        unless free workers can take every queued request in parallel (on CPU cores,
        parallel calls beat one batched call while cores are idle)."""
        for entry in [e for e in self._queue if e.future.cancelled()]:
            self._remove(entry)
            self.stats.cancelled += 1
            if self.observer is not None:
                self.observer.dropped("cancelled")
        eligible = self._eligible(urgent)
        if not eligible:
            return []
        first = min(eligible, key=_Entry.urgency)
        queued = len(self._queue)
        if (self.options.enabled and queued > workers_free
                and queued >= self.options.group_min_queue):
            same = sorted((e for e in eligible if e.bucket == first.bucket),
                          key=_Entry.urgency)[: self.options.max_batch]
        else:
            same = [first]
        chosen = []
        for entry in same:
            self._remove(entry)
            if entry.future.set_running_or_notify_cancel():
                chosen.append(entry)
            else:
                self.stats.cancelled += 1
        backlog = self.options.greedy_partials_backlog
        if backlog and len(self._queue) >= backlog:
            for entry in chosen:
                if entry.request.partial and entry.request.beam_size > 1:
                    entry.request = dataclasses.replace(entry.request, beam_size=1)
                    self.stats.greedy_partials += 1
        return chosen

    def _run(self, batch: list[_Entry], urgent: bool = False) -> None:
        runner = self._runners[urgent]
        start = self._clock()
        waits = [max(0.0, start - e.arrival) for e in batch]
        requests = [e.request for e in batch]
        self.last_dispatch = start
        me = threading.current_thread()
        call = self.guard.start_call(lambda error: self._abandon(batch, me, error, urgent))
        try:
            faults.hit("asr")  # a test seam: a no-op unless a test arms it
            outcomes: list[WhisperResult | Exception] = runner.run_batch(requests)
        except Exception as exc:  # the whole call failed: find the culprit, request by request
            outcomes = ([exc] if len(batch) == 1
                        else [self._run_alone(runner, r) for r in requests])
        seconds = self._clock() - start
        worker_ok = not any(isinstance(o, Exception) and not isinstance(o, SpeechpipeError)
                            for o in outcomes)
        if not self.guard.end_call(call, worker_ok):
            self.stats.failed += len(batch)  # abandoned: the watchdog failed its futures
            return
        stats = self.stats
        stats.engine_calls += 1
        stats.urgent_calls += urgent
        stats.batched_requests += len(batch)
        stats.busy_s += seconds
        stats.max_batch_seen = max(stats.max_batch_seen, len(batch))
        for entry, outcome, wait in zip(batch, outcomes, waits, strict=True):
            stats.wait_ewma_s += 0.2 * (wait - stats.wait_ewma_s)
            if isinstance(outcome, Exception):
                stats.failed += 1
                error = outcome if isinstance(outcome, SpeechpipeError) else WorkerError(
                    f"whisper failed: {type(outcome).__name__}: {outcome}"
                )
                log.warning("ASR request failed: %s", type(outcome).__name__)
                _fail(entry.future, error)
            else:
                stats.completed += 1
                timings = {"asr.wait": wait, **outcome.timings}
                _resolve(entry.future, dataclasses.replace(outcome, timings=timings))
        if self.observer is not None:
            self.observer.batch_done(len(batch), waits, seconds,
                                     [urgency(entry.request) for entry in batch],
                                     lane="urgent" if urgent else "usual")


    @staticmethod
    def _run_alone(runner: BatchRunner, request: WhisperRequest
                   ) -> WhisperResult | Exception:
        try:
            return runner.run_batch([request])[0]
        except Exception as exc:
            return exc


class SessionAsr:
    """One session's handle on the shared worker.

    Calling it is the ASR stage's ``Recognize`` (it returns an already-submitted awaitable);
    ``replace``/``withdraw`` let the stage supersede a partial still waiting in the queue.
    Call from the event loop."""

    def __init__(self, batcher: AsrBatcher, priority: int = PRIORITY_LIVE) -> None:
        self.batcher = batcher
        self.priority = priority

    def __call__(self, request: WhisperRequest) -> Awaitable[WhisperResult]:
        return asyncio.wrap_future(self.batcher.submit(request, priority=self.priority))

    def replace(self, old: WhisperRequest, new: WhisperRequest) -> Awaitable[WhisperResult] | None:
        """Swap a still-queued partial for a newer request of the same utterance."""
        future = self.batcher.replace(old, new, priority=self.priority)
        return None if future is None else asyncio.wrap_future(future)

    def withdraw(self, old: WhisperRequest) -> bool:
        """Drop a still-queued request."""
        return self.batcher.withdraw(old)


def _fail(future: concurrent.futures.Future[WhisperResult], error: BaseException) -> None:
    try:
        future.set_exception(error)
    except concurrent.futures.InvalidStateError:  # the caller cancelled meanwhile
        pass


def _resolve(future: concurrent.futures.Future[WhisperResult], result: WhisperResult) -> None:
    try:
        future.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass
