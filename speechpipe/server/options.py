"""The server's load options: admission, the degrade ladder, load sampling (a leaf module).

``LoadOptions`` (``--set load.*``, with ``admission.*`` and ``degrade.*`` beneath it) sits in
the configuration tree (``speechpipe.config``); this module holds the options only (the
cores that read them are ``server.admission`` and ``server.degrade``), and imports nothing but
the ladder's level count, so the tree is read without loading a server or asyncio.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from speechpipe.stages.ladder import MAX_LEVEL

__all__ = ["LoadOptions", "AdmissionOptions", "DegradeOptions"]


@dataclass(frozen=True, slots=True)
class AdmissionOptions:
    """Capacity, the waiting line and its estimates (``--set admission.*``)."""
    capacity: int | None = None  # None: calibrate at start-up
    max_queue: int = 16  # sessions waiting in line
    max_wait_s: float = 60.0  # refuse when the estimated wait is longer
    per_client: int | None = None  # sessions (active + waiting) per client; 0: no limit;
    # None: half the capacity (rounded up) for clients other than loopback (``client_limit``)
    expected_session_s: float = 120.0  # prior for the wait estimate
    min_retry_s: float = 5.0  # smallest retry hint given
    status_interval_s: float = 2.0  # a waiting client hears at least this often

    def __post_init__(self) -> None:
        if self.capacity is not None and self.capacity < 1:
            raise ValueError("capacity must be >= 1")


@dataclass(frozen=True, slots=True)
class DegradeOptions:
    """When the ladder steps up and down (``--set degrade.*``)."""
    up_latency_s: float = 1.0  # overloaded: ASR results take longer than this ...
    up_lag_s: float = 0.25  # ... or the event loop lags more than this
    up_load_ratio: float = 1.2  # ... or sessions exceed capacity by this factor
    down_latency_s: float = 0.5  # calm: all of these under the lower thresholds
    down_lag_s: float = 0.08
    down_load_ratio: float = 1.0
    up_after_s: float = 1.5  # overloaded this long -> one level up ...
    severe_factor: float = 2.0  # ... two levels when over this multiple of a threshold
    down_after_s: float = 10.0  # calm this long -> one level down
    max_level: int = MAX_LEVEL
    # ahead of the queue: while more sessions than this share of the capacity are in
    # progress, the level is at least ``busy_level``, set at once (0: off). The capacity
    # counts sessions at level 2 (``calibrate_capacity``), and a session costs about twice
    # that on level 0 (a decode every 1 s against 1.5 s, beams on partials: about +30 %), so
    # above half of it level 0 cannot hold them: waiting for the ASR turnaround to grow lets
    # a burst of sessions build a queue first (docs/design.md, "Ahead of the queue"); a
    # lone session never counts as busy
    busy_load_ratio: float = 0.5
    busy_level: int = 2  # ... the level it is at least then (max_level caps it)

    def __post_init__(self) -> None:
        if not (self.down_latency_s < self.up_latency_s and self.down_lag_s < self.up_lag_s
                and self.down_load_ratio < self.up_load_ratio):
            raise ValueError("the down thresholds must be below the up thresholds")
        if not 0 <= self.busy_level <= MAX_LEVEL or self.busy_load_ratio < 0:
            raise ValueError(f"degrade.busy_level must be 0..{MAX_LEVEL} and "
                             "degrade.busy_load_ratio >= 0 (max_level caps it)")



@dataclass(frozen=True, slots=True)
class LoadOptions:
    """Admission, the degrade ladder and load sampling (``--set load.*``)."""
    admission: AdmissionOptions = field(default_factory=AdmissionOptions)
    degrade: DegradeOptions = field(default_factory=DegradeOptions)
    degrade_enabled: bool = True
    tick_s: float = 0.5  # load sampling period (also the loop-lag probe's timer)
    latency_window_s: float = 3.0  # ASR turnarounds of this recent past count as "current"
