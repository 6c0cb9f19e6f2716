"""``bench room --client-nice``: the listeners' processes run below the server when asked
(a niceness out of range: the cli tier)."""

from __future__ import annotations

import queue
import threading

import pytest

from speechpipe.bench import room


@pytest.mark.parametrize("nice", [0, 19])
def test_the_listener_worker_lowers_its_own_priority_only_when_asked(
        monkeypatch: pytest.MonkeyPatch, nice: int) -> None:
    calls: list[int] = []
    monkeypatch.setattr(room.os, "nice", calls.append)
    stop, out = threading.Event(), queue.Queue()
    stop.set()  # no listeners and nothing to wait for: the worker reports at once
    room._listener_worker("ws://127.0.0.1:9/ws", "r", 0, queue.Queue(), stop, out, nice)
    assert out.get_nowait() == []
    assert calls == ([nice] if nice else [])
