"""Who may enter a room, and in which role: the rules, without I/O.

A room id is a capability to *listen*: every listener link carries it. The right to *speak*
belongs to the room, which grants it to

- the member that opened it (and, with tokens, later sessions of the same token: the opener
  reconnecting);
- with tokens (``--auth-secret``), the holders of a ``speaker`` or ``participant`` token for
  that room (``speechpipe token --room ID --role speaker``);
- whoever presents the room's ``invite``: a second random capability that only speaking
  members receive (``started.invite``; the page's conversation link carries it). A
  conversation's participants are admitted by it, not by knowing the room id.

A start with a speaking role in an existing room without one of these rights is refused:
``unauthorized`` (4004) on a server that requires tokens, ``not_a_speaker`` (4015) on one
that does not. A listener link never grants speaking.

``decide`` is a pure function of the request, what the client's token claims and the room's
state; ``JoinLimiter`` rate-limits joins per client address and per room (token buckets, time
a parameter). The asyncio shell is ``transport.ws_connection``.
"""

from __future__ import annotations

import hmac
from collections import OrderedDict
from dataclasses import dataclass

from speechpipe.transport.codes import ErrorCode
from speechpipe.transport.quotas import TokenBucket
from speechpipe.transport.room import Role, Room

__all__ = ["EntryRequest", "Open", "Join", "Refuse", "Entry", "decide", "may_speak",
           "JoinLimiter"]


@dataclass(frozen=True, slots=True)
class EntryRequest:
    """A ``start`` asking for a room: the role and room it names, the invite it carries,
    and what its verified token says (``key`` None: no token, or the one shared token)."""

    role: Role
    room: str | None = None
    invite: str | None = None
    key: str | None = None
    claim_room: str | None = None
    claim_role: str | None = None
    tokens_required: bool = False  # the server checks tokens: a refusal is ``unauthorized``


@dataclass(frozen=True, slots=True)
class Open:
    """Open a new room: a fresh random id, or ``room_id`` (a token's room claim)."""

    room_id: str | None = None


@dataclass(frozen=True, slots=True)
class Join:
    """Join the existing room ``room_id`` in the requested role."""

    room_id: str


@dataclass(frozen=True, slots=True)
class Refuse:
    """Refuse the start with ``code`` (an ``ErrorCode`` with its close code)."""

    code: ErrorCode
    message: str


Entry = Open | Join | Refuse


def may_speak(ask: EntryRequest, room: Room) -> bool:
    """Whether ``ask`` holds the right to speak in ``room`` (see the module docs)."""
    if ask.claim_room == room.id and ask.claim_role in (Role.SPEAKER, Role.PARTICIPANT):
        return True
    if ask.key is not None and ask.key == room.opener_key:
        return True
    return ask.invite is not None and hmac.compare_digest(ask.invite.encode(),
                                                          room.invite.encode())


def decide(ask: EntryRequest, room: Room | None) -> Entry:
    """Where ``ask`` goes. ``room``: the room it names (``ask.room``, else its token's room
    claim) when that room exists on this server, else None."""
    if ask.claim_role and ask.claim_role != ask.role:
        return Refuse(ErrorCode.UNAUTHORIZED, f"this token is for a {ask.claim_role}")
    if ask.claim_room and ask.room not in (None, ask.claim_room):
        return Refuse(ErrorCode.UNAUTHORIZED, "this token is for another room")
    room_id = ask.room or ask.claim_room
    if room_id is None:
        return Open()  # a speaking role without a room (a listener always names one)
    if room is None:
        if ask.claim_room and ask.role is not Role.LISTENER:
            return Open(ask.claim_room)  # the token's issuer chose the room's id
        return Refuse(ErrorCode.NO_ROOM, "no such room (it ended, or the link is wrong)")
    if ask.role is Role.LISTENER or may_speak(ask, room):
        return Join(room.id)
    message = ("this room did not give you the right to speak: a listener link lets you "
               "listen only (ask the room's opener for its conversation link or a token)")
    if ask.tokens_required:
        return Refuse(ErrorCode.UNAUTHORIZED, message)
    return Refuse(ErrorCode.NOT_A_SPEAKER, message)


class JoinLimiter:
    """Joins per client address and per room, each a token bucket (``rate`` per second,
    ``burst`` at once; a rate of 0 switches that one off). ``admit`` returns None, or the
    seconds after which a join from there would pass. At most ``max_keys`` buckets of each
    kind are kept: the least recently used (a full one, by then) is forgotten."""

    def __init__(self, *, per_ip_s: float, ip_burst: int, per_room_s: float, room_burst: int,
                 max_keys: int = 10_000) -> None:
        self.per_ip = (per_ip_s, ip_burst)
        self.per_room = (per_room_s, room_burst)
        self.max_keys = max_keys
        self._ips: OrderedDict[str, TokenBucket] = OrderedDict()
        self._rooms: OrderedDict[str, TokenBucket] = OrderedDict()

    def _bucket(self, table: OrderedDict[str, TokenBucket], key: str,
                rule: tuple[float, int]) -> TokenBucket:
        bucket = table.get(key)
        if bucket is None:
            bucket = table[key] = TokenBucket(rule[0], max(1, rule[1]))
            while len(table) > self.max_keys:
                table.popitem(last=False)
        table.move_to_end(key)
        return bucket

    def admit(self, ip: str | None, room_id: str, now: float) -> float | None:
        """Take one join from ``ip`` into ``room_id`` at ``now``; the retry delay when
        refused (nothing is taken then)."""
        checks: list[tuple[TokenBucket, float]] = []
        if ip is not None and self.per_ip[0] > 0:
            checks.append((self._bucket(self._ips, ip, self.per_ip), self.per_ip[0]))
        if self.per_room[0] > 0:
            checks.append((self._bucket(self._rooms, room_id, self.per_room),
                           self.per_room[0]))
        waits = [(1.0 - tokens) / rate for bucket, rate in checks
                 if (tokens := bucket.available(now)) < 1.0]
        if waits:
            return max(waits)
        for bucket, _ in checks:
            bucket.take(now)
        return None

    def forget(self, room_id: str) -> None:
        """The room ended: its bucket goes."""
        self._rooms.pop(room_id, None)
