"""The degrade ladder's levels, as one session sees them: its ASR options on each level.

=====  ==========================================================================  =========
level  what changes (cumulative)                                                   why
=====  ==========================================================================  =========
0      nothing (beam 5 on every decode)                                            normal
1      greedy partials; the decodes that commit everything keep their beam         cheaper
                                                                                   partials
2      partial decodes every 1.5 s instead of 1.0 s; greedy everywhere             -1/3
       (``quality`` clients lose beams); partials stop after 10 new tokens         decodes
3      partials decode the translation only (captions arrive at pauses and ends),  -1 decode
       every 2 s                                                                   per step
4      utterances are cut at 8 s instead of 15 s                                   shorter
                                                                                   encodes
=====  ==========================================================================  =========

Level 1 is the partials of the release before beams (issue 24): beam 5 on every decode costs
about +30 % CPU per session, which eight sessions on two cores cannot pay; greedy partials
give most of that back while what a pause or the end commits keeps its beam.

On every level the partials before the first two translated words come at most 1 s apart
(``early_step_s``): those are what the listener waits for.

Clients on a degraded level get a ``status`` event ``degraded`` ("fast mode: translation may
be less accurate", with ``detail.level``) and ``normal`` when they are back. A client that
asked for ``mode: fast`` starts at level 2 (and is told nothing: it asked); the server's level
applies to every session on top of that.

The server decides the level (``speechpipe.server.degrade.DegradeController``, fed by
``speechpipe.server.load_control``); a session only reads it through its ``SessionLadder``,
so the pipeline needs nothing of the server.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the ladder reads no ASR code
    from speechpipe.stages.asr import AsrOptions

__all__ = [
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


LEVELS = ("normal", "greedy partials", "longer step, greedy, shorter partials",
          "translation only", "shorter utterances")


MODE_FLOOR = {"fast": 2, "balanced": 0, "quality": 0}


FAST_MODE_MESSAGE = "fast mode: translation may be less accurate"


def degrade_asr(base: AsrOptions, level: int) -> AsrOptions:
    """The ASR options of a session on ``level`` (cumulative steps, see the table above)."""
    changes: dict[str, Any] = {}
    if level >= 1:
        changes["beam_size"] = 1
    if level >= 2:
        changes.update(step_s=max(base.step_s, 1.5), final_beam_size=1,
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
