"""Per-connection and per-client limits: pure cores, plus one small async shell.

What a live session may use, each limit tripping with a documented code (``docs/protocol.md``,
"Access and quotas"):

- session length (``max_session_s``, 4 h): ``session_expired`` (recoverable): the session
  finishes as after ``stop``, then ``end`` and close 4006 (4006 without ``end`` if it cannot
  finish within ``expire_grace_s``);
- idle time (``max_idle_s``, 60 s): no client message and no WebRTC audio for that long:
  ``idle_timeout``, close 4007;
- messages per second (``messages_per_s`` 200, ``message_burst`` 500; a token bucket over
  every client frame, control frames included, counted in ``transport.frame_guard``):
  ``rate_limited``, close 4008;
- message size (``ServerLimits.max_message_bytes``, 128 KiB): close 1009 (WebSocket layer);
- SDP size (``max_sdp_bytes``, 32 KiB): ``sdp_too_large`` (recoverable; no peer is made);
- audio pace (``audio_window_s`` 20 s, ``min_audio_ratio`` 0.5): less than half of real time
  over any 20 s of a session: ``too_slow``, close 4010 (``AudioPace``);
- sessions per token (``max_sessions_per_token``, 4) and per client address
  (``max_sessions_per_ip``, 32): HTTP 429 at the upgrade, or ``too_many_sessions`` and
  close 4009 when many connect at once.

``TokenBucket``, ``SessionTimers`` and ``SessionCounter`` are synchronous and take ``now`` as
a parameter, so they are unit tested without sleeping. ``QuotaGuard`` is the shell the server
reads client messages through: it waits for the next message only until the next deadline.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from speechpipe.transport.codes import ErrorCode
from speechpipe.transport.limits import Quotas
from speechpipe.transport.protocol import ProtocolError

__all__ = [
    "TokenBucket",
    "SessionTimers",
    "Deadline",
    "AudioPace",
    "SessionCounter",
    "QuotaGuard",
    "Expired",
    "EXPIRED",
    "check_sdp_size",
    "quota_error",
]


def quota_error(code: str, message: str) -> ProtocolError:
    """A quota violation as the protocol's error (fatal ones carry their close code, from the
    code table: ``transport/codes.py``)."""
    row = ErrorCode.lookup(code)
    return ProtocolError(code, message, close_code=None if row is None else row.close)


def check_sdp_size(sdp: str, max_bytes: int) -> None:
    """Refuse an oversized offer before aiortc parses it (recoverable ``sdp_too_large``)."""
    size = len(sdp.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise ProtocolError(
            ErrorCode.SDP_TOO_LARGE, f"offer SDP of {size} bytes is over {max_bytes} bytes"
        )


@dataclass
class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved up; each message takes one."""

    rate: float
    burst: float
    _tokens: float | None = None
    _last: float | None = None

    def available(self, now: float) -> float:
        """The tokens there are at ``now`` (refilled; nothing taken)."""
        if self._tokens is None or self._last is None:
            self._tokens, self._last = float(self.burst), now
        self._tokens = min(float(self.burst), self._tokens + max(0.0, now - self._last) * self.rate)
        self._last = now
        return self._tokens

    def take(self, now: float, cost: float = 1.0) -> bool:
        """Take ``cost`` tokens at ``now``; False when there are not enough."""
        self._tokens = self.available(now)
        if self._tokens < cost:
            return False
        self._tokens -= cost
        return True

    def borrow(self, now: float, cost: float = 1.0) -> None:
        """Take ``cost`` tokens at ``now`` even when there are not enough: the bucket goes
        into debt and refills from there (a turn booked ahead, ``room_access.JoinLimiter``)."""
        self._tokens = self.available(now) - cost


class Deadline(enum.Enum):
    """Which session timer is due."""
    IDLE = "idle"  # nothing from the client for max_idle_s
    EXPIRE = "expire"  # the session reached max_session_s: finish it
    GRACE_OVER = "grace_over"  # it has not finished within expire_grace_s: close it
    TOO_SLOW = "too_slow"  # audio fell behind the wall clock (AudioPace)


