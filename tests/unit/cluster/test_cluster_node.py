"""A node's cluster gate against the real ledger service, in process.

Only Ray's transport is replaced (``method.remote(...).future()`` answered in process), so
the ledger can be made unreachable or restarted at will; the real-Ray path is covered by
``tests/cluster/test_cluster_ray.py``; the flags and Ray's import by
``tests/cli/cluster/test_cluster_flags.py``."""

from __future__ import annotations

import pytest

from speechpipe.cluster.ledger import LedgerService
from speechpipe.cluster.ledger_core import LedgerOptions
from speechpipe.cluster.node import ClusterNode, ClusterOptions
from speechpipe.errors import AdmissionError, SessionRedirect
from tests.fakes import Heard, InProcessLedger


async def node(ledger: InProcessLedger, name: str, capacity: int = 1) -> ClusterNode:
    result = ClusterNode(ClusterOptions(address="unused:0", public_url=f"ws://{name}/ws",
                                        capacity=capacity, call_timeout_s=1.0, poll_s=0.01))
    result.handle = ledger
    await result._register()
    return result


async def test_admits_here_then_redirects_to_the_free_node_and_the_ticket_is_honoured():
    ledger = InProcessLedger()
    a, b = await node(ledger, "a"), await node(ledger, "b")
    async with a.gate.slot("c1", Heard()) as first:
        assert first in a.held
        with pytest.raises(SessionRedirect) as hop:
            async with a.gate.slot("c2", Heard()):
                pass
        assert hop.value.url == "ws://b/ws" and hop.value.expires_in_s > 0
        heard = Heard()
        async with b.gate.slot("c2", heard, ticket=hop.value.ticket) as second:
            assert second == hop.value.ticket and not heard.events  # not queued again
            assert ledger.service.core.snapshot()["active"] == 2
    core = ledger.service.core
    assert (core.admitted, core.ended, len(core.active)) == (2, 2, 0)


async def test_an_unreachable_ledger_leaves_each_node_its_own_capacity_and_says_so():
    ledger = InProcessLedger()
    a = await node(ledger, "a", capacity=1)
    ledger.down = True
    heard = Heard()
    async with a.gate.slot("c1", heard) as ticket:
        assert [e.detail.get("ledger") for e in heard.events] == ["unreachable"]
        assert not a.reachable
        with pytest.raises(AdmissionError, match="unreachable and this node is full"):
            async with a.gate.slot("c2", Heard()):
                pass
        # the ledger comes back restarted (empty, new epoch): the node re-registers its session
        ledger.service = LedgerService(LedgerOptions())
        ledger.down = False
        snapshot = await a.call("snapshot")
        assert snapshot["active"] == 1 and a.reachable
        assert ticket in ledger.service.core.active
        await node(ledger, "b")
        with pytest.raises(SessionRedirect):  # full here; the restarted ledger knows it
            async with a.gate.slot("c3", Heard()):
                pass


async def test_after_an_outage_the_node_registers_what_it_admitted_meanwhile():
    ledger = InProcessLedger()
    a = await node(ledger, "a", capacity=2)
    await node(ledger, "b", capacity=1)
    ledger.down = True
    async with a.gate.slot("c1", Heard()) as local:
        ledger.down = False  # the same ledger (same epoch) answers again
        await a.call("snapshot")
        assert local in ledger.service.core.active  # adopted, so its slot is not given away
        async with a.gate.slot("c2", Heard()):
            with pytest.raises(SessionRedirect) as hop:  # a is full now: b
                async with a.gate.slot("c3", Heard()):
                    pass
            assert hop.value.url == "ws://b/ws"
    core = ledger.service.core
    core.check()
    assert core.admitted == core.ended + core.lost + len(core.active)


def test_start_carries_ticket_and_resume_and_rejects_bad_ones():
    from speechpipe.transport.codes import CloseCode
    from speechpipe.transport.protocol import ProtocolError, parse_start

    start = parse_start({"type": "start", "ticket": "abc123", "resume": "def456"})
    assert (start.ticket, start.resume) == ("abc123", "def456")
    assert parse_start({"type": "start"}).ticket is None
    for bad in ({"ticket": 5}, {"resume": "x" * 65}):
        with pytest.raises(ProtocolError) as err:
            parse_start({"type": "start", **bad})
        assert err.value.close_code == CloseCode.BAD_START
