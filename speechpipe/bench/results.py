"""Benchmark results as data: one JSON line per bench or eval run (pure: no I/O).

``speechpipe bench ... --record`` and ``speechpipe eval ... --record`` append a row built here
to ``benchmarks/results.jsonl`` (``speechpipe.bench.record`` writes it); docs/benchmarks.md's
"Current figures" table and the README's figures are generated from the newest rows of each
subject (``speechpipe.bench.tables``). A row (schema 1; every key always present, ``null``
where unknown):

- ``schema``: 1;
- ``date``: when the run started, UTC (``2026-12-07T19:15:35Z``; the seeded rows converted
  from the old tables give the day only);
- ``command``: the command line (``speechpipe bench load --starts --sessions 8 ...``);
- ``subject``: what was measured, ``TOPIC/NAME`` (``quality/x-to-en-49``, ``load/starts``;
  ``--record-as`` names it, else the bench's own): the table keeps the newest row per
  subject and machine;
- ``commit``: the checkout's commit (short hash), ``dirty``: whether tracked files differed
  from it;
- ``machine``: ``name`` (``epyc-avx2-2c``: CPU family, widest int8 instructions, cores; or
  ``SPEECHPIPE_BENCH_MACHINE``), ``label`` (how the docs say it), ``cpu``, ``isa``,
  ``gemm``, ``cores``;
- ``load``: the 1-minute load average ``before`` the run and ``after`` it;
- ``decoder``: the decoder paths that ran (``speechpipe.decoder_path``: ``part``, ``path``
  native or ctranslate2, ``kernel``, ``note``), a list;
- ``figures``: the bench's figures (what ``--report`` writes, the per-clip rows left out);
- ``summary``: the figures in one sentence (the table's "figure" cell), ``what``: the
  table's "what" cell, ``section``: where the figures are discussed (a link from
  docs/benchmarks.md), ``readme``: bullets the README quotes (usually none).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from speechpipe.machine import CpuInfo

__all__ = ["SCHEMA", "FIELDS", "build_row", "machine_fields", "machine_name", "default_subject",
           "summarize", "parse_rows", "dump_row", "compact_figures"]

SCHEMA = 1
FIELDS = ("schema", "date", "command", "subject", "commit", "dirty", "machine", "load",
          "decoder", "figures", "summary", "what", "section", "readme")
# the topic of a subject (``TOPIC/NAME``) a bench gives when ``--record-as`` names none
_BENCH_TOPICS = {"eval": "quality", "load": "load", "soak": "long-speech", "mt": "cost",
                 "cost": "cost", "room": "rooms", "cascade": "cost", "drill": "faults"}
# keys of a figures mapping that hold per-clip or per-utterance detail, not figures
_DETAIL_KEYS = {"clips", "utterances", "per_clip", "samples", "events", "runs_detail"}
# the figures a summary names first, wherever they sit in a bench's figures
HEADLINE = frozenset({
    "bleu", "asr_bleu", "wer", "median_start_offset", "median_end_offset", "cpu_per_audio_s",
    "first_p50", "end_p50", "end_p95", "heard", "commit_lag_p95", "start_offset_p50",
    "end_offset_p50", "end_offset_p95", "mt_cpu_per_audio_s", "per_100_cpu_s",
    "spread_sockets_p95_ms", "chunk", "message", "rss_slope_mb_per_min", "held"})
_ISA_SLUG = {"AMX": "amx", "AVX-512 VNNI": "avx512-vnni", "AVX-512": "avx512", "AVX2": "avx2",
             "AVX": "avx", "SSE": "sse"}


def machine_name(cpu: CpuInfo) -> str:
    """A machine's name in the results: CPU family, widest int8 instructions, cores
    (``epyc-avx2-2c``, ``xeon-amx-2c``); machines of one name decode alike."""
    model = cpu.model.lower()
    family = next((name for name in ("epyc", "xeon", "ryzen", "core", "graviton")
                   if name in model.split() or name in model), "")
    if not family:
        family = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(cpu.vendor, "cpu")
    isa = _ISA_SLUG.get(cpu.isa, re.sub(r"[^a-z0-9]+", "-", cpu.isa.lower()).strip("-"))
    return "-".join(part for part in (family, isa, f"{cpu.cores}c") if part)


def machine_fields(cpu: CpuInfo, name: str | None = None) -> dict[str, Any]:
    """The ``machine`` field of a row for ``cpu`` (``name``: the user's, else ``machine_name``)."""
    label = f"{cpu.model}, {cpu.cores} cores" + (f", {cpu.isa}" if cpu.isa else "")
    return {"name": name or machine_name(cpu), "label": label, "cpu": cpu.model,
            "isa": cpu.isa or None, "gemm": cpu.gemm or None, "cores": cpu.cores}


def default_subject(argv: Sequence[str]) -> str:
    """The subject a run records without ``--record-as``: ``TOPIC/NAME`` from its command
    (``bench load --starts`` -> ``load/starts``, ``eval`` -> ``quality/eval``)."""
    words = [word for word in argv if not word.startswith("-")]
    kind = (words[1] if len(words) > 1 and words[0] == "bench" else words[0]) if words else "run"
    name = "starts" if kind == "load" and "--starts" in argv else kind
    return f"{_BENCH_TOPICS.get(kind, kind)}/{name}"


def compact_figures(figures: Mapping[str, Any]) -> dict[str, Any]:
    """``figures`` without per-clip detail (``clips``, ``utterances``, ...) and with floats
    rounded to 4 significant digits (NaN and infinity become null: JSON has neither)."""
    def clean(value: Any) -> Any:
        if isinstance(value, float):
            return None if not math.isfinite(value) else float(f"{value:.4g}")
        if isinstance(value, Mapping):
            return {str(k): clean(v) for k, v in value.items()
                    if not (k in _DETAIL_KEYS and isinstance(v, (list, tuple, Mapping)))}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        if value is None or isinstance(value, (bool, int, str)):
            return value
        return str(value)
    return clean(figures)


def summarize(figures: Mapping[str, Any], limit: int = 12) -> str:
    """The figures in one line for the table: at most ``limit`` scalar figures, nested names
    joined by ``.`` (``cases[solo].end_p95 3.88``), the headline ones (``HEADLINE``: BLEU,
    offsets, CPU per audio second, ...) first."""
    found: list[tuple[str, str, Any]] = []  # (path, leaf name, value)

    def walk(prefix: str, name: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), str(key), item)
        elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            for index, item in enumerate(value):
                label = item.get("label") or item.get("case") or item.get("input") or index
                walk(f"{prefix}[{label}]", name, {k: v for k, v in item.items()
                                                  if k not in ("label", "case", "input")})
        elif isinstance(value, (int, float, str)) and not isinstance(value, bool) and prefix:
            if not (isinstance(value, str) and len(value) > 40):
                found.append((prefix, name, value))
    walk("", "", figures)
    chosen = [f for f in found if f[1] in HEADLINE] or found
    chosen += [f for f in found if f not in chosen]
    return ", ".join(f"{path} {value}" for path, _, value in chosen[:limit])


