"""docs/benchmarks.md's "Current figures" table and the README's figures, generated from the
results file (``benchmarks/results.jsonl``; rows: ``speechpipe.bench.results``).

    python -m speechpipe.bench.tables          # rewrite the generated blocks
    python -m speechpipe.bench.tables --check  # exit 1 when the documents differ from the rows

Each document holds its block between ``<!-- generated: NAME ... -->`` and
``<!-- end generated -->``; edit the rows (or record new ones: ``--record``), never the block.

- ``current-figures`` (docs/benchmarks.md): the newest row of each subject on each machine
  (a row supersedes an older one of the same subject and machine), newest day first, the
  test suite last.
- ``readme-figures, machine NAME`` (README.md): a line naming machine NAME and the days of
  its figures, then the README bullets of the current rows that carry some (``readme``),
  NAME's first, by topic; a subject whose newest row has none gets a bullet made of its
  summary, so a newer figure replaces an older one here too.

Pure but for ``main`` (which reads and writes the files); the fast tier runs ``generate`` on
the committed files (tests/unit/bench/test_bench_tables.py).
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from speechpipe.bench.results import parse_rows

__all__ = ["current_rows", "render_table", "render_readme", "replace_blocks", "generate",
           "DOCUMENTS", "RESULTS", "main"]

ROOT = Path(__file__).resolve().parents[2]
RESULTS = "benchmarks/results.jsonl"
DOCUMENTS = ("docs/benchmarks.md", "README.md")
# the order of topics in the README (``TOPIC/NAME`` subjects); unknown topics after these
TOPICS = ("quality", "latency", "long-speech", "load", "rooms", "other-languages", "cost",
          "memory", "faults", "tests")
_BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w-]+)(?P<options>[^>]*?)-->\n)"
                    r"(?P<body>.*?)(<!-- end generated -->)", re.S)


def _day(row: Mapping[str, Any]) -> str:
    return str(row["date"])[:10]


def current_rows(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The newest row of each (machine, subject), newest first, subjects of topic ``tests``
    last. Rows are appended as they are measured, so of two rows with the same date (a day
    without a time) the later line is the newer."""
    newest: dict[tuple[str, str], int] = {}
    for index, row in enumerate(rows):
        key = (row["machine"]["name"], row["subject"])
        if key not in newest or str(row["date"]) >= str(rows[newest[key]]["date"]):
            newest[key] = index
    kept = sorted(newest.values(), key=lambda i: (str(rows[i]["date"]), i), reverse=True)
    kept.sort(key=lambda i: _topic(rows[i]) == "tests")
    return [rows[i] for i in kept]


def _topic(row: Mapping[str, Any]) -> str:
    return str(row["subject"]).split("/", 1)[0]


def _cell(text: str) -> str:
    """Text for a Markdown table cell (one line, ``|`` escaped unless it already is)."""
    return re.sub(r"(?<!\\)\|", r"\\|", " ".join(str(text).split()))


def _command(row: Mapping[str, Any]) -> str:
    """The command cell: a command line in a code span; a converted row's cell (code spans
    already) as it was."""
    command = str(row["command"])
    return command if "`" in command else f"`{_cell(command)}`"


def _what(row: Mapping[str, Any]) -> str:
    what = str(row["what"] or row["subject"])
    return what + (f" ([section]({row['section']}))" if row.get("section") else "")


