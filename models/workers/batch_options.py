"""The shared ASR worker's options (``--set batching.*``): a leaf module, so the options tree
imports it without the worker, the engine or CTranslate2."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BatchOptions"]


@dataclass(frozen=True, slots=True)
class BatchOptions:
    """The shared ASR worker's batching and deadlines (``--set batching.*``)."""
    enabled: bool = True  # False: one request per engine call (the no-batching baseline)
    window_s: float = 0.02  # an idle worker waits this long after the first request
    max_batch: int = 8  # requests per engine call
    partial_deadline_s: float = 1.0  # a partial should be computed within this
    workers: int = 2  # threads taking batches (the engine needs as many CTranslate2 workers)
    group_min_queue: int = 4  # group a bucket only when this many requests wait (see below)
    final_deadline_s: float = 0.3  # finals are on the speech's critical path: sooner
    # a partial of an utterance with nothing committed yet (``WhisperRequest.opening``): the
    # listener waits for its first words, so it goes right after the finals (a final queued
    # up to 0.1 s later still goes first), ahead of partials that only refresh tentative
    # text; a deadline, not a class: a refresh partial that has waited longer than the
    # difference goes first (docs/design.md, "A burst")
    opening_deadline_s: float = 0.4
    # beams when the worker has time for them: a partial dispatched while at least this many
    # other requests still wait is decoded greedy (its beam would delay them; the decodes
    # that commit everything keep theirs). One live session never waits behind another, so
    # it always gets its beam; eight on two cores mostly do not (docs/design.md; 1 against 2
    # at 8 sessions: commit p95 0.61 / 0.71 s, EndOffset p95 3.37 / 3.51 s). 0: never
    greedy_partials_backlog: int = 1
    # the urgent lane (``workers.asr_lanes``; Linux): this many more threads, on a second copy
    # of the model, take only the decodes a listener waits for, while the ``workers`` run at
    # ``background_nice``: a commit overtakes running partials instead of waiting for them
    # (docs/design.md, "The urgent lane"). 0: no lane, every worker at the same priority
    urgent_workers: int = 1
    background_nice: int = 10  # the usual workers' nice value when there is a lane (1-19)
    # the lane takes an utterance's first partials too (nothing committed yet: the listener
    # waits for its first words); False: only the decodes that commit
    urgent_first_words: bool = True

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if self.window_s < 0:
            raise ValueError("window_s must be >= 0")
        if self.workers < 1:
            raise ValueError("workers must be >= 1")
        if self.urgent_workers < 0:
            raise ValueError("urgent_workers must be >= 0")
        if not 1 <= self.background_nice <= 19:
            raise ValueError("background_nice must be 1-19")
        if self.greedy_partials_backlog < 0:
            raise ValueError("greedy_partials_backlog must be >= 0")
