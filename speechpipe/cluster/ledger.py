"""The ledger as a Ray actor: a named, detached actor wrapping ``LedgerCore``.

``LedgerService`` is a plain class (the actor's body); ``ledger_handle`` turns it into the
one named actor of the cluster (``speechpipe-ledger`` in namespace ``speechpipe``), created by
the first node that joins and found by the others. It is restarted by Ray after a crash
(``max_restarts=-1``) with an empty core and a new ``epoch``: the nodes see the epoch change
on their next call and re-register what they hold (``LedgerCore.register``).

Calls are not retried by Ray (``max_task_retries=0``): a node that cannot reach the ledger
falls back to its own capacity (``speechpipe.cluster.node``) rather than wait.
Imports Ray only inside ``ledger_handle``.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from speechpipe.cluster.ledger_core import HeldSession, LedgerCore, LedgerOptions, Verdict

__all__ = ["LedgerService", "ledger_handle", "LEDGER_NAME", "NAMESPACE"]

LEDGER_NAME = "speechpipe-ledger"
NAMESPACE = "speechpipe"


class LedgerService:
    """Every method returns ``(epoch, result)`` so callers notice a restarted ledger."""

    def __init__(self, options: LedgerOptions | None = None) -> None:
        self.core = LedgerCore(options or LedgerOptions())
        self.epoch = secrets.token_hex(4)
        self.started = time.monotonic()

    def _now(self) -> float:
        return time.monotonic() - self.started

    def register(self, node: str, url: str, capacity: int,
                 held: list[tuple[str, str, str]]) -> tuple[str, None]:
        """``LedgerCore.register``: a node joins with the sessions it holds."""
        sessions = [HeldSession(t, c, k) for t, c, k in held]
        self.core.register(node, url, capacity, sessions, self._now())
        return self.epoch, None

    def heartbeat(self, node: str) -> tuple[str, tuple[str, dict[str, Any]]]:
        """``LedgerCore.heartbeat``, with the ledger's snapshot."""
        answer = self.core.heartbeat(node, self._now())
        return self.epoch, (answer, self.core.snapshot())

    def request(self, ticket: str, node: str, client: str, token: str,
                resume: str) -> tuple[str, Verdict]:
        """``LedgerCore.request``: ask for a slot for a new session."""
        verdict = self.core.request(ticket, node, client, self._now(), token=token,
                                    resume=resume)
        return self.epoch, verdict

    def status(self, ticket: str, node: str) -> tuple[str, Verdict]:
        """``LedgerCore.status``: where a ticket stands now."""
        return self.epoch, self.core.status(ticket, node, self._now())

    def claim(self, ticket: str, node: str) -> tuple[str, bool]:
        """``LedgerCore.claim``: a node takes up its reservation."""
        return self.epoch, self.core.claim(ticket, node, self._now())

    def release(self, ticket: str) -> tuple[str, None]:
        """``LedgerCore.release``: a session ended."""
        self.core.release(ticket, self._now())
        return self.epoch, None

    def drain(self, node: str) -> tuple[str, bool]:
        """``LedgerCore.drain``: the node takes no new sessions."""
        return self.epoch, self.core.drain(node, self._now())

    def leave(self, node: str) -> tuple[str, None]:
        """``LedgerCore.leave``: a node leaves the cluster."""
        self.core.leave(node, self._now())
        return self.epoch, None

    def find_node(self, name: str) -> tuple[str, str | None]:
        """A node by its id or public URL."""
        for view in self.core.node_views():
            if name in (view.node, view.url):
                return self.epoch, view.node
        return self.epoch, None

    def snapshot(self) -> tuple[str, dict[str, Any]]:
        """The ledger's state after expiring what is due."""
        self.core.tick(self._now())
        return self.epoch, self.core.snapshot()

    def ping(self) -> tuple[str, int]:
        """The actor's process id (a liveness check)."""
        import os

        return self.epoch, os.getpid()


def ledger_handle(options: LedgerOptions | None = None, *, create: bool = True) -> Any:
    """The cluster's ledger actor (created if absent and ``create``); needs ``ray.init``."""
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
    ).remote(options or LedgerOptions())
