"""Deadlines and a circuit breaker for a shared worker (ASR batcher, TTS voice, text MT).

Two small pure parts, and a thin shell the workers call:

- ``LatencyBudget``: the deadline of one call, derived from the worker's *measured* call
  times: ``factor`` x their p99 over the last ``window`` calls, clamped to
  ``[floor_s, ceiling_s]`` (before any call was measured: ``ceiling_s``). A call past its
  deadline is abandoned: its callers get ``WorkerTimeout`` and the worker is replaced (a new
  thread takes new work; the stuck one is dropped when, if ever, it returns).
- ``CircuitBreaker``: ``failures`` failures (errors or abandoned calls) within ``window_s``
  open it; while open, new work is refused at once (``WorkerUnavailable``, with a retry hint)
  instead of queueing behind a broken worker. After ``cooldown_s`` it is half-open: one call
  goes through as a probe; its success closes the breaker, its failure opens it again.
  Pure: every method takes ``now``.
- ``WorkerGuard``: one worker's budget, breaker and counters (calls abandoned, restarts,
  refusals), read by ``/readyz`` (a required worker whose breaker is open is "down") and by
  the metrics (``speechpipe.server.worker_metrics``). ``start_call``/``end_call`` bracket a
  call on the worker's thread; one watchdog thread per process abandons a call past its
  deadline (``on_abandon``: the worker fails the call's futures and starts a new thread).
- ``GuardedExecutor``: a one-thread ``concurrent.futures.Executor`` on that shell (the TTS
  and text-MT workers): a stuck thread is retired and a new one serves the same queue, so
  work queued behind the stuck call runs on the new thread. Its queue is ordered by each
  job's due time (``submit_due``; ``submit`` is due now), earliest first, ties in order of
  submission: plain ``submit`` calls alone are served first in, first out.

See docs/design.md "When a shared worker fails".
"""

from __future__ import annotations

import collections
import concurrent.futures
import enum
import functools
import itertools
import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from speechpipe.errors import SpeechpipeError, WorkerTimeout, WorkerUnavailable

__all__ = [
    "BreakerState", "CircuitBreaker", "GuardedExecutor", "LatencyBudget", "WorkerGuard",
    "WorkerHealth",
]

log = logging.getLogger("speechpipe.workers")

JOIN_TIMEOUT_S = 60.0  # longest shutdown() waits for a call in progress


@dataclass
class LatencyBudget:
    """A call's deadline from the measured p99 of recent call times (see the module docs)."""

    floor_s: float = 2.0
    ceiling_s: float = 30.0
    factor: float = 4.0
    window: int = 256
    _samples: collections.deque[float] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.floor_s <= self.ceiling_s or self.factor <= 0 or self.window < 1:
            raise ValueError("need 0 < floor_s <= ceiling_s, factor > 0, window >= 1")
        self._samples = collections.deque(maxlen=self.window)

    def observe(self, seconds: float) -> None:
        """Record one completed call's duration."""
        self._samples.append(max(0.0, seconds))

    def clear(self) -> None:
        """Forget the measured calls."""
        self._samples.clear()

    def measured(self) -> tuple[float, ...]:
        """The measured calls, oldest first (for ``restore``)."""
        return tuple(self._samples)

    def restore(self, samples: tuple[float, ...]) -> None:
        """Back to ``samples``: after a warm-up, whose short calls are not the work's. A
        warm-up on a serving worker (a drill's, a reload's) keeps what real calls measured
        before it, so the next deadline is still theirs and not the ceiling."""
        self._samples.clear()
        self._samples.extend(samples)

    @property
    def count(self) -> int:
        """Calls measured (at most ``window``)."""
        return len(self._samples)

    def p99(self) -> float | None:
        """The 99th percentile of the measured calls (nearest rank); None before any."""
        if not self._samples:
            return None
        ordered = sorted(self._samples)
        return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]

    def deadline_s(self) -> float:
        """How long the next call may take before it is abandoned."""
        p99 = self.p99()
        if p99 is None:
            return self.ceiling_s
        return min(self.ceiling_s, max(self.floor_s, self.factor * p99))


