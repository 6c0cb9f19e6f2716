"""Inference workers: blocking model calls on dedicated threads, never on the event loop.

One worker per loaded model, shared by every session on it. Requests run in submission
order on the worker's thread; an exception fails only the request that raised it
(``WorkerError``) and the worker carries on.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from speechpipe.errors import SpeechpipeError, WorkerError
from speechpipe.models.whisper_engine import WhisperEngine, WhisperRequest, WhisperResult

__all__ = ["ThreadWorker", "WhisperWorker"]

P = ParamSpec("P")
R = TypeVar("R")


class ThreadWorker:
    def __init__(self, name: str) -> None:
        self.name = name
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self.calls = 0
        self.failures = 0

    async def call(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        loop = asyncio.get_running_loop()
        self.calls += 1
        try:
            call = functools.partial(fn, *args, **kwargs)
            return await loop.run_in_executor(self._executor, call)
        except SpeechpipeError:
            self.failures += 1
            raise
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.failures += 1
            raise WorkerError(f"{self.name} failed: {type(exc).__name__}: {exc}") from exc

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class WhisperWorker:
    """The shared ASR worker: ``await worker.recognize(request)``."""

    def __init__(self, engine: WhisperEngine) -> None:
        self.engine = engine
        self._thread = ThreadWorker("whisper")

    async def recognize(self, request: WhisperRequest) -> WhisperResult:
        return await self._thread.call(self.engine.run, request)

    def shutdown(self) -> None:
        self._thread.shutdown()
