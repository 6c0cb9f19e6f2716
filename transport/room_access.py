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
a parameter) and tells each refused join its own turn. The asyncio shell is
``transport.ws_connection``.
"""

from __future__ import annotations

import hmac
import secrets
from collections import OrderedDict
from dataclasses import dataclass

from speechpipe.transport.codes import ErrorCode
from speechpipe.transport.quotas import TokenBucket
from speechpipe.transport.room import Role, Room

__all__ = ["EntryRequest", "Open", "Join", "Refuse", "Entry", "decide", "may_speak",
           "JoinLimiter", "JoinTurn"]


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


@dataclass(frozen=True, slots=True)
class JoinTurn:
    """A join refused for now: try again after ``wait_s``, with ``turn`` (the turn booked for
    it; None when none was: the line is booked ``book_ahead_s`` ahead already)."""

    wait_s: float
    turn: str | None = None


class JoinLimiter:
    """Joins per client address and per room, each a token bucket (``rate`` per second,
    ``burst`` at once; a rate of 0 switches that one off). ``join`` returns None (it passes)
    or a ``JoinTurn``; ``admit`` the same as the wait alone.

    A refused join is **booked a turn** (issue 74): the buckets that refused it lend it the next
    token they will have (they go into debt), so the next refused join is told one turn later,
    the one after that later still -- 200 listeners behind one address are each told when
    *their* turn comes instead of all coming back at once. A bucket that did not refuse it is
    charged when the turn is taken, not when it is booked: the turns one address books spend its
    own bucket, never another address's share of the room. The turn is a random id the refusal
    carries (``turn``) and the listener's next ``start`` brings back: from the same address into
    the same room, at or after its time, it passes (its token is paid); earlier, it is told the
    rest of its wait again. While turns are booked the buckets are in debt, so a join without
    one cannot jump the line. A turn not taken within ``turn_grace_s`` lapses (its token spent,
    as by a join that left). Turns are booked at most ``book_ahead_s`` ahead: past that nothing
    is booked and the wait is until the line ends (a longer one). At most ``max_keys`` buckets
    of each kind, and lines, are kept (the least recently used go), and at most ``max_turns``
    turns."""

    def __init__(self, *, per_ip_s: float, ip_burst: int, per_room_s: float, room_burst: int,
                 book_ahead_s: float = 30.0, turn_grace_s: float = 10.0,
                 max_keys: int = 10_000, max_turns: int = 100_000) -> None:
        self.per_ip = (per_ip_s, ip_burst)
        self.per_room = (per_room_s, room_burst)
        self.book_ahead_s = book_ahead_s
        self.turn_grace_s = turn_grace_s
        self.max_keys = max_keys
        self.max_turns = max_turns
        self._ips: OrderedDict[str, TokenBucket] = OrderedDict()
        self._rooms: OrderedDict[str, TokenBucket] = OrderedDict()
        # (address, room) -> its booked turns (id -> when it is due), earliest first
        self._turns: OrderedDict[tuple[str | None, str], dict[str, float]] = OrderedDict()
        self._booked = 0
        # turn id -> the buckets that did not refuse it, charged when the turn is taken
        self._charge_later: dict[str, list[TokenBucket]] = {}

    def _bucket(self, table: OrderedDict[str, TokenBucket], key: str,
                rule: tuple[float, int]) -> TokenBucket:
        bucket = table.get(key)
        if bucket is None:
            bucket = table[key] = TokenBucket(rule[0], max(1, rule[1]))
            while len(table) > self.max_keys:
                table.popitem(last=False)
        table.move_to_end(key)
        return bucket

    def _line(self, key: tuple[str | None, str], now: float) -> dict[str, float]:
        """The turns booked for ``key``, lapsed ones dropped."""
        line = self._turns.get(key)
        if line is None:
            line = self._turns[key] = {}
            while len(self._turns) > self.max_keys:
                self._drop(self._turns.popitem(last=False)[1])
        self._turns.move_to_end(key)
        for turn, due in list(line.items()):  # booked in order: the earliest first
            if due + self.turn_grace_s >= now:
                break
            self._drop({turn: line.pop(turn)})
        return line

    def _drop(self, turns: dict[str, float]) -> None:
        """Forget lapsed or dropped ``turns``."""
        self._booked -= len(turns)
        for turn in turns:
            self._charge_later.pop(turn, None)

    def join(self, ip: str | None, room_id: str, now: float,
             turn: str | None = None) -> JoinTurn | None:
        """One join from ``ip`` into ``room_id`` at ``now``, bringing ``turn`` (from an
        earlier refusal) or None: None when it passes, else when to try again and with
        which turn (see the class docs)."""
        checks: list[tuple[TokenBucket, float]] = []
        if ip is not None and self.per_ip[0] > 0:
            checks.append((self._bucket(self._ips, ip, self.per_ip), self.per_ip[0]))
        if self.per_room[0] > 0:
            checks.append((self._bucket(self._rooms, room_id, self.per_room),
                           self.per_room[0]))
        if not checks:
            return None
        line = self._line((ip, room_id), now)
        due = line.get(turn) if turn is not None else None
        if due is not None:  # its own turn: paid for already
            if now < due:
                return JoinTurn(due - now, turn)
            del line[turn]  # type: ignore[arg-type]
            self._booked -= 1
            for bucket in self._charge_later.pop(turn, ()):  # type: ignore[arg-type]
                bucket.borrow(now)
            return None
        refusing = [(bucket, (1.0 - tokens) / rate) for bucket, rate in checks
                    if (tokens := bucket.available(now)) < 1.0]
        if not refusing:
            for bucket, _ in checks:
                bucket.take(now)
            return None
        wait = max(w for _, w in refusing)
        if wait > self.book_ahead_s or self._booked >= self.max_turns:
            return JoinTurn(wait)  # nothing booked: come back when the line is shorter
        for bucket, _ in refusing:
            bucket.borrow(now)
        booked = secrets.token_urlsafe(9)
        lenders = {id(bucket) for bucket, _ in refusing}
        self._charge_later[booked] = [b for b, _ in checks if id(b) not in lenders]
        line[booked] = now + wait
        self._booked += 1
        return JoinTurn(wait, booked)

    def admit(self, ip: str | None, room_id: str, now: float,
              turn: str | None = None) -> float | None:
        """``join``'s wait alone: None when the join passes."""
        refused = self.join(ip, room_id, now, turn)
        return None if refused is None else refused.wait_s

    def forget(self, room_id: str) -> None:
        """The room ended: its bucket and its lines go."""
        self._rooms.pop(room_id, None)
        for key in [k for k in self._turns if k[1] == room_id]:
            self._drop(self._turns.pop(key))