class BreakerState(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass
class CircuitBreaker:
    """Closed -> open after ``failures`` failures within ``window_s``; open -> half-open after
    ``cooldown_s``; half-open lets one probe through (another after ``cooldown_s`` if the first
    never reports), whose success closes it and whose failure opens it again."""

    failures: int = 3
    window_s: float = 30.0
    cooldown_s: float = 2.0
    state: BreakerState = BreakerState.CLOSED
    opened_at: float = 0.0
    opened: int = 0  # times it opened
    _recent: collections.deque[float] = field(default_factory=collections.deque, repr=False)
    _probe_at: float | None = field(default=None, repr=False)

    def allow(self, now: float) -> bool:
        """May a new call go to the worker now? (In half-open: True for the probe only.)"""
        if self.state is BreakerState.CLOSED:
            return True
        if self.state is BreakerState.OPEN:
            if now - self.opened_at < self.cooldown_s:
                return False
            self.state = BreakerState.HALF_OPEN
            self._probe_at = None
        if self._probe_at is None or now - self._probe_at >= self.cooldown_s:
            self._probe_at = now
            return True
        return False

    def success(self, now: float) -> None:
        """A call completed."""
        if self.state is not BreakerState.CLOSED:
            self.state = BreakerState.CLOSED
            self._recent.clear()
            self._probe_at = None

    def failure(self, now: float) -> None:
        """A call failed or was abandoned."""
        if self.state is BreakerState.HALF_OPEN:
            self._open(now)
            return
        self._recent.append(now)
        while self._recent and now - self._recent[0] > self.window_s:
            self._recent.popleft()
        if self.state is BreakerState.CLOSED and len(self._recent) >= self.failures:
            self._open(now)

    def retry_after_s(self, now: float) -> float:
        """Seconds until the breaker lets a probe through (0 when closed)."""
        if self.state is BreakerState.CLOSED:
            return 0.0
        return max(0.0, self.opened_at + self.cooldown_s - now)

    def _open(self, now: float) -> None:
        self.state = BreakerState.OPEN
        self.opened_at = now
        self.opened += 1
        self._recent.clear()
        self._probe_at = None


@dataclass(frozen=True)
class WorkerHealth:
    """One worker's state for ``/readyz`` and the metrics."""

    name: str  # "asr", "tts:<voice>", "mt:<model>"
    required: bool
    breaker: BreakerState
    deadline_s: float
    abandoned: int
    restarts: int
    failures: int
    refused: int

    @property
    def down(self) -> bool:
        return self.breaker is BreakerState.OPEN


class WorkerGuard:
    """The shell a worker calls around each call (thread-safe; see the module docs)."""

    def __init__(
        self,
        name: str,
        *,
        required: bool = True,
        budget: LatencyBudget | None = None,
        breaker: CircuitBreaker | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.required = required
        self.budget = budget or LatencyBudget()
        self.breaker = breaker or CircuitBreaker()
        self.clock = clock
        self.abandoned = 0
        self.restarts = 0
        self.failures = 0
        self.refused = 0
        self.successes = 0
        self._lock = threading.Lock()
        # the watchdog starts the threads that replace stuck ones, and on Linux a thread is
        # born with its creator's nice value: started here, by the guard's creator, it runs
        # at the process's priority, not at the nice 10 of the ASR worker whose first call
        # would otherwise start it (``models.workers.asr_lanes``): an urgent lane's replacement
        # would run below the lane
        _WATCHDOG.start()

    def admit(self) -> None:
        """Raise ``WorkerUnavailable`` (at once) while the breaker refuses new work."""
        with self._lock:
            now = self.clock()
            if self.breaker.allow(now):
                return
            self.refused += 1
            retry = self.breaker.retry_after_s(now)
        raise WorkerUnavailable(
            f"the {self.name} worker is down after repeated failures; retry in "
            f"{max(1, math.ceil(retry))} s", retry_after_s=max(1.0, math.ceil(retry)))

    def refuse_if_down(self) -> None:
        """Raise ``WorkerUnavailable`` while the breaker is open (a session about to start:
        it does not take the half-open probe's place)."""
        health = self.health()
        if health.down:
            with self._lock:
                self.refused += 1
                retry = self.breaker.retry_after_s(self.clock())
            raise WorkerUnavailable(
                f"the {self.name} worker is down after repeated failures; retry in "
                f"{max(1, math.ceil(retry))} s", retry_after_s=max(1.0, math.ceil(retry)))

    def deadline_s(self) -> float:
        with self._lock:
            return self.budget.deadline_s()

    def succeeded(self, seconds: float) -> None:
        with self._lock:
            self.successes += 1
            self.budget.observe(seconds)
            self.breaker.success(self.clock())

    def failed(self) -> None:
        with self._lock:
            self.failures += 1
            self.breaker.failure(self.clock())

    def timed_out(self, seconds: float, calls: int = 1) -> WorkerTimeout:
        """Count ``calls`` abandoned after ``seconds``; returns the error for their callers."""
        with self._lock:
            self.abandoned += calls
            self.failures += 1
            self.breaker.failure(self.clock())
        return WorkerTimeout(f"the {self.name} worker did not answer within its deadline "
                             f"({seconds:.1f} s); this request was abandoned")

    def replaced(self) -> None:
        with self._lock:
            self.restarts += 1

    def start_call(self, on_abandon: Callable[[WorkerTimeout], None]) -> _Call:
        """On the worker's thread, just before the model call: the watchdog calls
        ``on_abandon(error)`` if the call is still running at its deadline."""
        return _start_call(self, on_abandon)

    def end_call(self, call: _Call, ok: bool | None) -> bool:
        """After the call (see ``_end_call``); False: it was abandoned, drop its result."""
        return _end_call(call, ok)

    def health(self) -> WorkerHealth:
        with self._lock:
            state = self.breaker.state
            if state is BreakerState.OPEN and self.clock() - self.breaker.opened_at >= (
                    self.breaker.cooldown_s):
                state = BreakerState.HALF_OPEN  # what allow() would say now
            return WorkerHealth(self.name, self.required, state, self.budget.deadline_s(),
                                self.abandoned, self.restarts, self.failures, self.refused)


# --- the watchdog: one thread per process, asleep until the earliest running deadline ----


class _Call:
    __slots__ = ("guard", "started", "deadline", "on_abandon", "state")

    def __init__(self, guard: WorkerGuard, started: float, deadline: float,
                 on_abandon: Callable[[WorkerTimeout], None]) -> None:
        self.guard = guard
        self.started = started
        self.deadline = deadline
        self.on_abandon = on_abandon
        self.state = "running"  # -> "done" (end_call first) or "abandoned" (watchdog first)


class _Watchdog:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._calls: set[_Call] = set()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the watchdog's thread unless it runs (from the calling thread, whose
        priority it inherits)."""
        with self._cond:
            self._start_locked()

    def _start_locked(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="worker-watchdog",
                                            daemon=True)
            self._thread.start()

    def add(self, call: _Call) -> None:
        with self._cond:
            self._calls.add(call)
            self._start_locked()
            self._cond.notify()

    def finish(self, call: _Call) -> bool:
        """True if the call ended before its deadline (its result counts)."""
        with self._cond:
            self._calls.discard(call)
            if call.state == "abandoned":
                return False
            call.state = "done"
            return True

    def _run(self) -> None:
        while True:
            expired: list[_Call] = []
            with self._cond:
                now = time.monotonic()
                for call in list(self._calls):
                    if now >= call.deadline:
                        call.state = "abandoned"
                        self._calls.discard(call)
                        expired.append(call)
                if not expired:
                    wait = min((c.deadline for c in self._calls), default=now + 60.0) - now
                    self._cond.wait(max(0.001, wait))
                    continue
            for call in expired:  # outside the lock: the callbacks take the workers' locks
                error = call.guard.timed_out(call.deadline - call.started)
                log.warning("%s worker: a call passed its %.1f s deadline: abandoned, worker "
                            "replaced", call.guard.name, call.deadline - call.started)
                try:
                    call.on_abandon(error)
                except Exception:  # never let one worker's callback stop the watchdog
                    log.exception("%s worker: replacing it failed", call.guard.name)


_WATCHDOG = _Watchdog()


def _start_call(guard: WorkerGuard, on_abandon: Callable[[WorkerTimeout], None]) -> _Call:
    now = time.monotonic()
    call = _Call(guard, now, now + guard.deadline_s(), on_abandon)
    _WATCHDOG.add(call)
    return call


def _end_call(call: _Call, ok: bool | None) -> bool:
    """``ok``: True (success), False (a worker failure), None (the caller's own error, e.g.
    bad input: not the worker's). False when the watchdog abandoned the call already."""
    if not _WATCHDOG.finish(call):
        return False
    if ok is True:
        call.guard.succeeded(time.monotonic() - call.started)
    elif ok is False:
        call.guard.failed()
    return True



# --- a one-thread executor whose stuck thread is replaced -------------------------------


class _Job:
    __slots__ = ("fn", "args", "future")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn = fn
        self.args = args
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()


class GuardedExecutor(concurrent.futures.Executor):
    """One worker thread serving a queue, with ``guard``'s deadline on every job: a job past
    it fails with ``WorkerTimeout`` and a new thread takes over the queue (the stuck one
    exits when, if ever, its call returns; its result is dropped). A job raising a
    ``SpeechpipeError`` is the caller's error (bad input), any other exception a worker
    failure (counted by the breaker).

    The queue is served earliest due first (``submit_due``: the TTS voice passes the time a
    session's listener runs out of speech, so a phrase whose listener is waiting goes ahead of
    one whose listener still has seconds queued); ``submit`` is due at once. Ties keep the
    order of submission."""

    def __init__(self, guard: WorkerGuard, name: str, *, max_stuck: int = 4) -> None:
        self.guard = guard
        self.name = name
        self.max_stuck = max_stuck  # stuck threads kept at most; beyond, no more replacements
        # (due on the monotonic clock, submission number, job); None: shut down
        self._jobs: queue.PriorityQueue[tuple[float, int, _Job | None]] = queue.PriorityQueue()
        self._submitted = itertools.count()
        self._lock = threading.Lock()
        self._retired: set[threading.Thread] = set()
        self._serving: threading.Thread | None = None
        self._shutdown = False
        self._spawn()

    def _spawn(self) -> None:
        thread = threading.Thread(target=self._serve, name=f"{self.name}", daemon=True)
        self._serving = thread
        thread.start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any,
               ) -> concurrent.futures.Future[Any]:
        if kwargs:
            raise TypeError("GuardedExecutor.submit takes positional arguments only")
        return self.submit_due(time.monotonic(), fn, *args)

    def submit_due(self, due: float, fn: Callable[..., Any], /, *args: Any,
                   ) -> concurrent.futures.Future[Any]:
        """``submit``, served after every queued job due earlier (``due``: the monotonic
        time by which its result is needed)."""
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            job = _Job(fn, args)
            self._jobs.put((due, next(self._submitted), job))
        return job.future

    def _put_end(self) -> None:
        """The end marker, after every queued job."""
        self._jobs.put((math.inf, next(self._submitted), None))

    def _serve(self) -> None:
        me = threading.current_thread()
        while True:
            job = self._jobs.get()[2]
            if job is None:
                self._put_end()  # every thread sees the end
                return
            if not job.future.set_running_or_notify_cancel():
                continue
            call = self.guard.start_call(functools.partial(self._abandon, job, me))
            try:
                result = job.fn(*job.args)
            except SpeechpipeError as exc:
                if self.guard.end_call(call, None):
                    job.future.set_exception(exc)
            except Exception as exc:
                if self.guard.end_call(call, False):
                    job.future.set_exception(exc)
            else:
                if self.guard.end_call(call, True):
                    job.future.set_result(result)
            with self._lock:
                if me in self._retired:
                    self._retired.discard(me)
                    return

    def _abandon(self, job: _Job, thread: threading.Thread, error: WorkerTimeout) -> None:
        try:
            job.future.set_exception(error)
        except concurrent.futures.InvalidStateError:
            pass
        with self._lock:
            if self._shutdown or thread is not self._serving:
                return
            self._retired = {t for t in self._retired if t.is_alive()}
            if len(self._retired) >= self.max_stuck:  # keep waiting on this one instead
                log.error("%s: %d threads stuck already; not starting another", self.name,
                          len(self._retired))
                return
            self._retired.add(thread)
            self.guard.replaced()
            self._spawn()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            serving = self._serving
        if cancel_futures:
            while True:
                try:
                    job = self._jobs.get_nowait()[2]
                except queue.Empty:
                    break
                if job is not None:
                    job.future.cancel()
        self._put_end()
        if wait and serving is not None and serving is not threading.current_thread():
            serving.join(JOIN_TIMEOUT_S)
