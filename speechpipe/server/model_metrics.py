"""The ASR model's memory on ``/metrics``, read from the engine at each scrape.

``speechpipe_asr_model_bytes{kind}``: ``shared`` is the one Whisper model every session and
language decodes with (the size of its ``model.bin``, loaded once); ``restricted`` the bytes
the vocabulary-restricted decoders hold of their own (their gathered output-layer rows,
docs/design.md "Memory that does not grow with languages"), at most
``speechpipe_asr_restricted_budget_bytes`` (``pipeline.asr_restricted_cache_mb``).
``speechpipe_asr_restricted_decoders`` counts those decoders (per worker thread and
language), ``speechpipe_asr_restricted_languages`` the languages with a restriction, and
``speechpipe_asr_restricted_built`` the decoders built so far (it grows past the count when
the budget evicts).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["ModelMemoryCollector"]


class ModelMemoryCollector(Collector):
    """A prometheus_client collector over a ``WhisperEngine``."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        memory = self.engine.restricted_memory()
        try:
            shared = (self.engine.model_dir / "model.bin").stat().st_size
        except OSError:
            shared = 0
        size = GaugeMetricFamily("speechpipe_asr_model_bytes",
                                 "ASR model memory by kind: the shared model, the restricted "
                                 "decoders' own rows", labels=["kind"])
        size.add_metric(["shared"], shared)
        size.add_metric(["restricted"], memory["bytes"])
        yield size
        yield GaugeMetricFamily("speechpipe_asr_restricted_budget_bytes",
                                "Bytes the restricted decoders may hold",
                                value=memory["budget_bytes"])
        yield GaugeMetricFamily("speechpipe_asr_restricted_decoders",
                                "Restricted decoders held (per worker thread and language)",
                                value=memory["decoders"])
        yield GaugeMetricFamily("speechpipe_asr_restricted_languages",
                                "Languages decoded with a restricted vocabulary",
                                value=memory["languages"])
        yield CounterMetricFamily("speechpipe_asr_restricted_built",
                                  "Restricted decoders built (evicted ones built again count)",
                                  value=memory["built"])