@dataclass
class AudioPace:
    """Audio must keep up with the wall clock: in every window of ``window_s`` seconds (once
    the session is that old), at least ``min_ratio * window_s`` seconds of audio arrive.

    Silence counts: a muted client sends silence. The window forgives a slow start (a
    microphone prompt, WebRTC's ICE) and a network stall of up to ``(1 - min_ratio) *
    window_s``; a client that holds a session with a tiny frame now and then trips it one
    window after its audio stopped keeping up. Arrivals are kept in ``resolution_s`` steps
    (counted at the start of their step, which can only trip earlier, by at most that)."""

    window_s: float
    min_ratio: float
    start: float
    resolution_s: float = 0.25
    total: float = 0.0
    _marks: collections.deque[tuple[float, float]] = field(
        default_factory=collections.deque
    )  # (time, total audio seconds by then), oldest first

    def add(self, seconds: float, now: float) -> None:
        """Record ``seconds`` of audio received at time ``now``."""
        self.total += seconds
        if self._marks and now - self._marks[-1][0] < self.resolution_s:
            self._marks[-1] = (self._marks[-1][0], self.total)
        else:
            self._marks.append((now, self.total))
        while len(self._marks) > 1 and self._marks[1][0] <= now - self.window_s:
            self._marks.popleft()  # the newest mark before the window is all that is needed

    def deadline(self) -> float:
        """When the rule trips if no more audio arrives: the first ``t`` (from one window in)
        at which the audio received in ``(t - window_s, t]`` is below the minimum."""
        first = self.start + self.window_s
        need = self.total - self.min_ratio * self.window_s  # audio by t - window_s must be <=
        if need < 0:
            return first
        for at, total in self._marks:
            if total > need:
                return max(first, at + self.window_s)
        return math.inf  # min_ratio 0: never

    def behind(self, now: float) -> bool:
        """Whether the session sent too little audio over the window by ``now``."""
        return now >= self.deadline()


@dataclass
class SessionTimers:
    """Idle and session-length clocks of one connection (monotonic seconds)."""

    quotas: Quotas
    last_active: float
    session_start: float | None = None  # set when ``started`` is sent
    expired_at: float | None = None
    pace: AudioPace | None = None  # set with session_start, unless the rule is off

    def touch(self, now: float) -> None:
        """The client was active at ``now``."""
        self.last_active = now

    def begin(self, now: float) -> None:
        """The session started at ``now`` (its length counts from here)."""
        self.session_start = self.last_active = now
        q = self.quotas
        if q.audio_window_s is not None and q.min_audio_ratio > 0:
            self.pace = AudioPace(q.audio_window_s, q.min_audio_ratio, start=now)

    def next_deadline(self, *, stopping: bool) -> tuple[float, Deadline] | None:
        """The earliest pending deadline. Before ``start`` (the start timeout rules) there is
        none; after ``stop`` idle time does not count (the server is the one still talking)."""
        if self.session_start is None:
            return None
        q = self.quotas
        pending: list[tuple[float, Deadline]] = []
        if q.max_idle_s is not None and not stopping:
            pending.append((self.last_active + q.max_idle_s, Deadline.IDLE))
        if self.pace is not None and not stopping:
            pending.append((self.pace.deadline(), Deadline.TOO_SLOW))
        if self.expired_at is not None:
            pending.append((self.expired_at + q.expire_grace_s, Deadline.GRACE_OVER))
        elif q.max_session_s is not None:
            pending.append((self.session_start + q.max_session_s, Deadline.EXPIRE))
        return min(pending, key=lambda p: p[0]) if pending else None

    def due(self, now: float, *, stopping: bool) -> Deadline | None:
        """The deadline that has passed at ``now``, if any."""
        nxt = self.next_deadline(stopping=stopping)
        if nxt is not None and now >= nxt[0]:
            return nxt[1]
        return None


