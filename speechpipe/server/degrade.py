"""The degrade ladder: under overload, shed work step by step; recover with hysteresis.

What each level changes, and how a session follows the server's level: ``speechpipe.stages.ladder``.

``DegradeController`` is pure: feed it ``LoadSample``s with a time and it answers the level.
It steps **up** one level when the load has been over a threshold for ``up_after_s`` (and
at least ``up_after_s`` since the last change; two levels when the load is over twice a
threshold: a burst of new sessions must not wait several periods), and **down** one level
only after
``down_after_s`` of load under the lower thresholds — the gap between the two thresholds and
the two delays is the hysteresis that keeps it from flapping.

Ahead of the queue: while the sessions in progress exceed ``busy_load_ratio`` of the capacity,
the level is at least ``busy_level`` from the first sample on (a burst of sessions starting
together would otherwise build an ASR queue during the periods the reactive steps wait).
"""

from __future__ import annotations

from dataclasses import dataclass

from speechpipe.server.options import DegradeOptions

__all__ = [
    "DegradeOptions",
    "DegradeController",
    "LoadSample",
]


@dataclass(frozen=True, slots=True)
class LoadSample:
    """One load measurement: ASR latency, event-loop lag and sessions vs capacity."""
    asr_latency_s: float = 0.0  # ASR turnaround: queue wait + compute (recent p90)
    loop_lag_s: float = 0.0  # event-loop lag (a timer's lateness)
    load_ratio: float = 0.0  # active sessions / capacity
    sessions: int | None = None  # active sessions (None: not known; ``load_ratio`` alone)


class DegradeController:
    """Level 0..max_level from a stream of load samples (pure: time is a parameter)."""

    def __init__(self, options: DegradeOptions | None = None) -> None:
        self.options = options or DegradeOptions()
        self.level = 0
        self._over_since: float | None = None
        self._calm_since: float | None = None
        self._changed_at = -1e18
        self.transitions = 0

    def overloaded(self, sample: LoadSample) -> bool:
        """True when any load signal is over its up threshold."""
        o = self.options
        return (sample.asr_latency_s > o.up_latency_s or sample.loop_lag_s > o.up_lag_s
                or sample.load_ratio > o.up_load_ratio)

    def severe(self, sample: LoadSample) -> bool:
        """True when a load signal is over ``severe_factor`` times its threshold."""
        o, k = self.options, self.options.severe_factor
        return (sample.asr_latency_s > k * o.up_latency_s or sample.loop_lag_s > k * o.up_lag_s
                or sample.load_ratio > k * o.up_load_ratio)

    def calm(self, sample: LoadSample) -> bool:
        """True when every load signal is under its down threshold."""
        o = self.options
        return (sample.asr_latency_s < o.down_latency_s and sample.loop_lag_s < o.down_lag_s
                and sample.load_ratio < o.down_load_ratio)

    def busy_floor(self, sample: LoadSample) -> int:
        """The level the sessions in progress need before any queue shows (``busy_level``
        above ``busy_load_ratio`` of the capacity; 0 below or when off)."""
        o = self.options
        if sample.sessions is not None and sample.sessions < 2:
            return 0  # a lone session is no burst: it keeps the floor of a session alone
        if o.busy_load_ratio > 0 and sample.load_ratio > o.busy_load_ratio:
            return min(o.busy_level, o.max_level)
        return 0

    def update(self, sample: LoadSample, now: float) -> int:
        """Feed one load sample; returns the (possibly changed) level."""
        o = self.options
        floor = self.busy_floor(sample)
        if self.level < floor:  # ahead of the queue: at once, not after a period
            self._set(floor, now)
        if self.overloaded(sample):
            self._calm_since = None
            if self._over_since is None:
                self._over_since = now
            if (self.level < o.max_level and now - self._over_since >= o.up_after_s
                    and now - self._changed_at >= o.up_after_s):
                step = 2 if self.severe(sample) else 1
                self._set(min(o.max_level, self.level + step), now)
                self._over_since = now  # the next step needs another full period
        elif self.calm(sample):
            self._over_since = None
            if self._calm_since is None:
                self._calm_since = now
            if self.level > floor and now - self._calm_since >= o.down_after_s:
                self._set(self.level - 1, now)
                self._calm_since = now
        else:  # between the thresholds: hold the level, restart both clocks
            self._over_since = None
            self._calm_since = None
        return self.level

    def _set(self, level: int, now: float) -> None:
        self.level = level
        self._changed_at = now
        self.transitions += 1


