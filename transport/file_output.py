"""File output: the translated speech streamed to an audio file, checked before any work.

``SpeechFileWriter`` opens its file when created, so a bad ``--out`` (a folder, a missing
folder, an extension soundfile cannot write, an unwritable place) fails before the models
load. Speech chunks are written as they arrive, laid on the input's timeline; the writer holds
one chunk at a time, whatever the input's length. The file is written under a temporary name
next to it and renamed into place by ``commit()``, so a failed or interrupted run leaves any
earlier file untouched and no partial one.

Every output (speech, trace, subtitles, reports: ``replace_file``) is a regular file or not
there yet: a symbolic link, a FIFO, a device, a socket or a folder at its path is refused
before any work (a FIFO would block the run, a device or a link's target would be written
over), and the rename replaces the path's own entry, never what a link there points to.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import numpy as np
import soundfile as sf
from numpy.typing import NDArray

from speechpipe.errors import InputError, OutputError

__all__ = ["SpeechFileWriter", "check_output_path", "output_format", "replace_file",
           "not_a_regular_file", "write_text_file"]

_SILENCE_BLOCK = 65_536  # samples of silence written at a time (bounded for long gaps)


def output_format(path: str | Path) -> tuple[str, str]:
    """(soundfile format, subtype) for the file's extension; ``InputError`` if soundfile
    cannot write it. 16-bit PCM where the format takes it, else the format's default."""
    path = Path(path)
    formats = sf.available_formats()
    fmt = path.suffix[1:].upper()
    if fmt not in formats or fmt == "RAW":
        known = ", ".join(f".{name.lower()}" for name in ("WAV", "FLAC", "OGG", "AIFF"))
        what = (f"{path.suffix!r} is not an audio format soundfile can write" if path.suffix
                else "has no audio file extension")
        raise InputError(f"{path}: {what} (use {known}, ...)")
    subtype = "PCM_16" if sf.check_format(fmt, "PCM_16") else sf.default_subtype(fmt)
    if subtype is None:  # pragma: no cover - every listed format but RAW has a default
        raise InputError(f"{path}: cannot choose a sample format for {fmt}")
    return fmt, subtype


def not_a_regular_file(path: str | Path) -> str | None:
    """What is at ``path`` if it is neither a regular file nor nothing ("a symbolic link",
    "a FIFO (named pipe)", "a device", "a socket", "a folder"), else None. The path's own
    entry: a link is not followed."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError:  # a name too long, a folder in the way: the checks after this word it
        return None
    if stat.S_ISREG(mode):
        return None
    for test, kind in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"  # pragma: no cover - every kind is listed


def check_output_path(path: str | Path) -> Path:
    """Raise ``InputError`` (one line) unless ``path`` can take a new file: nothing there or
    a regular file (not a folder, a symbolic link, a FIFO, a device), its folder exists and is
    writable, an existing file is writable. Returns the path, not resolved: the writers
    replace its own entry."""
    path = Path(path)
    kind = not_a_regular_file(path)
    if kind == "a folder":
        raise InputError(f"{path}: is a folder, not an output file")
    if kind is not None:
        raise InputError(f"{path}: is {kind}, not a regular file; outputs are written only to "
                         "regular files (choose another path)")
    folder = path.parent
    if not folder.is_dir():
        raise InputError(f"{path.parent}: output folder does not exist")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise InputError(f"{path}: not writable")
    elif not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{path.parent}: output folder is not writable")
    else:  # access() says yes to root everywhere (/proc too): make and remove a file there
        try:
            fd, probe = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".probe")
        except OSError as exc:
            raise InputError(
                f"{path.parent}: cannot create files in the output folder ({exc.strerror})"
            ) from None
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(probe)
    return path


def _new_mode(path: Path) -> int:
    """The mode the replacing file gets: the regular file's own, else 0666 less the umask."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0o666 & ~_umask()
    return st.st_mode & 0o7777 if stat.S_ISREG(st.st_mode) else 0o666 & ~_umask()


def _put_in_place(temp: Path, path: Path) -> None:
    """Rename ``temp`` onto ``path`` unless something other than a regular file appeared
    there since the check (the rename would replace it)."""
    kind = not_a_regular_file(path)
    if kind is not None:
        raise OutputError(f"{path}: became {kind} during the run; not replaced (the output is "
                          "not written)")
    os.chmod(temp, _new_mode(path))
    os.replace(temp, path)


