"""Where a command may write and how it reads what it is given (``translate``, ``eval``,
``stream``, ``--config``, manifests).

Outputs: none over an input (the input file, ``--config``, a manifest or a clip it lists),
no two outputs on one file; each output is a regular file or not there yet
(``transport.file_output.check_output_path``) and is written by rename, never through what
was there. Inputs: only a regular file is read (a FIFO would block, a device never end),
opened without blocking and read no further than a cap, whatever its size says."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from speechpipe.errors import InputError

__all__ = ["same_file", "check_outputs_spare_the_input", "check_outputs_spare_inputs",
           "file_kind", "open_regular", "read_bounded"]


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one file (links and hard links included)."""
    return _identity(a) == _identity(b)


def _identity(path: str | Path) -> tuple[object, ...]:
    """The file a path names: device and inode where it exists (links and hard links
    followed), else the path resolved."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # not there (yet), a dangling link, a NUL in the name
        return ("path", Path(path).resolve())
    return ("inode", st.st_dev, st.st_ino)


def check_outputs_spare_inputs(inputs: Sequence[tuple[str, str | Path | None]],
                               outputs: Sequence[tuple[str, str | Path | None]]) -> None:
    """``InputError`` (one line) when an output names one of the inputs (``(what it is,
    path)``, e.g. ``("the manifest", "m.jsonl")``): the output would replace it. Or when two
    outputs (``(flag, path)``) are one file. Compared by the file (device and inode: links
    and hard links count), one ``stat`` each."""
    given = [(flag, str(path)) for flag, path in outputs if path]
    if not given:
        return
    wanted = {_identity(path): (flag, path) for flag, path in reversed(given)}
    for what, path in inputs:
        if path and (hit := wanted.get(_identity(path))):
            flag, out = hit
            raise InputError(f"{flag} {out}: is {what}; writing there would replace it "
                             "(choose another file)")
    for i, (flag, path) in enumerate(given):
        for other_flag, other in given[i + 1:]:
            if same_file(path, other):
                raise InputError(f"{flag} and {other_flag} name the same file ({path})")


def check_outputs_spare_the_input(source: str, outputs: list[tuple[str, str | None]],
                                  config: str | None = None) -> None:
    """``check_outputs_spare_inputs`` for a command with one input file (and ``--config``)."""
    check_outputs_spare_inputs([("the input file", source), ("the --config file", config)],
                               outputs)


def file_kind(mode: int) -> str | None:
    """What a file that is not a regular one is ("a FIFO", ...); None for a regular file."""
    kinds = ((stat.S_ISREG, None), (stat.S_ISLNK, "a symbolic link"),
             (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
             (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
             (stat.S_ISSOCK, "a socket"))
    for test, kind in kinds:
        if test(mode):
            return kind
    return "not a regular file"  # pragma: no cover - every kind is listed


def open_regular(path: str | Path, what: str) -> BinaryIO:
    """``path`` opened for reading if it is a regular file (a link to one counts); else
    ``InputError`` "``what``: is a FIFO (named pipe), not a regular file". Opened without
    blocking, so a FIFO is refused at once instead of waiting for a writer; ``OSError`` (not
    there, no permission) is the caller's to word."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        kind = file_kind(os.fstat(fd).st_mode)
        if kind is not None:
            raise InputError(f"{what}: is {kind}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path: str | Path, cap: int, what: str, noun: str = "the file") -> bytes:
    """A regular file's bytes, at most ``cap`` of them: refused (``InputError``) when its
    size says more, and never read past ``cap`` + 1 bytes whatever it says (a file that
    grows, one in /proc)."""
    with open_regular(path, what) as fh:
        if os.fstat(fh.fileno()).st_size > cap:
            raise InputError(f"{what}: over {cap >> 10} KiB; not {noun}")
        data = fh.read(cap + 1)
    if len(data) > cap:
        raise InputError(f"{what}: over {cap >> 10} KiB; not {noun}")
    return data
