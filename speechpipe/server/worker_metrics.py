"""The shared workers' health on ``/metrics``, read from the pipeline at each scrape.

``speechpipe_worker_breaker_state{worker}`` (0 closed, 1 half-open, 2 open),
``speechpipe_worker_up{worker,required}`` (0 while the breaker is open),
``speechpipe_worker_deadline_seconds{worker}`` (the current call deadline, from the p99),
and the counters ``speechpipe_worker_abandoned_calls_total``,
``speechpipe_worker_restarts_total``, ``speechpipe_worker_failures_total``,
``speechpipe_worker_refused_total`` (requests refused while the breaker was open). Workers
appear once loaded (TTS voices and MT models on first use). Alert rules:
``docs/alerts/workers.rules.yml``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from speechpipe.models.workers.guard import BreakerState, WorkerHealth

__all__ = ["WorkerCollector", "BREAKER_VALUES"]

BREAKER_VALUES = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}


class WorkerCollector(Collector):
    """A prometheus_client collector over ``health()`` (``Pipeline.worker_health``)."""

    def __init__(self, health: Callable[[], list[WorkerHealth]]) -> None:
        self.health = health

    def collect(self) -> Iterator[Metric]:
        workers = self.health()
        state = GaugeMetricFamily("speechpipe_worker_breaker_state",
                                  "Circuit breaker per shared worker: 0 closed, 1 half-open, "
                                  "2 open", labels=["worker"])
        up = GaugeMetricFamily("speechpipe_worker_up",
                               "1 while the shared worker takes work (breaker not open)",
                               labels=["worker", "required"])
        deadline = GaugeMetricFamily("speechpipe_worker_deadline_seconds",
                                     "A call's deadline now (from the measured p99)",
                                     labels=["worker"])
        counters = {
            "abandoned": CounterMetricFamily(
                "speechpipe_worker_abandoned_calls", "Calls abandoned past their deadline",
                labels=["worker"]),
            "restarts": CounterMetricFamily(
                "speechpipe_worker_restarts", "Worker threads replaced after a stuck call",
                labels=["worker"]),
            "failures": CounterMetricFamily(
                "speechpipe_worker_failures", "Worker calls that failed or were abandoned",
                labels=["worker"]),
            "refused": CounterMetricFamily(
                "speechpipe_worker_refused", "Requests refused while the breaker was open",
                labels=["worker"]),
        }
        for worker in workers:
            state.add_metric([worker.name], BREAKER_VALUES[worker.breaker])
            up.add_metric([worker.name, str(worker.required).lower()], 0 if worker.down else 1)
            deadline.add_metric([worker.name], worker.deadline_s)
            for key, family in counters.items():
                family.add_metric([worker.name], getattr(worker, key))
        yield state
        yield up
        yield deadline
        yield from counters.values()
