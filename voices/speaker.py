"""Speaking for sessions: one ``TtsWorker`` per voice shared by every session, each voice's
phrase cache, and a session's ``Speaker``.

A ``Speaker`` is what a session's TTS stage calls (``stages.tts.Speak``): a phrase is looked
up in the voice's cache under (namespace, text, rate, speed) and synthesized by the voice's
shared worker only when it is not there. Sessions in one namespace share what was spoken:
by default every session is in ``""``; an in-process caller may name its own, and a bench
server gives each session one of its own (``phrase_namespace``).

``VoiceWorkers`` owns the workers and caches (loaded on a voice's first use, stopped and
dropped by the pipeline); an engine's options reach its loader through its registry entry
(``voices.engines``).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from speechpipe.stages.cache import LruCache
from speechpipe.voices.engines import TtsEngine, engine, load_synthesizer
from speechpipe.voices.registry import VoiceInfo
from speechpipe.voices.tts_worker import TtsWorker

__all__ = ["PhraseCache", "Speaker", "VoiceWorkers", "phrase_namespace"]

PhraseCache = LruCache[tuple[str, str, int, float], NDArray[np.int16]]
"""A voice's synthesized phrases by (namespace, text, rate, speed)."""

# the namespaces of sessions that get one of their own (``phrase_namespace``)
_SESSION_NAMESPACES = itertools.count(1)


def phrase_namespace(requested: str, per_session: bool) -> str:
    """A new session's namespace in the phrase caches: ``requested`` when the request names
    one (in-process callers: ``--compare``'s variants, ``bench cost``), else one no other
    session has had when ``per_session`` (``pipeline.phrase_cache_per_session``: the bench
    servers), else ``""``, the one every session shares."""
    if requested:
        return requested
    if per_session:
        # NUL first: no name a caller gives is one of these
        return f"\0session {next(_SESSION_NAMESPACES)}"
    return ""


class Speaker:
    """One session's voice: ``speak(text, speed, due)`` returns int16 samples at ``rate``,
    from the voice's phrase cache or its shared worker."""

    def __init__(self, worker: TtsWorker, cache: PhraseCache, *, namespace: str, rate: int,
                 deadline_order: bool = True) -> None:
        self.worker = worker
        self.cache = cache
        self.namespace = namespace
        self.rate = rate
        # a shared voice speaks first the phrase whose listener runs out of speech first;
        # False: first in, first out (``pipeline.tts_deadline_order``)
        self.deadline_order = deadline_order

    async def speak(self, text: str, speed: float = 1.0,
                    due: float | None = None) -> NDArray[np.int16]:
        """``text`` spoken at ``speed``; ``due``: when its listener runs out of speech (the
        worker's order among sessions)."""
        key = (self.namespace, text, self.rate, speed)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        samples = await self.worker.synthesize(text, self.rate, speed,
                                               due if self.deadline_order else None)
        self.cache.put(key, samples)
        return samples


class VoiceWorkers:
    """The shared TTS workers, one per voice loaded, and each voice's phrase cache.
    Thread-safe: sessions load voices off the event loop."""

    def __init__(self, check_open: Callable[[], None] = lambda: None) -> None:
        self.workers: dict[str, TtsWorker] = {}
        self.caches: dict[str, PhraseCache] = {}
        self.lock = threading.Lock()
        self._check_open = check_open  # raises once the owner is shut down: no new worker

    def worker(self, voice: VoiceInfo, options_of: Callable[[TtsEngine], Any],
               cache_items: int) -> TtsWorker:
        """The worker for ``voice``, loaded on first use (blocking) with the options
        ``options_of`` finds for its engine; its cache holds ``cache_items`` phrases."""
        with self.lock:
            found = self.workers.get(voice.name)
            if found is None:
                self._check_open()
                synthesizer = load_synthesizer(voice, options_of(engine(voice.engine)))
                found = TtsWorker(synthesizer, voice.name)
                self.workers[voice.name] = found
                self.caches[voice.name] = LruCache(cache_items)
            return found

    def cache(self, voice: VoiceInfo) -> PhraseCache:
        """The phrase cache of a loaded voice."""
        with self.lock:
            return self.caches[voice.name]

    def loaded(self) -> list[TtsWorker]:
        """Every worker loaded so far."""
        with self.lock:
            return list(self.workers.values())

    def close(self) -> None:
        """Stop every worker (joined; blocking)."""
        for worker in self.loaded():
            worker.close()

    def clear(self) -> None:
        """Drop the workers and caches (after ``close``)."""
        with self.lock:
            self.workers.clear()
            self.caches.clear()
