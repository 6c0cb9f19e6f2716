"""The degrade ladder: under overload, shed work step by step; recover with hysteresis.

=====  ==========================================================================  =========
level  what changes (cumulative)                                                   why
=====  ==========================================================================  =========
0      nothing                                                                     normal
1      partial decodes every 1.5 s instead of 1.0 s                                -1/3 decodes
2      greedy everywhere (``quality`` clients lose beams); partials stop after 10   shorter
       new tokens                                                                  decodes
3      partials decode the translation only (captions arrive at pauses and ends),  -1 decode
       every 2 s                                                                   per step
4      utterances are cut at 8 s instead of 15 s                                   shorter
                                                                                   encodes
=====  ==========================================================================  =========

On every level the partials before the first two translated words come at most 1 s apart
(``early_step_s``): those are what the listener waits for.

Clients on a degraded level get a ``status`` event ``degraded`` ("fast mode: translation may
be less accurate", with ``detail.level``) and ``normal`` when they are back. A client that
asked for ``mode: fast`` starts at level 2 (and is told nothing: it asked); the server's level
applies to every session on top of that.

``DegradeController`` is pure: feed it ``LoadSample``s with a time and it answers the level.
It steps **up** one level when the load has been over a threshold for ``up_after_s`` (and
at least ``up_after_s`` since the last change; two levels when the load is over twice a
threshold: a burst of new sessions must not wait several periods), and **down** one level
only after
``down_after_s`` of load under the lower thresholds — the gap between the two thresholds and
the two delays is the hysteresis that keeps it from flapping.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from speechpipe.stages.asr import AsrOptions

__all__ = [
    "DegradeOptions",
    "DegradeController",
    "LoadSample",
    "DegradeState",
    "SessionLadder",
    "LEVELS",
    "MAX_LEVEL",
    "MODE_FLOOR",
    "degrade_asr",
    "degrade_max_utterance",
    "level_status",
]

MAX_LEVEL = 4
LEVELS = ("normal", "longer step", "greedy, shorter partials", "translation only",
          "shorter utterances")
MODE_FLOOR = {"fast": 2, "balanced": 0, "quality": 0}
FAST_MODE_MESSAGE = "fast mode: translation may be less accurate"


@dataclass(frozen=True, slots=True)
class LoadSample:
    """One load measurement: ASR latency, event-loop lag and sessions vs capacity."""
    asr_latency_s: float = 0.0  # ASR turnaround: queue wait + compute (recent p90)
    loop_lag_s: float = 0.0  # event-loop lag (a timer's lateness)
    load_ratio: float = 0.0  # active sessions / capacity


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

    def __post_init__(self) -> None:
        if not (self.down_latency_s < self.up_latency_s and self.down_lag_s < self.up_lag_s
                and self.down_load_ratio < self.up_load_ratio):
            raise ValueError("the down thresholds must be below the up thresholds")


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

    def update(self, sample: LoadSample, now: float) -> int:
        """Feed one load sample; returns the (possibly changed) level."""
        o = self.options
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
            if self.level > 0 and now - self._calm_since >= o.down_after_s:
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


def degrade_asr(base: AsrOptions, level: int) -> AsrOptions:
    """The ASR options of a session on ``level`` (cumulative steps, see the table above)."""
    changes: dict[str, Any] = {}
    if level >= 1:
        changes["step_s"] = max(base.step_s, 1.5)
    if level >= 2:
        changes.update(beam_size=1, final_beam_size=1,
                       partial_max_new_tokens=min(base.partial_max_new_tokens, 10))
    if level >= 3:
        changes.update(source_partials=False, step_s=max(base.step_s, 2.0))
    if not changes:
        return base
    step = changes.get("step_s")
    names = {f.name for f in dataclasses.fields(base)}
    if step is not None and "early_step_s" in names:
        # the first words keep a cadence of at most 1 s: they are what the listener waits for
        # (docs/design.md)
        changes["early_step_s"] = max(getattr(base, "early_step_s"), min(step, 1.0))  # noqa: B009
    return dataclasses.replace(base, **changes)


def degrade_max_utterance(base_s: float, level: int) -> float:
    """The VAD's forced-cut length on ``level``."""
    return min(base_s, 8.0) if level >= 4 else base_s


def level_status(level: int) -> tuple[str, str, dict[str, object]]:
    """(status, message, detail) announcing ``level`` to a client."""
    if level <= 0:
        return "normal", "back to full quality", {"level": 0}
    return "degraded", FAST_MODE_MESSAGE, {
        "level": level,
        "step": LEVELS[min(level, MAX_LEVEL)],
        "captions": "at pauses" if level >= 3 else "live",
    }


class DegradeState:
    """The server's current level, shared by every session's ``SessionLadder``."""

    def __init__(self) -> None:
        self.level = 0


class SessionLadder:
    """A session's ``AsrOptionsProvider``: its base options on its effective level, which
    is the server's level or the floor of the mode the client asked for, whichever is
    higher. ``announced`` is the level the client was last told about."""

    def __init__(self, base: AsrOptions, state: DegradeState, *, floor: int = 0) -> None:
        self.base = base
        self.state = state
        self.floor = floor
        self.announced = floor
        self._cache: dict[int, AsrOptions] = {}

    def level(self) -> int:
        """The session's effective level: the server's, at least the session's floor."""
        return max(self.floor, min(self.state.level, MAX_LEVEL))

    def current(self) -> AsrOptions:
        """The ASR options for the session's current level."""
        level = self.level()
        options = self._cache.get(level)
        if options is None:
            options = self._cache[level] = degrade_asr(self.base, level)
        return options
