"""The ledger as a Ray actor: a named, detached actor wrapping ``LedgerCore``.

``LedgerService`` is a plain class (the actor's body); ``ledger_handle`` turns it into the
one named actor of the cluster (``speechpipe-ledger`` in namespace ``speechpipe``), created by
the first node that joins and found by the others. It is restarted by Ray after a crash
(``max_restarts=-1``) with an empty core and a new ``epoch``: the nodes see the epoch change
on their next call and re-register what they hold (``LedgerCore.register``).

Calls are not retried by Ray (``max_task_retries=0``): a node that cannot reach the ledger
falls back to its own capacity (``speechpipe.cluster.node``) rather than wait.
Imports Ray only inside ``ledger_handle``.

**Cluster secret.** With ``SPEECHPIPE_CLUSTER_SECRET`` set on the nodes, the ledger is created
with it and every call that changes its state (``register``, ``heartbeat``, ``request``,
``status``, ``claim``, ``release``, ``drain``, ``leave``) carries ``sign(secret, method,
args)``, an HMAC-SHA256 of the call: a call without the right tag is answered
``(UNAUTHORIZED, reason)`` and changes nothing, so a driver that can reach the Ray port but
lacks the secret cannot register a node (and so receive redirects) or end sessions. The
ledger answers each registration's fresh nonce with ``proof`` (an HMAC under the secret), so
a node does not follow an actor that took the ledger's name without the secret. It is
not encryption and Ray itself has no authentication: the Ray ports still belong on a
private network (``docs/scaling.md``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from typing import Any, TypeVar

from speechpipe.cluster.ledger_core import HeldSession, LedgerCore, LedgerOptions, Verdict

__all__ = ["LedgerService", "ledger_handle", "sign", "proof", "LEDGER_NAME", "NAMESPACE",
           "UNAUTHORIZED", "SECRET_ENV", "SIGNED"]

LEDGER_NAME = "speechpipe-ledger"
NAMESPACE = "speechpipe"
UNAUTHORIZED = "unauthorized"  # the epoch of an answer to a call without the right tag
SECRET_ENV = "SPEECHPIPE_CLUSTER_SECRET"
SIGNED = frozenset({"register", "heartbeat", "request", "status", "claim", "release", "drain",
                    "leave", "rooms", "room_node"})
# (the calls that take a tag first; the others only read)

T = TypeVar("T")


def sign(secret: str, method: str, args: tuple[Any, ...]) -> str:
    """The tag of one ledger call: HMAC-SHA256 over the method and its arguments ("" when
    there is no secret)."""
    if not secret:
        return ""
    message = json.dumps([method, *args], separators=(",", ":"), default=str).encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def proof(secret: str, nonce: str, epoch: str) -> str:
    """The ledger's answer to a registration's ``nonce``: HMAC-SHA256 under the secret ("" when
    there is no secret)."""
    return sign(secret, "ledger", (nonce, epoch))


class LedgerService:
    """Every method returns ``(epoch, result)`` so callers notice a restarted ledger;
    ``(UNAUTHORIZED, reason)`` for a call whose tag does not match the cluster secret."""

    def __init__(self, options: LedgerOptions | None = None, secret: str = "") -> None:
        self.core = LedgerCore(options or LedgerOptions())
        self.epoch = secrets.token_hex(4)
        self.started = time.monotonic()
        self._secret = secret
        self.refused_calls = 0

    def _now(self) -> float:
        return time.monotonic() - self.started

    def _signed(self, tag: str, method: str, args: tuple[Any, ...],
                run: Callable[[], T]) -> tuple[str, T | str]:
        if self._secret and not hmac.compare_digest(str(tag), sign(self._secret, method, args)):
            self.refused_calls += 1
            return UNAUTHORIZED, "this call is not signed with the cluster secret"
        return self.epoch, run()

    def register(self, tag: str, node: str, url: str, capacity: int,
                 held: list[tuple[Any, ...]], nonce: str = "") -> tuple[str, str]:
        """``LedgerCore.register``: a node joins with the sessions it holds, each
        ``(ticket, client, token[, age_s])``. Answers ``proof(secret, nonce, epoch)``, so the
        node knows this ledger holds the cluster secret too (not an impostor's actor)."""
        def run() -> str:
            sessions = [HeldSession(str(h[0]), str(h[1]), str(h[2]),
                                    float(h[3]) if len(h) > 3 else 0.0) for h in held]
            self.core.register(node, url, capacity, sessions, self._now())
            return proof(self._secret, nonce, self.epoch)
        return self._signed(tag, "register", (node, url, capacity, held, nonce), run)

    def heartbeat(self, tag: str, node: str) -> tuple[str, tuple[str, dict[str, Any]] | str]:
        """``LedgerCore.heartbeat``, with the ledger's snapshot."""
        def run() -> tuple[str, dict[str, Any]]:
            answer = self.core.heartbeat(node, self._now())
            return answer, self.core.snapshot()
        return self._signed(tag, "heartbeat", (node,), run)

    def request(self, tag: str, ticket: str, node: str, client: str, token: str,
                resume: str, waiting_s: float = 0.0) -> tuple[str, Verdict | str]:
        """``LedgerCore.request``: ask for a slot for a new session."""
        return self._signed(tag, "request", (ticket, node, client, token, resume, waiting_s),
                            lambda: self.core.request(ticket, node, client, self._now(),
                                                      token=token, resume=resume,
                                                      waiting_s=waiting_s))

    def status(self, tag: str, ticket: str, node: str) -> tuple[str, Verdict | str]:
        """``LedgerCore.status``: where a ticket stands now."""
        return self._signed(tag, "status", (ticket, node),
                            lambda: self.core.status(ticket, node, self._now()))

    def claim(self, tag: str, ticket: str, node: str) -> tuple[str, bool | str]:
        """``LedgerCore.claim``: a node takes up its reservation."""
        return self._signed(tag, "claim", (ticket, node),
                            lambda: self.core.claim(ticket, node, self._now()))

    def release(self, tag: str, ticket: str) -> tuple[str, None | str]:
        """``LedgerCore.release``: a session ended."""
        return self._signed(tag, "release", (ticket,),
                            lambda: self.core.release(ticket, self._now()))

    def drain(self, tag: str, node: str) -> tuple[str, bool | str]:
        """``LedgerCore.drain``: the node takes no new sessions."""
        return self._signed(tag, "drain", (node,), lambda: self.core.drain(node, self._now()))

    def leave(self, tag: str, node: str) -> tuple[str, None | str]:
        """``LedgerCore.leave``: a node leaves the cluster."""
        return self._signed(tag, "leave", (node,), lambda: self.core.leave(node, self._now()))

    def rooms(self, tag: str, node: str,
              rooms: dict[str, dict[str, int]]) -> tuple[str, list[str] | str]:
        """``LedgerCore.set_rooms``: a node's rooms and their counts."""
        return self._signed(tag, "rooms", (node, rooms),
                            lambda: self.core.set_rooms(node, rooms, self._now()))

    def room_node(self, tag: str, room: str) -> tuple[str, tuple[str, str] | None | str]:
        """``LedgerCore.room_node``: where a room lives (signed: room ids are capabilities)."""
        return self._signed(tag, "room_node", (room,), lambda: self.core.room_node(room))

    def find_node(self, name: str) -> tuple[str, str | None]:
        """A node by its id or public URL."""
        for view in self.core.node_views():
            if name in (view.node, view.url):
                return self.epoch, view.node
        return self.epoch, None

    def snapshot(self) -> tuple[str, dict[str, Any]]:
        """The ledger's state after expiring what is due (read-only: not signed)."""
        self.core.tick(self._now())
        return self.epoch, {**self.core.snapshot(), "refused_calls": self.refused_calls,
                            "signed": bool(self._secret)}

    def ping(self) -> tuple[str, int]:
        """The actor's process id (a liveness check)."""
        import os

        return self.epoch, os.getpid()


def ledger_handle(options: LedgerOptions | None = None, *, create: bool = True,
                  secret: str = "") -> Any:
    """The cluster's ledger actor (created if absent and ``create``, with ``secret`` as the
    cluster secret); needs ``ray.init``."""
    import ray

    if not create:
        return ray.get_actor(LEDGER_NAME, namespace=NAMESPACE)
    actor = ray.remote(LedgerService)
    return actor.options(
        name=LEDGER_NAME,
        namespace=NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        max_restarts=-1,
        max_task_retries=0,
        num_cpus=0,
        max_concurrency=1,
    ).remote(options or LedgerOptions(), secret)
