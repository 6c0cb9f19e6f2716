"""``bench room``'s first-to-last listener spread: per speech chunk and per message, on the
clock a key function gives (when the listeners read each message, or when the kernel received
it at their sockets), and the lines the bench prints for both."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from speechpipe.bench.stats import percentile_ms
from speechpipe.transport.client import ListenerRun

__all__ = ["spread", "read_times", "arrival_times", "missing_arrivals", "spread_lines",
           "SPREAD_BAR_S"]

SPREAD_BAR_S = 0.05  # issue 42: first-to-last listener p95, per chunk and per message


def read_times(run: ListenerRun) -> tuple[Sequence[float], Sequence[float]]:
    """When a listener read each speech chunk and each message (its monotonic clock)."""
    return [t for t, _, _ in run.audio], [t for t, _ in run.events]


def arrival_times(run: ListenerRun) -> tuple[Sequence[float], Sequence[float]]:
    """When the kernel received each speech chunk and each message at a listener's socket
    (CLOCK_REALTIME; recorded by ``room_listeners``, empty from ``listen_room``)."""
    return run.audio_arrived, run.arrived


def missing_arrivals(runs: Sequence[ListenerRun]) -> int:
    """Messages and chunks whose read carried no kernel receive time (NaN)."""
    return sum(1 for r in runs for t in (*r.arrived, *r.audio_arrived) if math.isnan(t))


def _first_to_last(times: list[Sequence[float]]) -> list[float]:
    """Per index, the latest of the listeners' times less the earliest; an index some
    listener has no time for (NaN) is left out."""
    spreads = []
    for i in range(min(map(len, times), default=0)):
        at = [t[i] for t in times]
        if all(math.isfinite(x) for x in at):
            spreads.append(max(at) - min(at))
    return spreads


def spread(runs: list[ListenerRun],
           times: Callable[[ListenerRun], tuple[Sequence[float], Sequence[float]]] = read_times,
           ) -> tuple[list[float], list[float]]:
    """First-to-last-listener delay (s) per speech chunk, and per message of any kind, on the
    clock ``times`` gives a listener's (chunks, messages) on: by default when it read them;
    ``room_listeners.arrival_times``: when the kernel received them."""
    per_listener = [times(r) for r in runs]
    return (_first_to_last([chunks for chunks, _ in per_listener]),
            _first_to_last([messages for _, messages in per_listener]))


def _percentiles(chunks: list[float], messages: list[float]) -> str:
    p = percentile_ms
    return (f"per speech chunk p50 {p(chunks, 50):.1f} ms, p95 {p(chunks, 95):.1f} ms "
            f"({len(chunks)} chunks); per message p50 {p(messages, 50):.1f} ms, p95 "
            f"{p(messages, 95):.1f} ms ({len(messages)} messages)")


def spread_lines(runs: list[ListenerRun]) -> list[str]:
    """The first-to-last listener spread as the listeners' processes read each message and,
    when their client recorded it, as the kernel received it at their sockets; then both
    p95s against the issue's bar (reported only: the bench's exit code does not use it)."""
    read, at_sockets = spread(runs), spread(runs, arrival_times)
    recorded = any(r.arrived or r.audio_arrived for r in runs)
    missing = missing_arrivals(runs)

    def bar(figures: tuple[list[float], list[float]]) -> str:
        p95 = [percentile_ms(f, 95) for f in figures]
        held = all(x <= SPREAD_BAR_S * 1000 for x in p95)  # False for NaN
        return f"{p95[0]:.1f} / {p95[1]:.1f} ms {'yes' if held else 'NO'}"

    return [
        "  spread:        first-to-last listener, as read by the listener processes "
        f"(time.monotonic() as Python read it): {_percentiles(*read)}",
        "                 at the listeners' sockets (kernel receive time, SO_TIMESTAMPNS): "
        + (_percentiles(*at_sockets) if recorded else "not recorded (--client-procs 1)")
        + (f"; {missing} without a kernel time, left out" if missing else ""),
        f"  spread bar:    p95 per chunk / per message <= {SPREAD_BAR_S * 1000:g} ms: at the "
        f"sockets {bar(at_sockets) if recorded else '-'}; as read {bar(read)} (reported only)"]
