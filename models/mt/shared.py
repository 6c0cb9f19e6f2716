"""The shared text-MT workers of a process: one per hop a route names, started on first use
and shared by every session that translates through it.

A hop that names a backend (``apertium:eng-spa``: ``models.mt.backends``) gets that backend's
worker, with its options group; any other is a CTranslate2 model (``ct2:NAME``, a registered
name or a folder), loaded once per folder.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from speechpipe.models.mt.backends import MT_BACKENDS, SharedTranslator, backend_of
from speechpipe.models.mt.ct2_translator import Ct2TextTranslator
from speechpipe.models.mt.ct2_worker import Ct2TranslationWorker

__all__ = ["MtWorkers"]


class MtWorkers:
    """The workers by hop (CTranslate2's by folder). Thread-safe: sessions resolve their
    routes off the event loop."""

    def __init__(self, check_open: Callable[[], None] = lambda: None) -> None:
        self.workers: dict[str, SharedTranslator] = {}
        self.lock = threading.Lock()
        self._check_open = check_open  # raises once the owner is shut down: no new worker

    def worker(self, hop: str, options: Any) -> SharedTranslator:
        """The shared worker for a route's hop (started or loaded once; blocking).
        ``options``: the pipeline's options tree."""
        backend = backend_of(hop)
        if backend is None:
            return self.ct2(hop, options)
        with self.lock:
            found = self.workers.get(hop)
            if found is None:
                self._check_open()
                found = backend.load().worker(hop, backend.options_in(options))
                self.workers[hop] = found
            return found

    def ct2(self, spec: str, options: Any) -> Ct2TranslationWorker:
        """The shared worker for a CTranslate2 MT model (loaded once; blocking), with the
        tree's ``mt_threads`` and ``mt_prefill``."""
        from speechpipe.models.mt.registry import resolve_mt_model

        path = resolve_mt_model(spec.removeprefix("ct2:"))
        with self.lock:
            found = self.workers.get(str(path))
            if found is None:
                self._check_open()
                translator = Ct2TextTranslator(path, model_id=str(path),
                                               intra_threads=options.mt_threads,
                                               prefill=options.mt_prefill)
                found = Ct2TranslationWorker(translator)
                self.workers[str(path)] = found
            assert isinstance(found, Ct2TranslationWorker)
            return found

    def warm(self, options: Any) -> None:
        """Start the hops every backend's options name to start with the server (blocking)."""
        for backend in MT_BACKENDS.values():
            for hop in backend.load().warm(backend.options_in(options)):
                self.worker(hop, options)

    def loaded(self) -> list[SharedTranslator]:
        """Every worker started so far."""
        with self.lock:
            return list(self.workers.values())

    def close(self) -> None:
        """Stop every worker (joined; blocking)."""
        for worker in self.loaded():
            worker.close()

    def clear(self) -> None:
        """Drop the workers (after ``close``)."""
        with self.lock:
            self.workers.clear()
