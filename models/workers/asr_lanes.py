"""The urgent lane: the decodes a listener is waiting for run at the operating system's
normal priority, the rest below it (``docs/design.md``, "The urgent lane").

Why the kernel and not the queue: on a full machine (eight sessions on two cores) a decode
that commits the end of a phrase waited 0.32 s on average, as long as a partial, although the
queue served it first: it waited for a call already running to finish, and a CTranslate2 call
cannot be interrupted. Linux's scheduler can. The shared ASR worker (``workers.batching``) runs
its usual workers at ``batching.background_nice`` (10) and ``batching.urgent_workers`` more
threads at the process's own priority, on a second copy of the model whose CTranslate2
threads are left at that priority. The urgent threads take only the decodes that commit and
(``batching.urgent_first_words``) an utterance's partials before its first commit; a
thread at nice 0 gets about ten times the CPU share of one at nice 10, so a commit decode
runs about as fast as on an idle machine while the partials wait, mid-call, for it to end.
No work is added: the same calls run, in a different order of CPU time. The cost is memory:
a second copy of the Whisper weights and its buffers (base, int8: about 100 MB more RSS).

Lowering a thread's priority needs no privilege (raising it would; nothing here raises).
Only Linux has per-thread priorities (``setpriority`` on a thread id); elsewhere there is no
lane (``urgent_lane_workers``): without the kernel's help it is one more thread at the same
priority, measured no better than none, and its model copy costs the memory.

A thread is born with its creator's nice value: the watchdog that starts the threads
replacing stuck ones is started by the guard's creator (``models.workers.guard``), so a
replacement urgent thread runs at the process's priority, not at the usual workers'.
"""

from __future__ import annotations

import copy
import logging
import os
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from speechpipe.errors import ModelError

__all__ = ["PER_THREAD_PRIORITY", "load_whisper_model", "lane_engine", "lower_priority",
           "lower_this_thread", "threads_now", "urgent_lane_workers"]

log = logging.getLogger("speechpipe.batching")

PER_THREAD_PRIORITY = sys.platform.startswith("linux")


class LoadedModel(Protocol):
    """What ``lane_engine`` needs of an engine (``WhisperEngine``; a protocol, so this module
    does not import the engine, which imports it)."""

    model_dir: Path
    cpu_threads: int
    model: Any
    native_threads: frozenset[int]


EngineT = TypeVar("EngineT", bound=LoadedModel)


def urgent_lane_workers(requested: int) -> int:
    """The urgent lane's threads for ``batching.urgent_workers`` = ``requested``: as asked
    where threads have priorities of their own (Linux), none elsewhere. Without the lower
    priority the lane is a third thread at the workers' priority; measured with the
    priorities nearly equal (``batching.background_nice=1``, the stand-in on this Linux
    machine), eight synchronized sessions' first audio and end p95 were no better than with
    no lane (docs/benchmarks-history.md, "First words in the lane"), and the second model costs
    ~100 MB."""
    if requested and not PER_THREAD_PRIORITY:
        log.info("no urgent ASR lane: threads have no priorities of their own on %s",
                 sys.platform)
        return 0
    return requested


def threads_now() -> frozenset[int]:
    """This process's thread ids (Linux; empty elsewhere)."""
    try:
        return frozenset(int(name) for name in os.listdir("/proc/self/task"))
    except OSError:
        return frozenset()


def load_whisper_model(model_dir: Path, cpu_threads: int, num_workers: int
                       ) -> tuple[Any, frozenset[int]]:
    """faster-whisper's ``WhisperModel`` (int8, CPU) and the threads CTranslate2 started for
    it: its ``num_workers`` inter-threads start with the model and live as long as it."""
    try:
        from faster_whisper import WhisperModel
    except ImportError as exc:  # pragma: no cover - a hard dependency
        raise ModelError("faster-whisper is not installed: pip install faster-whisper") from exc
    before = threads_now()
    try:
        model = WhisperModel(str(model_dir), device="cpu", compute_type="int8",
                             cpu_threads=cpu_threads, num_workers=num_workers)
    except Exception as exc:
        raise ModelError(f"cannot load Whisper model from {model_dir}: {exc}") from exc
    return model, threads_now() - before


def lane_engine(engine: EngineT, workers: int) -> EngineT:
    """A view of ``engine`` with a model of its own (``workers`` CTranslate2 inter-threads)
    for the urgent lane; everything else (vocabularies, native decoders, counters) shared."""
    lane = copy.copy(engine)
    lane.model, lane.native_threads = load_whisper_model(engine.model_dir, engine.cpu_threads,
                                                         workers)
    return lane


def lower_priority(thread_ids: Iterable[int], nice: int) -> int:
    """Set each thread's nice value to at least ``nice`` (never raises a thread's priority);
    returns how many threads were lowered. Not Linux, or a thread gone: left as it is."""
    if not PER_THREAD_PRIORITY or nice <= 0:
        return 0
    lowered = 0
    for thread_id in thread_ids:
        try:
            current = os.getpriority(os.PRIO_PROCESS, thread_id)
            if current < nice:
                os.setpriority(os.PRIO_PROCESS, thread_id, nice)
            lowered += 1
        except OSError as exc:
            log.warning("cannot lower thread %d's priority: %s", thread_id, exc)
    return lowered


def lower_this_thread(nice: int) -> int:
    """``lower_priority`` of the calling thread."""
    return lower_priority([threading.get_native_id()], nice)