@contextlib.contextmanager
def replace_file(path: str | Path, what: str) -> Iterator[TextIO]:
    """A UTF-8 text file (``\n`` line ends) for ``path``: written under a temporary name in
    its folder and renamed onto the path when the block ends, so a failure leaves any
    earlier file as it was and no partial one; a file there keeps its mode. Write failures
    raise ``OutputError`` ("PATH: writing WHAT failed (...)")."""
    target = Path(path)
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            yield fh
        _put_in_place(Path(tmp), target)
        tmp = None
    except OSError as exc:
        raise OutputError(f"{path}: writing {what} failed ({exc.strerror})") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def write_text_file(path: str | Path, text: str, what: str) -> None:
    """``text`` into ``path`` as the other outputs are written: checked first (a regular file
    or nothing: ``check_output_path``), then by ``replace_file`` (the benches' reports)."""
    check_output_path(path)
    with replace_file(path, what) as fh:
        fh.write(text)


class SpeechFileWriter:
    """Mono speech at ``rate`` laid on a timeline (seconds from the input's start).

    ``write_at(start_s, samples)`` takes chunks in time order (a chunk that starts before the
    end of the previous one loses its overlapping head); the gaps are silence.
    ``commit(total_samples)`` pads to that length and puts the file in place; ``discard()``
    removes what was written (a temporary file). Write failures raise ``OutputError``."""

    def __init__(self, path: str | Path, rate: int) -> None:
        self.path = Path(path)
        self.rate = rate
        self._target = check_output_path(self.path)
        fmt, subtype = output_format(self.path)
        self.samples_written = 0
        self._temp: Path | None = None
        try:
            fd, name = tempfile.mkstemp(dir=self._target.parent,
                                        prefix=f".{self._target.name}.", suffix=".part")
        except OSError as exc:
            raise InputError(f"{self.path}: cannot write a file here ({exc.strerror})") from None
        os.close(fd)
        self._temp = Path(name)
        try:
            self._file: sf.SoundFile | None = sf.SoundFile(
                str(self._temp), "w", rate, 1, subtype, format=fmt
            )
        except Exception as exc:
            self._remove_temp()
            raise InputError(f"{self.path}: cannot write an audio file here ({exc})") from exc

    def write_at(self, start_s: float, samples: NDArray[np.int16]) -> None:
        """Write samples starting at ``start_s`` seconds: pad gaps with silence, skip overlap."""
        start = int(round(start_s * self.rate))
        if start < self.samples_written:
            samples = samples[self.samples_written - start :]
        self._pad_to(start)
        self._write(samples)

    def commit(self, total_samples: int) -> None:
        """Pad with silence to ``total_samples``, close and put the file at its path."""
        self._pad_to(total_samples)
        self._close()
        if self._temp is not None:
            try:
                _put_in_place(self._temp, self._target)
            except OSError as exc:
                raise OutputError(f"{self.path}: putting the file in place failed "
                                  f"({exc.strerror})") from None
            self._temp = None

    def discard(self) -> None:
        """Close and delete the partly written output; never raises."""
        with contextlib.suppress(Exception):
            self._close()
        self._remove_temp()

    # -- internals ---------------------------------------------------------------------
    def _pad_to(self, end: int) -> None:
        while self.samples_written < end:
            n = min(_SILENCE_BLOCK, end - self.samples_written)
            self._write(np.zeros(n, np.int16))

    def _write(self, samples: NDArray[np.int16]) -> None:
        if self._file is None or not len(samples):
            return
        try:
            self._file.write(samples)
        except Exception as exc:  # LibsndfileError on ENOSPC/EFBIG/EIO: errno is not kept
            detail = str(getattr(exc, "error_string", "") or exc).rstrip(".")
            raise OutputError(f"{self.path}: writing the translated speech failed: {detail} "
                              "(disk full, or a file size limit?)") from exc
        self.samples_written += len(samples)

    def _close(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            try:
                file.close()
            except Exception as exc:
                raise OutputError(f"{self.path}: finishing the file failed ({exc})") from exc

    def _remove_temp(self) -> None:
        if self._temp is not None:
            with contextlib.suppress(OSError):
                self._temp.unlink()
            self._temp = None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
