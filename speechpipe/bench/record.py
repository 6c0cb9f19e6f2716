"""``--record``: a bench or eval run appends one JSON line to the results file (issue 73).

Opt-in, so tests and users never dirty the checkout: ``speechpipe bench load ... --record``
appends to ``benchmarks/results.jsonl`` of the checkout this code runs from,
``--record-file PATH`` to another file, ``--record-as TOPIC/NAME`` names the subject (the
row the "Current figures" table keeps per subject and machine). The row is built by
``speechpipe.bench.results.build_row``; this module only gathers what a run knows (the
command, the commit, the load average before and after, the figures and decoder paths the
bench hands to ``note``/``print_decoder``) and appends the line as every output is written:
checked first (a regular file or nothing), then the whole file by temp file + rename
(``transport.file_output``), so a failed write leaves the file as it was.
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from speechpipe.decoder_path import DecoderPath, describe_decoders
from speechpipe.errors import InputError

__all__ = ["RESULTS_FILE", "add_record_flags", "recorded", "note", "print_decoder",
           "append_row", "Recording"]

# the checkout's results file (speechpipe/bench/record.py -> the checkout's root)
RESULTS_FILE = Path(__file__).resolve().parents[2] / "benchmarks" / "results.jsonl"
_MAX_BYTES = 16 << 20  # a results file this large is not one (refused, not read whole)


class Recording:
    """What the running bench handed over: its figures (``note``) and decoder paths."""

    active: Recording | None = None

    def __init__(self) -> None:
        self.figures: dict[str, Any] | None = None
        self.decoder: list[DecoderPath] = []

    def __enter__(self) -> Recording:
        Recording.active = self
        return self

    def __exit__(self, *exc: object) -> None:
        Recording.active = None


def note(figures: Mapping[str, Any]) -> None:
    """The running bench's figures for its results row (merged with earlier notes); nothing
    happens unless the run records."""
    recording = Recording.active
    if recording is not None:
        recording.figures = {**(recording.figures or {}), **figures}


def print_decoder(paths: Sequence[DecoderPath], label: str = "",
                  out: Callable[[str], Any] | None = None) -> None:
    """Print ``decoder: ...`` (the paths that ran: ``speechpipe.decoder_path``), with the
    bench's figures; kept for the results row when the run records."""
    line = describe_decoders(list(paths)) if paths else "not reported"
    (out or functools.partial(print, flush=True))(
        f"decoder{f' ({label})' if label else ''}: {line}")
    recording = Recording.active
    if recording is not None:
        recording.decoder.extend(p for p in paths if p not in recording.decoder)


def add_record_flags(parser: argparse.ArgumentParser) -> None:
    """``--record``, ``--record-file``, ``--record-as`` on a bench or eval parser."""
    group = parser.add_argument_group("results file (docs/benchmarks.md is generated from it)")
    group.add_argument("--record", action="store_true",
                       help="append this run's figures as one JSON line to the checkout's "
                            "benchmarks/results.jsonl (command, commit, machine, load average, "
                            "decoder path, figures)")
    group.add_argument("--record-file", default=None, metavar="PATH",
                       help="append the line to PATH instead (implies --record)")
    group.add_argument("--record-as", default=None, metavar="TOPIC/NAME",
                       help="the subject the row measures (default: the bench's own, e.g. "
                            "load/starts); the newest row per subject and machine is current")


def _results_path(args: argparse.Namespace) -> Path | None:
    if args.record_file:
        return Path(args.record_file)
    if not args.record:
        return None
    if not RESULTS_FILE.parent.is_dir():
        raise InputError(f"--record: {RESULTS_FILE.parent} is not there (not run from a "
                         "checkout); give --record-file PATH")
    return RESULTS_FILE


def _git(*words: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(RESULTS_FILE.parents[1]), *words],
                              capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:  # not on this system
        return None


def recorded(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``handler`` that appends a results row after a run that reported figures (``note``),
    when asked; a bench whose own checks failed (exit 1) is recorded with its ``exit_code``."""
    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        path = _results_path(args)
        if path is None:
            return handler(args)
        from speechpipe.transport.file_output import check_output_path

        check_output_path(path)  # before the models load: a bad path fails at once
        subject = args.record_as
        if subject is not None and "/" not in subject.strip("/"):
            raise InputError(f"--record-as {subject!r}: give TOPIC/NAME, e.g. load/starts")
        argv = list(getattr(args, "argv", None) or sys.argv[1:])
        date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        before = _load()
        with Recording() as recording:
            code = int(handler(args) or 0)
        if recording.figures is None:
            print("not recorded: the run reported no figures", file=sys.stderr)
            return code
        if code != 0:  # measured, but a check of the bench's did not hold: the row says so
            recording.figures["exit_code"] = code
        from speechpipe.bench.results import build_row
        from speechpipe.machine import cpu_info

        commit = _git("rev-parse", "--short", "HEAD")
        status = _git("status", "--porcelain", "--untracked-files=no")
        row = build_row(argv=argv, date=date, cpu=cpu_info(), figures=recording.figures,
                        commit=commit, dirty=None if status is None else bool(status),
                        load_before=before, load_after=_load(),
                        decoder=[p.as_dict() for p in recording.decoder], subject=subject,
                        machine=os.environ.get("SPEECHPIPE_BENCH_MACHINE") or None)
        append_row(path, row)
        print(f"recorded: {path} (subject {row['subject']}, machine {row['machine']['name']})")
        return code
    return run


def append_row(path: str | Path, row: Mapping[str, Any]) -> None:
    """Append ``row`` as one JSON line to ``path`` (created when missing): the file's text
    and the line are written whole by temp file + rename, never through a link or into a
    FIFO (``transport.file_output``)."""
    from speechpipe.bench.results import dump_row
    from speechpipe.output_paths import read_bounded
    from speechpipe.transport.file_output import check_output_path, replace_file

    check_output_path(path)
    text = (read_bounded(path, _MAX_BYTES, str(path), "a results file").decode("utf-8")
            if Path(path).exists() else "")
    if text and not text.endswith("\n"):
        text += "\n"
    with replace_file(path, "the results row") as fh:
        fh.write(text + dump_row(row) + "\n")
