"""Where a command may write: no output over its input, no two outputs on one file (shared by
``speechpipe translate`` and ``speechpipe stream``)."""

from __future__ import annotations

import os
from pathlib import Path

from speechpipe.errors import InputError

__all__ = ["same_file", "check_outputs_spare_the_input"]


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one file (links and hard links included)."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one does not exist (yet)
        return Path(a).resolve() == Path(b).resolve()


def check_outputs_spare_the_input(source: str, outputs: list[tuple[str, str | None]]) -> None:
    """``InputError`` when an output would be written over the input (the input would be
    lost: the output replaces it at the end) or two outputs are one file."""
    given = [(flag, path) for flag, path in outputs if path]
    for i, (flag, path) in enumerate(given):
        if same_file(path, source):
            raise InputError(f"{flag} {path}: is the input file; writing there would replace "
                             "it (choose another file)")
        for other_flag, other in given[i + 1:]:
            if same_file(path, other):
                raise InputError(f"{flag} and {other_flag} name the same file ({path})")