def render_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The "Current figures" table of ``rows`` (``current_rows`` picks them)."""
    lines = ["| what | command | figure |", "|---|---|---|"]
    for row in current_rows(rows):
        extra = []
        if row.get("commit") and str(row["commit"]) not in str(row["summary"]):
            extra.append(f"commit {row['commit']}{' (dirty)' if row.get('dirty') else ''}")
        load = row.get("load") or {}
        said = [f"{load[k]} {k}" for k in ("before", "after") if load.get(k) is not None]
        if said:
            extra.append("load " + ", ".join(said))
        if row.get("decoder"):
            extra.append("decoder " + "; ".join(
                f"{d['part'].upper()} {d['path']}, {d['kernel']}" for d in row["decoder"]))
        summary = str(row["summary"]) + (f" ({', '.join(extra)})" if extra else "")
        lines.append(f"| {_cell(_what(row))} | {_command(row)} | {_cell(summary)} |")
    return "\n".join(lines) + "\n"


def _days(rows: Sequence[Mapping[str, Any]]) -> str:
    days = sorted({_day(row) for row in rows})
    if not days:
        return "no figures"
    first, last = days[0], days[-1]
    if first == last:
        return first
    return f"{first}/{last[8:]}" if first[:7] == last[:7] else f"{first} to {last}"


def render_readme(rows: Sequence[Mapping[str, Any]], machine: str, width: int = 100) -> str:
    """The README's figures: the named machine and its days, then the bullets (module docs)."""
    current = current_rows(rows)
    quoted = {(row["machine"]["name"], row["subject"]) for row in rows if row.get("readme")}
    chosen = [row for row in current if (row["machine"]["name"], row["subject"]) in quoted]
    ours = [row for row in chosen if row["machine"]["name"] == machine]
    if not ours:
        raise ValueError(f"no current row of machine {machine!r} is quoted in the README")

    def rank(row: Mapping[str, Any]) -> tuple[bool, str, int]:
        topic, name = _topic(row), row["machine"]["name"]
        return (name != machine, "" if name == machine else name,
                TOPICS.index(topic) if topic in TOPICS else len(TOPICS))
    label = ours[0]["machine"].get("label") or machine
    article = "an" if label[:1].lower() in "aeiou" else "a"
    lines = textwrap.wrap(
        f"Current figures: {article} **{label}**, {_days(ours)} ([docs/benchmarks.md]"
        "(docs/benchmarks.md#current-figures): commands, commits, other machines).",
        width, break_on_hyphens=False, break_long_words=False)
    bullets: list[str] = []
    for row in sorted(chosen, key=rank):
        for text in row.get("readme") or [
                f"**{row['subject']}** ({_day(row)}, {row['machine'].get('label') or machine}): "
                f"{row['summary']}"]:
            if bullets and not text.startswith("**"):  # goes on from the bullet before
                bullets[-1] += " " + text
            else:
                bullets.append(text)
    for bullet in bullets:
        lines += textwrap.wrap(bullet, width, initial_indent="- ", subsequent_indent="  ",
                               break_on_hyphens=False, break_long_words=False)
    return "\n".join(lines) + "\n"


def replace_blocks(text: str, rows: Sequence[Mapping[str, Any]], where: str = "") -> str:
    """``text`` with each generated block rendered again from ``rows``."""
    def render(match: re.Match[str]) -> str:
        name, options = match.group("name"), match.group("options")
        if name == "current-figures":
            body = render_table(rows)
        elif name == "readme-figures":
            found = re.search(r"machine (\S+)", options)
            if found is None:
                raise ValueError(f"{where}: the readme-figures block names no machine")
            body = render_readme(rows, found.group(1).rstrip(","))
        else:
            raise ValueError(f"{where}: unknown generated block {name!r}")
        return match.group(1) + body + match.group(5)
    new, count = _BLOCK.subn(render, text)
    if not count:
        raise ValueError(f"{where}: no <!-- generated: ... --> block")
    return new


def generate(root: Path = ROOT) -> dict[str, tuple[str, str]]:
    """Each document's (text now, text generated) from ``root``'s results file."""
    rows = parse_rows((root / RESULTS).read_text(encoding="utf-8"), RESULTS)
    out = {}
    for name in DOCUMENTS:
        text = (root / name).read_text(encoding="utf-8")
        out[name] = (text, replace_blocks(text, rows, name))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m speechpipe.bench.tables",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 naming the documents that differ")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout (default: this one)")
    args = parser.parse_args(argv)
    try:
        documents = generate(args.root)
    except (OSError, ValueError) as exc:
        print(f"bench tables: {exc}", file=sys.stderr)
        return 2
    stale = [name for name, (now, new) in documents.items() if now != new]
    if args.check:
        for name in stale:
            print(f"{name}: differs from {RESULTS} (run python -m speechpipe.bench.tables)")
        return 1 if stale else 0
    from speechpipe.transport.file_output import write_text_file

    for name in stale:
        write_text_file(args.root / name, documents[name][1], name)
        print(f"wrote {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