class SessionCounter:
    """Concurrent sessions per key (a token id, a client address); ``limit`` None = off."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit if limit else None
        self.counts: dict[str, int] = {}

    def full(self, key: str | None) -> bool:
        """True when ``key`` holds its limit of sessions."""
        return key is not None and self.limit is not None and self.counts.get(key, 0) >= self.limit

    def acquire(self, key: str | None) -> bool:
        """Count one more session for ``key``; False when full."""
        if key is None:
            return True
        if self.full(key):
            return False
        self.counts[key] = self.counts.get(key, 0) + 1
        return True

    def release(self, key: str | None) -> None:
        """Count one session less for ``key``."""
        if key is None or key not in self.counts:
            return
        self.counts[key] -= 1
        if self.counts[key] <= 0:
            del self.counts[key]


class Expired:
    """Returned by ``QuotaGuard.recv`` when the session reached its maximum length."""

    __slots__ = ()


EXPIRED = Expired()


class QuotaGuard:
    """Reads client messages under the rate limit, the idle timeout and the session length.

    ``recv`` is cancel-safe when the underlying ``recv`` is (websockets' is): it only ever
    waits on it with a timeout. Raises a fatal ``ProtocolError`` (``idle_timeout``,
    ``rate_limited``, ``session_expired`` after the grace period); returns ``EXPIRED`` once
    when the session length is reached, so the caller can finish the session gracefully.
    """

    def __init__(
        self,
        quotas: Quotas,
        *,
        clock: Callable[[], float] = time.monotonic,
        count_messages: bool = True,
    ) -> None:
        """``count_messages=False`` when the rate is enforced below, per frame
        (``transport.frame_guard``), so messages are not counted twice."""
        self.quotas = quotas
        self.clock = clock
        self.count_messages = count_messages
        self.bucket = TokenBucket(quotas.messages_per_s, quotas.message_burst)
        self.timers = SessionTimers(quotas, last_active=clock())
        self.messages = 0

    @property
    def expired(self) -> bool:
        """True once the session length was reached."""
        return self.timers.expired_at is not None

    def begin_session(self) -> None:
        """The session started now."""
        self.timers.begin(self.clock())

    def audio(self, seconds: float) -> None:
        """``seconds`` of audio arrived (over the WebSocket or WebRTC): the pace rule's input."""
        if self.timers.pace is not None:
            self.timers.pace.add(seconds, self.clock())

    async def recv(
        self,
        recv: Callable[[], Awaitable[str | bytes]],
        *,
        stopping: bool = False,
        activity: Callable[[], int] | None = None,
    ) -> str | bytes | Expired:
        """The next client message. ``activity`` counts input that bypasses this socket
        (WebRTC audio frames): when it moved, the client is not idle."""
        seen = activity() if activity is not None else 0
        while True:
            now = self.clock()
            due = self.timers.due(now, stopping=stopping)
            if due is Deadline.IDLE:
                current = activity() if activity is not None else 0
                if current != seen:
                    seen = current
                    self.timers.touch(now)
                    continue
                raise quota_error(
                    ErrorCode.IDLE_TIMEOUT,
                    f"nothing received for {self.quotas.max_idle_s:g} s",
                )
            if due is Deadline.EXPIRE:
                self.timers.expired_at = now
                return EXPIRED
            if due is Deadline.GRACE_OVER:
                raise quota_error(
                    ErrorCode.SESSION_EXPIRED, "the session did not finish in time after expiring"
                )
            if due is Deadline.TOO_SLOW:
                q = self.quotas
                raise quota_error(
                    ErrorCode.TOO_SLOW,
                    f"less than {q.min_audio_ratio:g} s of audio per second arrived over "
                    f"{q.audio_window_s:g} s: send audio (silence while muted) at real time",
                )
            nxt = self.timers.next_deadline(stopping=stopping)
            if nxt is None:
                message = await recv()
            else:
                try:
                    async with asyncio.timeout(max(0.0, nxt[0] - now)):
                        message = await recv()
                except TimeoutError:
                    continue
            now = self.clock()
            self.messages += 1
            if self.count_messages and not self.bucket.take(now):
                raise quota_error(
                    ErrorCode.RATE_LIMITED,
                    f"more than {self.quotas.messages_per_s:g} messages per second "
                    f"(burst {self.quotas.message_burst})",
                )
            self.timers.touch(now)
            return message
