"""The stream clock: at which stream position an output counts as produced.

Stages stamp every output with ``clock.stamp(basis_pts)``, where ``basis_pts`` is the end of
the source audio the decision was based on.

- ``WallStreamClock`` (live sessions, ``--pace realtime``): the stream position the speaker
  has reached *now*, from wall-clock time since the stream started. Slow inference shows up
  as later stamps: computation-aware latency.
- ``BasisStreamClock`` (``--pace fast``): the basis itself, as if inference took no time:
  computation-unaware latency (SimulEval's non-computation-aware delays).

Same pipeline code, different clock.
"""

from __future__ import annotations

import time
from typing import Protocol

from speechpipe.stages.frames import STREAM_RATE

__all__ = ["StreamClock", "WallStreamClock", "BasisStreamClock"]


class StreamClock(Protocol):
    """Stamps events with the stream position they belong to."""

    def begin(self) -> None:
        """The stream starts now (the first audio frame arrived); later calls do nothing."""
        ...

    def stamp(self, basis_pts: int) -> int:
        """The stream position to stamp on an event whose audio ends at ``basis_pts``."""
        ...

    def wall_seconds(self) -> float:
        """Seconds of wall-clock time since the stream started."""
        ...


class WallStreamClock:
    """Real-time pace: the stream position is the wall-clock time since the first audio."""

    def __init__(self, start: float | None = None) -> None:
        self.start = start

    def begin(self) -> None:
        """The stream starts now (later calls do nothing)."""
        if self.start is None:
            self.start = time.monotonic()

    def wall_seconds(self) -> float:
        """Seconds since the stream started."""
        return 0.0 if self.start is None else time.monotonic() - self.start

    def stamp(self, basis_pts: int) -> int:
        """Now, in stream samples since the start (never before ``basis_pts``)."""
        return max(basis_pts, int(self.wall_seconds() * STREAM_RATE))


class BasisStreamClock:
    """Fast pace: the stream position is the audio a result was based on."""

    def __init__(self) -> None:
        self.start: float | None = None

    def begin(self) -> None:
        """The stream starts now (later calls do nothing)."""
        if self.start is None:
            self.start = time.monotonic()

    def wall_seconds(self) -> float:
        """Seconds since the stream started."""
        return 0.0 if self.start is None else time.monotonic() - self.start

    def stamp(self, basis_pts: int) -> int:
        """``basis_pts``: the audio the result was based on."""
        return basis_pts
