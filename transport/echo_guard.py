"""The echo guard's clock, sans I/O: when a participant's microphone may hear the room.

A participant's device plays the speech the room sends it; without echo cancellation its
microphone picks that speech up and the room would translate it back. The server holds (zeroes)
the participant's input while that speech plays and a tail after. *When* it plays is the
client's business, so the guard learns it from the client:

- Without reports, the server assumes the speech plays back to back from when it was sent,
  then ``tail_s`` (``rooms.echo_tail_s``, 0.5 s) of echo may follow: a device whose playout
  runs later than that leaks fragments of its own loudspeaker.
- A client that sends ``{"type": "playout", "played_s": X}`` says it has finished playing (or
  skipped) ``X`` seconds of the speech the room sent it. The server knows how much it sent, so
  ``sent - X`` seconds are still to play after the report arrived: the microphone stays held
  until then plus ``report_tail_s`` (room reverb, the microphone's own latency). The report
  and the microphone's audio travel the same uplink, so no clock needs to be shared. The gap
  between that end and the server's own estimate is the client's playout *lag*; speech sent
  after the report is assumed to start that much later than the server's estimate.
- Bounds: ``played_s`` is a finite number, 0 <= X <= sent (+ rounding), never going back; the
  lag is at most ``max_lag_s``, so a client cannot hold its own microphone closed for longer
  than the speech it was sent plus that. A bad report is a ``ValueError`` (the connection
  answers ``bad_message``, recoverable) and changes nothing.

Time is a parameter (seconds on any monotonic clock).
"""

from __future__ import annotations

import math

__all__ = ["EchoGuard", "ROUNDING_S"]

ROUNDING_S = 0.05  # a client counting samples may run this far over the server's sum


class EchoGuard:
    """One participant's echo guard (see the module docs)."""

    def __init__(self, *, tail_s: float = 0.5, report_tail_s: float = 0.25,
                 max_lag_s: float = 3.0) -> None:
        self.tail_s = tail_s
        self.report_tail_s = report_tail_s
        self.max_lag_s = max_lag_s
        self.sent_s = 0.0  # speech sent to the client so far
        self.played_s = 0.0  # ... of which it reported this much played
        self.reported = False  # the client reports its playout (else: the fixed tail)
        self.lag_s = 0.0  # how much later than the server's estimate the client plays
        self._estimate = 0.0  # the server's own estimate of when the speech ends playing
        self._client_end = 0.0  # when the client's playout ends (from its last report)

    def sent(self, seconds: float, now: float) -> None:
        """``seconds`` of speech were sent to the client at ``now`` (played after what it
        is still playing, back to back)."""
        self.sent_s += seconds
        self._estimate = max(self._estimate, now) + seconds
        self._client_end = max(self._client_end, now + self.lag_s) + seconds

    def report(self, played_s: object, now: float) -> None:
        """The client's ``playout`` report, arriving at ``now``; ``ValueError`` when it is
        not a plausible one (nothing changes then)."""
        if isinstance(played_s, bool) or not isinstance(played_s, int | float):
            raise ValueError("'played_s' must be a number of seconds")
        try:
            played = float(played_s)
        except OverflowError:  # an integer beyond any float
            raise ValueError("'played_s' is more than the speech the room sent") from None
        if not math.isfinite(played) or played < 0:
            raise ValueError("'played_s' must be a finite number of seconds, not negative")
        if played > self.sent_s + ROUNDING_S:
            raise ValueError("'played_s' is more than the speech the room sent")
        if played < self.played_s - ROUNDING_S:
            raise ValueError("'played_s' went back")
        played = min(max(played, self.played_s), self.sent_s)
        self.played_s = played
        pending = self.sent_s - played
        if pending > 0:  # still playing: how late it runs behind the server's estimate
            self.lag_s = min(max(now + pending - self._estimate, 0.0), self.max_lag_s)
        self._client_end = min(now + pending, max(self._estimate, now) + self.max_lag_s)
        self.reported = True

    def closed_until(self) -> float:
        """Until when the client's microphone is held (on the clock of ``now``)."""
        if not self.reported:
            return self._estimate + self.tail_s if self.sent_s else 0.0
        return self._client_end + self.report_tail_s

    def hears_itself(self, now: float) -> bool:
        """Whether its microphone may now pick up speech the room sent it."""
        return now < self.closed_until()
