"""``speechpipe bench``: benchmarks that print figures (no timing asserts anywhere)."""

from __future__ import annotations

import argparse

__all__ = ["register"]


def register(commands: argparse._SubParsersAction) -> None:
    """Add ``bench load|soak|mt|cost|room|cascade|drill`` to the command's subparsers, each
    with ``--record`` (``speechpipe.bench.record``)."""
    bench = commands.add_parser("bench", help="load and latency benchmarks")
    kinds = bench.add_subparsers(dest="bench_kind", required=True)
    mt = kinds.add_parser("mt", help="incremental text MT: work per update vs utterance length")
    mt.add_argument("--model", default=None,
                    help="CTranslate2 MT model folder (default: a tiny generated one)")
    mt.add_argument("--source-lang", default="en")
    mt.add_argument("--target-lang", default="fr")
    mt.set_defaults(handler=_bench_mt)
    from speechpipe.bench.load import register_load

    register_load(kinds)  # bench load: concurrent sessions, batching on vs off
    from speechpipe.bench.soak import register_soak

    register_soak(kinds)  # bench soak: session churn, RSS slope, leaked tasks and fds
    from speechpipe.bench.cost import register_cost

    register_cost(kinds)  # bench cost: CPU per audio second by stage, commit lag
    from speechpipe.bench.room import register_room

    register_room(kinds)  # bench room: one speaker, N listeners
    from speechpipe.bench.cascade import register_cascade

    register_cascade(kinds)  # bench cascade: text-MT cost and added latency
    from speechpipe.bench.drill import register_drill

    register_drill(kinds)  # bench drill: worker faults injected into a live server
    from speechpipe.bench.record import add_record_flags, recorded

    for parser in kinds.choices.values():  # --record: one row in benchmarks/results.jsonl
        add_record_flags(parser)
        parser.set_defaults(handler=recorded(parser.get_default("handler")))


def _bench_mt(args: argparse.Namespace) -> int:
    from speechpipe.bench.mt import run_mt_growth_bench
    from speechpipe.bench.record import note

    note(run_mt_growth_bench(args.model, source_lang=args.source_lang,
                             target_lang=args.target_lang))
    return 0
