"""The async front of a ``Ct2TextTranslator`` that many sessions share.

``Ct2TranslationWorker`` micro-batches requests that arrive together into one
``translate_batch`` on a dedicated thread. Each batch has a deadline from the worker's
measured p99, and the worker a circuit breaker (``models.workers.guard``): a batch past its
deadline fails with ``WorkerTimeout`` for its requests and a new thread serves the queue;
while the breaker is open, requests are refused at once (``WorkerUnavailable``).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from speechpipe.errors import InputError, WorkerError
from speechpipe.models.mt.ct2_translator import Ct2TextTranslator, TextMtRequest, TextMtResult
from speechpipe.models.workers import faults
from speechpipe.models.workers.guard import GuardedExecutor, LatencyBudget, WorkerGuard

__all__ = ["Ct2TranslationWorker"]


# --- the shared async worker -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Queued:
    request: TextMtRequest
    future: asyncio.Future[TextMtResult]
    queued_at: float


def _fail_future(future: asyncio.Future[TextMtResult]) -> None:
    if not future.done():
        future.set_exception(WorkerError("the translation worker restarted"))


class Ct2TranslationWorker:
    """Micro-batches requests from many sessions into one ``translate_batch`` call.

    Requests arriving within ``window_s`` of the first queued one (or until ``max_batch``
    are queued) run together on one dedicated thread, so the event loop never blocks and
    the model never runs two batches at once. Each caller awaits its own future; an error
    reaches only the requests it concerns. At most ``max_pending`` requests wait; further
    callers wait for room (backpressure, not memory).

    Cancel-safety: cancelling ``translate`` drops the request if it has not started; a
    request already running completes and its result is discarded.
    """

    def __init__(
        self,
        translator: Ct2TextTranslator,
        *,
        max_batch: int = 16,
        window_s: float = 0.010,
        max_pending: int = 256,
        guard: WorkerGuard | None = None,
    ) -> None:
        if max_batch < 1 or max_pending < 1:
            raise ValueError("max_batch and max_pending must be >= 1")
        self.translator = translator
        self.max_batch = max_batch
        self.window_s = window_s
        self.max_pending = max_pending
        self.batches = 0
        self.requests = 0
        # a pair's model is not the whole server: one that is down leaves /readyz alone
        self.guard = guard or WorkerGuard(
            f"mt:{translator.model_id.rsplit('/', 1)[-1]}", required=False,
            budget=LatencyBudget(floor_s=2.0, ceiling_s=20.0))
        self._executor: concurrent.futures.Executor = GuardedExecutor(self.guard, "ct2-mt")
        self._pending: collections.deque[_Queued] = collections.deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Event | None = None
        self._room: asyncio.Semaphore | None = None
        self._closed = False

    @property
    def model_id(self) -> str:
        """The translator's model id."""
        return self.translator.model_id

    def check_languages(self, source_lang: str, target_lang: str) -> None:
        """Raise ``LanguageError`` unless the model translates this pair."""
        self.translator.check_languages(source_lang, target_lang)

    def _ensure_running(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._task is None or self._task.done():
            # First use, or a new event loop: whatever was queued on the old one is lost.
            while self._pending:
                future = self._pending.popleft().future
                if not future.get_loop().is_closed():
                    future.get_loop().call_soon_threadsafe(_fail_future, future)
            self._loop = loop
            self._wakeup = asyncio.Event()
            self._room = asyncio.Semaphore(self.max_pending)
            self._task = loop.create_task(self._serve(), name="ct2-mt-worker")

    async def translate(self, request: TextMtRequest) -> TextMtResult:
        """Translate one request in the next micro-batch and await it."""
        if self._closed:
            raise WorkerError("the translation worker is closed")
        self.guard.admit()
        self._ensure_running()
        assert self._room is not None and self._wakeup is not None and self._loop is not None
        async with self._room:
            future: asyncio.Future[TextMtResult] = self._loop.create_future()
            self._pending.append(_Queued(request, future, self._loop.time()))
            self._wakeup.set()
            return await future

    async def _serve(self) -> None:
        assert self._wakeup is not None and self._loop is not None
        while True:
            await self._wakeup.wait()
            if self._pending and len(self._pending) < self.max_batch:
                # Wait out the window from the oldest request's arrival, not from now, so
                # requests left over from a full batch do not wait twice.
                delay = self._pending[0].queued_at + self.window_s - self._loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            batch: list[tuple[TextMtRequest, asyncio.Future[TextMtResult]]] = []
            while self._pending and len(batch) < self.max_batch:
                queued = self._pending.popleft()
                if not queued.future.done():
                    batch.append((queued.request, queued.future))
            if not self._pending:
                self._wakeup.clear()
            if not batch:
                continue
            call = partial(self._run_batch, [r for r, _ in batch])
            outcomes: Sequence[TextMtResult | BaseException]
            try:
                outcomes = await self._loop.run_in_executor(self._executor, call)
            except asyncio.CancelledError:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(WorkerError("the translation worker was stopped"))
                raise
            except Exception as exc:  # a failed or abandoned batch: fail it, keep serving
                error = exc if isinstance(exc, WorkerError) else WorkerError(
                    f"text MT failed: {type(exc).__name__}: {exc}")
                outcomes = [error] * len(batch)
            self.batches += 1
            self.requests += len(batch)
            for (_, future), outcome in zip(batch, outcomes, strict=True):
                if future.done():
                    continue
                if isinstance(outcome, BaseException):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)

    def _run_batch(self, requests: list[TextMtRequest]) -> Sequence[TextMtResult | BaseException]:
        """On the worker's thread: one ``translate_batch``. A request the model failed on
        (not bad input) counts as a failure for the breaker."""
        faults.hit("mt")  # a test seam: a no-op unless a test arms it
        outcomes = self.translator.translate_batch(requests, return_exceptions=True)
        if any(isinstance(o, BaseException) and not isinstance(o, InputError)
               for o in outcomes):
            self.guard.failed()
        return outcomes

    async def aclose(self) -> None:
        """Stop serving: queued requests fail with ``WorkerError``; the thread is released."""
        self._closed = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                if (task := asyncio.current_task()) is not None and task.cancelling():
                    raise
        while self._pending:
            future = self._pending.popleft().future
            if not future.done():
                future.set_exception(WorkerError("the translation worker is closed"))
        self._executor.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """Synchronous stop for process teardown (sync callers; ``aclose`` also drains): queued
        batches are cancelled and the thread is joined (a batch in progress finishes first)."""
        self._closed = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._executor.shutdown(wait=True, cancel_futures=True)

    async def __aenter__(self) -> Ct2TranslationWorker:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
