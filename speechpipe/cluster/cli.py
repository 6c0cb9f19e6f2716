"""``speechpipe cluster status`` and ``speechpipe cluster drain NODE`` (operators' commands).

Both join the Ray cluster briefly as a driver and ask the ledger actor; neither creates the
ledger (no node has joined yet: exit 1 with one line). ``drain`` signs its call with
``SPEECHPIPE_CLUSTER_SECRET`` when the cluster has one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from speechpipe.errors import InputError

__all__ = ["register", "format_status"]


def register(commands: Any) -> None:
    """Add the ``cluster`` command and its ``status``/``drain`` subcommands."""
    cluster = commands.add_parser("cluster", help="inspect or drain a Ray cluster of nodes")
    sub = cluster.add_subparsers(dest="cluster_command", required=True)
    status = sub.add_parser("status", help="nodes, sessions, the line, lost sessions, rooms")
    drain = sub.add_parser("drain", help="a node takes no new sessions, then exits")
    drain.add_argument("node", help="the node's id or public URL (as `cluster status` shows)")
    for parser in (status, drain):
        parser.add_argument("--cluster", metavar="HEAD:PORT",
                            default=os.environ.get("RAY_ADDRESS"),
                            help="the Ray head (default: $RAY_ADDRESS)")
    status.add_argument("--json", action="store_true", help="print the ledger's snapshot")
    status.set_defaults(handler=cmd_status)
    drain.set_defaults(handler=cmd_drain)


def _ledger(args: argparse.Namespace) -> Any:
    if not args.cluster:
        raise InputError("give --cluster HEAD:PORT (or set RAY_ADDRESS)")
    from speechpipe.cluster.ledger import ledger_handle
    from speechpipe.cluster.node import connect_ray

    connect_ray(args.cluster)
    try:
        return ledger_handle(create=False)
    except ValueError:
        raise SystemExit("speechpipe: no ledger in this cluster (no node has joined)") from None


def ray_get(ref: Any) -> tuple[str, Any]:
    """``(epoch, result)`` of one ledger call (10 s at most)."""
    import ray

    epoch, result = ray.get(ref, timeout=10)
    return str(epoch), result


def _get(ref: Any) -> Any:
    return ray_get(ref)[1]


def cmd_status(args: argparse.Namespace) -> int:
    """Print the cluster's nodes and sessions (JSON with ``--json``); returns 0."""
    snapshot = _get(_ledger(args).snapshot.remote())
    print(json.dumps(snapshot, indent=2) if args.json else format_status(snapshot))
    return 0


def cmd_drain(args: argparse.Namespace) -> int:
    """Ask the ledger to drain a node; exits with an error if it is unknown."""
    ledger = _ledger(args)
    node = _get(ledger.find_node.remote(args.node))
    if node is None:
        raise InputError(f"no node {args.node!r} in the cluster")
    from speechpipe.cluster.ledger import UNAUTHORIZED, sign
    from speechpipe.cluster.node import cluster_secret

    epoch, _ = ray_get(ledger.drain.remote(sign(cluster_secret(), "drain", (node,)), node))
    if epoch == UNAUTHORIZED:
        raise SystemExit("speechpipe: the ledger refused the drain: set the cluster's "
                         "SPEECHPIPE_CLUSTER_SECRET")
    print(f"draining {node}: no new sessions; it exits when its sessions end "
          "(or at its --drain-deadline)", file=sys.stderr)
    return 0


def format_status(snapshot: dict[str, Any]) -> str:
    """A ledger snapshot as a table of nodes and a line of totals."""
    lines = [f"{'node':<36} {'state':<9} {'capacity':>8} {'sessions':>8} {'reserved':>8}"]
    for node in snapshot.get("nodes", []):
        state = "lost" if not node["alive"] else "draining" if node["draining"] else "up"
        lines.append(f"{node['url']:<36} {state:<9} {node['capacity']:>8} "
                     f"{node['active']:>8} {node['reserved']:>8}")
    for room in snapshot.get("rooms", []):
        lines.append(f"room on {room['node']}: {room.get('speakers', 0)} speakers, "
                     f"{room.get('participants', 0)} participants, "
                     f"{room.get('listeners', 0)} listeners")
    lines.append(
        f"capacity {snapshot['capacity']}, active {snapshot['active']}, "
        f"waiting {snapshot['waiting']} (line), lost {snapshot['lost']} "
        f"(resumable now {snapshot['resumable']}), admitted {snapshot['admitted']}, "
        f"ended {snapshot['ended']}, refused {snapshot['refused']}")
    return "\n".join(lines)
