"""The socket guard (``tests/netguard.py``) fails a test that reaches past loopback: a pytest
run, in a subprocess with the guard as its plugin, on a generated test file that tries TCP
and UDP to documentation addresses (RFC 5737/3849) and to loopback, Unix and netlink sockets.

The inner run goes through ``scripts/netns-pytest`` (a private network namespace), so even a
broken guard could not send anything off this machine."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import ifaddr
import pytest

from tests.helpers import ROOT
from tests.netguard import is_local_address

REPO = ROOT
NETNS_PYTEST = REPO / "scripts" / "netns-pytest"

INNER = textwrap.dedent(
    '''
    import asyncio
    import socket
    import struct

    import pytest


    def test_tcp_connect_to_another_machine():
        with socket.create_connection(("192.0.2.1", 9), timeout=2):
            pass


    def test_udp_sendto_another_machine():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.sendto(b"stun", ("203.0.113.1", 3478))


    def test_ipv6_connect_ex_to_another_machine():
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.settimeout(2)
            sock.connect_ex(("2001:db8::1", 443))


    async def test_udp_from_a_server_task_that_swallows_the_error():
        """asyncio hands a datagram send error to the protocol (as aioice's STUN sends
        would): the test body sees nothing, the guard still fails the test."""
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0)
        )

        async def server():
            transport.sendto(b"stun", ("203.0.113.2", 3478))

        await asyncio.create_task(server())
        transport.close()


    async def test_connected_udp_endpoint_error_caught_by_the_caller():
        loop = asyncio.get_running_loop()
        with pytest.raises(OSError):
            await loop.create_datagram_endpoint(
                asyncio.DatagramProtocol, remote_addr=("198.51.100.3", 3478)
            )


    async def test_loopback_unix_and_netlink_still_work(tmp_path):
        server = await asyncio.start_server(
            lambda r, w: (w.write(b"pong"), w.close()), "127.0.0.1", 0
        )
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await reader.read() == b"pong"
        writer.close()
        server.close()
        for host in ("127.0.0.1", "::1"):
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            with socket.socket(family, socket.SOCK_DGRAM) as rx, \\
                    socket.socket(family, socket.SOCK_DGRAM) as tx:
                rx.bind((host, 0))
                tx.sendto(b"ping", rx.getsockname())
                assert rx.recv(16) == b"ping"
        left, right = socket.socketpair()
        left.sendall(b"unix")
        assert right.recv(16) == b"unix"
        left.close()
        right.close()
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as rx, \\
                socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as tx:
            rx.bind(str(tmp_path / "sock"))
            tx.sendto(b"dgram", str(tmp_path / "sock"))
            assert rx.recv(16) == b"dgram"
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as nl:
            nl.bind((0, 0))
            rtm_getaddr, flags = 22, 0x1 | 0x300  # NLM_F_REQUEST | NLM_F_DUMP
            request = struct.pack("=IHHII", 16 + 8, rtm_getaddr, flags, 1, 0)
            request += struct.pack("=BBBBI", socket.AF_UNSPEC, 0, 0, 0, 0)
            nl.sendto(request, (0, 0))
            assert nl.recv(65536)
    '''
)

REFUSED = {
    "test_tcp_connect_to_another_machine": "refused test traffic to 192.0.2.1 port 9 (TCP connect)",
    "test_udp_sendto_another_machine": "refused test traffic to 203.0.113.1 port 3478 (UDP sendto)",
    "test_ipv6_connect_ex_to_another_machine":
        "refused test traffic to 2001:db8::1 port 443 (TCP connect_ex)",
    "test_udp_from_a_server_task_that_swallows_the_error":
        "refused test traffic to 203.0.113.2 port 3478 (UDP sendto)",
    "test_connected_udp_endpoint_error_caught_by_the_caller":
        "refused test traffic to 198.51.100.3 port 3478 (UDP connect)",
}


def namespace_runner() -> list[str]:
    """How to start the inner pytest: in a private network namespace where one can be made,
    else directly where this machine has only allowed addresses; skips otherwise."""
    probe = ["unshare", "--net"] + ([] if os.geteuid() == 0 else ["--map-root-user"])
    if shutil.which("unshare") and shutil.which("ip"):
        if subprocess.run([*probe, "--", "true"], capture_output=True).returncode == 0:
            return [str(NETNS_PYTEST)]
    addresses = [ip.ip if isinstance(ip.ip, str) else ip.ip[0]
                 for adapter in ifaddr.get_adapters() for ip in adapter.ips]
    if all(is_local_address(address) for address in addresses):
        return [sys.executable, "-m", "pytest"]
    pytest.skip("cannot make a private network namespace here (unshare), and a broken guard "
                "would send the inner test's packets off this machine")


def failure_sections(output: str) -> dict[str, str]:
    """Each failed test's section of pytest's report, by test name."""
    parts = re.split(r"^_{3,} (\S+) _{3,}$", output, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_traffic_past_loopback_fails_the_test_with_the_address(tmp_path: Path) -> None:
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "test_reach.py").write_text(INNER)
    env = {**os.environ, "PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run(
        [*namespace_runner(), "-p", "tests.netguard", "-p", "no:cacheprovider",
         "-o", "asyncio_mode=auto", "-q", "-rA", "test_reach.py"],
        cwd=inner, env=env, capture_output=True, text=True, timeout=120,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 1, output
    sections = failure_sections(output)
    assert sorted(sections) == sorted(REFUSED), output
    for name, message in REFUSED.items():
        assert message in sections[name], sections[name]
    assert "PASSED test_reach.py::test_loopback_unix_and_netlink_still_work" in output, output
    assert "1 passed" in output and "5 failed" in output, output
