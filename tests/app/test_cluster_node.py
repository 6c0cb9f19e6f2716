"""A node's cluster gate against the real ledger service, in process.

Only Ray's transport is replaced (``method.remote(...).future()`` answered in process), so
the ledger can be made unreachable or restarted at will; the real-Ray path is covered by
``tests/cluster/test_cluster_ray.py``. Also: Ray stays out of plain ``speechpipe serve``, and
``--cluster`` without Ray fails with one line.
"""

from __future__ import annotations

import subprocess
import sys

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


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


def test_plain_serve_never_imports_ray():
    done = _run(
        "import sys\n"
        "from speechpipe.cli import build_parser\n"
        "from speechpipe.server.serve import ServerApp, serve_options\n"
        "args = build_parser().parse_args(['serve', '--capacity', '1'])\n"
        "serve_options(args)\n"
        "ServerApp('127.0.0.1', 0, load=serve_options(args)[2])\n"
        "print('ray' in sys.modules)\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_cluster_without_ray_fails_with_one_line():
    done = _run(
        "import sys\n"
        "sys.modules['ray'] = None  # as if not installed\n"
        "from speechpipe.cli import main\n"
        "sys.exit(main(['serve', '--capacity', '1', '--port', '0',\n"
        "               '--cluster', '127.0.0.1:6379', '--public-url', 'ws://a/ws']))\n"
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert lines == ["speechpipe: --cluster needs Ray: pip install 'speechpipe[cluster]'"]


@pytest.mark.parametrize("argv, message", [
    (["--cluster", "127.0.0.1:6379"], "--cluster needs --public-url"),
    (["--cluster", "nohostport", "--public-url", "ws://a/ws"], "--cluster wants HEAD:PORT"),
    (["--cluster", "h:1", "--public-url", "http://a/ws"], "must start with ws://"),
])
def test_bad_cluster_flags_fail_with_one_line(argv: list[str], message: str):
    done = subprocess.run([sys.executable, "-m", "speechpipe", "serve", "--capacity", "1",
                           "--port", "0", *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]


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


@pytest.mark.cluster  # Ray's client in a subprocess, against a closed port
def test_an_unreachable_head_fails_with_one_line():
    import socket

    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = subprocess.run([sys.executable, "-m", "speechpipe", "cluster", "status",
                           "--cluster", f"127.0.0.1:{port}"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        f"speechpipe: cannot reach the Ray head at 127.0.0.1:{port}: ConnectionRefusedError"]