def build_row(*, argv: Sequence[str], date: str, cpu: CpuInfo, figures: Mapping[str, Any],
              commit: str | None = None, dirty: bool | None = None,
              load_before: float | None = None, load_after: float | None = None,
              decoder: Iterable[Mapping[str, Any]] = (), subject: str | None = None,
              machine: str | None = None, what: str | None = None) -> dict[str, Any]:
    """One results row (module docs) for a run of ``speechpipe ARGV`` that started at
    ``date`` (UTC, ISO 8601) on ``cpu``."""
    import shlex

    argv = [arg for arg in argv]
    compact = compact_figures(figures)
    fields = machine_fields(cpu, machine)
    subject = subject or default_subject(argv)
    load = (None if load_before is None and load_after is None else
            {"before": _round(load_before), "after": _round(load_after)})
    return {
        "schema": SCHEMA, "date": date, "command": shlex.join(["speechpipe", *argv]),
        "subject": subject, "commit": commit, "dirty": dirty, "machine": fields,
        "load": load, "decoder": [dict(path) for path in decoder] or None,
        "figures": compact, "summary": summarize(compact),
        "what": what or f"**{date[:10]}, {fields['label']}**: {subject}",
        "section": None, "readme": None,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def dump_row(row: Mapping[str, Any]) -> str:
    """A row as one JSON line (keys in ``FIELDS`` order, no newline inside, UTF-8 as is)."""
    ordered = {key: row.get(key) for key in FIELDS}
    ordered.update({k: v for k, v in row.items() if k not in ordered})
    return json.dumps(ordered, ensure_ascii=False, separators=(", ", ": "))


def parse_rows(text: str, where: str = "results") -> list[dict[str, Any]]:
    """The rows of a results file's text; ``ValueError`` naming the line for a line that is
    not a JSON object of schema 1 with every field."""
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}:{number}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict) or row.get("schema") != SCHEMA:
            raise ValueError(f"{where}:{number}: not a schema-{SCHEMA} row")
        missing = [key for key in FIELDS if key not in row]
        if missing:
            raise ValueError(f"{where}:{number}: missing {', '.join(missing)}")
        if not isinstance(row["machine"], dict) or not row["machine"].get("name"):
            raise ValueError(f"{where}:{number}: machine has no name")
        rows.append(row)
    return rows
