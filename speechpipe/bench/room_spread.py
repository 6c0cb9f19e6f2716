"""``bench room``'s first-to-last listener spread: per speech chunk and per message, on the
clock a key function gives (when the listeners read each message, or when the kernel received
it at their sockets), and the lines the bench prints for both."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from speechpipe.bench.stats import percentile_ms
from speechpipe.transport.client import ListenerRun

__all__ = ["spread", "read_times", "arrival_times", "missing_arrivals", "spread_lines",
           "SPREAD_BAR_S", "widest_messages", "stamped_with_the_next"]

SPREAD_BAR_S = 0.05  # issue 42: first-to-last listener p95, per chunk and per message


OWN_REPLIES = ("end",)  # a listener's reply to its own ``stop``: not the room's fan-out


def _fanned_out(run: ListenerRun) -> list[int]:
    """The indices of ``run.events`` the room fanned out to every listener (not the replies
    to each listener's own ``stop``, which each gets when it stops)."""
    return [i for i, (_, e) in enumerate(run.events) if e.get("type") not in OWN_REPLIES]


def read_times(run: ListenerRun) -> tuple[Sequence[float], Sequence[float]]:
    """When a listener read each speech chunk and each fanned-out message (its monotonic
    clock)."""
    return [t for t, _, _ in run.audio], [run.events[i][0] for i in _fanned_out(run)]


def arrival_times(run: ListenerRun) -> tuple[Sequence[float], Sequence[float]]:
    """When the kernel received each speech chunk and each fanned-out message at a
    listener's socket (CLOCK_REALTIME; recorded by ``room_listeners``, empty from
    ``listen_room``)."""
    if not run.arrived:
        return run.audio_arrived, run.arrived
    return run.audio_arrived, [run.arrived[i] for i in _fanned_out(run)]


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


def widest_messages(runs: Sequence[ListenerRun], count: int = 3,
                    ) -> list[tuple[int, str, float]]:
    """The ``count`` messages whose kernel receive times spread widest: (index in the
    talk, its type, first-to-last seconds), widest first."""
    if not runs or not all(r.arrived for r in runs):
        return []
    times = [arrival_times(r)[1] for r in runs]
    spreads = _first_to_last(times)
    if len(spreads) != min(map(len, times)):  # an index was left out: no map
        return []
    kinds = [str(runs[0].events[i][1].get("type", "?")) for i in _fanned_out(runs[0])]
    ranked = sorted(range(len(spreads)), key=lambda i: -spreads[i])[:count]
    return [(i, kinds[i] if i < len(kinds) else "?", spreads[i]) for i in ranked]


def stamped_with_the_next(runs: Sequence[ListenerRun]) -> float:
    """The share of (listener, message) whose kernel time is the next message's too: read in
    one call or merged in the socket's queue, so stamped when the later one arrived (the
    kernel receive time is then an upper bound for it)."""
    same = total = 0
    for run in runs:
        times = run.arrived
        total += max(0, len(times) - 1)
        same += sum(1 for a, b in zip(times, times[1:], strict=False) if a == b)
    return same / total if total else 0.0


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

    wide = ", ".join(f"#{i} {kind} {1000 * sec:.1f} ms" for i, kind, sec in widest_messages(runs))
    return [
        "  spread:        first-to-last listener, as read by the listener processes "
        f"(time.monotonic() as Python read it): {_percentiles(*read)}",
        "                 at the listeners' sockets (kernel receive time, SO_TIMESTAMPNS): "
        + (_percentiles(*at_sockets) if recorded else "not recorded (--client-procs 1)")
        + (f"; {missing} without a kernel time, left out" if missing else ""),
        *([f"                 widest messages at the sockets: {wide}; "
           f"{100 * stamped_with_the_next(runs):.1f} % of deliveries were stamped with the "
           "next message's time (read or merged together: an upper bound for them)"]
          if wide else []),
        f"  spread bar:    p95 per chunk / per message <= {SPREAD_BAR_S * 1000:g} ms: at the "
        f"sockets {bar(at_sockets) if recorded else '-'}; as read {bar(read)} (reported only)"]
