"""How a node joins the cluster, as the configuration tree holds it (a leaf module).

``ClusterSettings`` is the ``cluster`` group of ``speechpipe.config`` (``--set cluster.*``;
``--cluster``, ``--public-url``, ``--drain-deadline``, ``--cluster-lease`` and
``--resume-window`` are its shorthand flags). ``speechpipe.cluster.node.ClusterOptions`` and
``speechpipe.cluster.ledger_core.LedgerOptions`` take their defaults from here.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ClusterSettings"]


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """``serve --cluster``: the Ray head, this node's URL, drain and ledger timings."""

    address: str | None = None  # the Ray head, HOST:PORT; None: not a cluster node
    public_url: str | None = None  # this node's /ws URL as clients reach it (redirects)
    drain_deadline_s: float = 120.0  # a drained node lets sessions finish this long
    lease_s: float = 6.0  # a node silent this long is lost (set by the ledger's creator)
    resume_window_s: float = 60.0  # a lost session may resume ahead of the line this long
