"""File output: the translated speech streamed to an audio file, checked before any work.

``SpeechFileWriter`` opens its file when created, so a bad ``--out`` (a folder, a missing
folder, an extension soundfile cannot write, an unwritable place) fails before the models
load. Speech chunks are written as they arrive, laid on the input's timeline; the writer holds
one chunk at a time, whatever the input's length. A regular file is written under a temporary
name next to it and renamed into place by ``commit()``, so a failed or interrupted run leaves
any earlier file untouched and no partial one; other targets (a device, a pipe) are written
in place.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
from numpy.typing import NDArray

from speechpipe.errors import InputError, OutputError

__all__ = ["SpeechFileWriter", "check_output_path", "output_format"]

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


def check_output_path(path: str | Path) -> Path:
    """Raise ``InputError`` (one line) unless ``path`` can take a new file: not a folder, its
    folder exists and is writable, an existing file is writable. Returns the path with
    symbolic links resolved (where the data will go)."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path}: is a folder, not an output file")
    target = path.resolve()
    if target.is_dir():
        raise InputError(f"{path}: is a folder, not an output file")
    folder = target.parent
    if not folder.is_dir():
        raise InputError(f"{path.parent}: output folder does not exist")
    if target.exists():
        if not os.access(target, os.W_OK):
            raise InputError(f"{path}: not writable")
    elif not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{path.parent}: output folder is not writable")
    else:  # access() says yes to root everywhere (/proc too): make and remove a file there
        try:
            fd, probe = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".probe")
        except OSError as exc:
            raise InputError(
                f"{path.parent}: cannot create files in the output folder ({exc.strerror})"
            ) from None
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(probe)
    return target


class SpeechFileWriter:
    """Mono speech at ``rate`` laid on a timeline (seconds from the input's start).

    ``write_at(start_s, samples)`` takes chunks in time order (a chunk that starts before the
    end of the previous one loses its overlapping head); the gaps are silence.
    ``commit(total_samples)`` pads to that length and puts the file in place; ``discard()``
    removes what was written (a temporary file) or stops writing (a device). Write failures
    raise ``OutputError``."""

    def __init__(self, path: str | Path, rate: int) -> None:
        self.path = Path(path)
        self.rate = rate
        self._target = check_output_path(self.path)
        fmt, subtype = output_format(self.path)
        self.samples_written = 0
        self._temp: Path | None = None
        if not self._target.exists() or self._target.is_file():
            try:
                fd, name = tempfile.mkstemp(dir=self._target.parent,
                                            prefix=f".{self._target.name}.", suffix=".part")
            except OSError as exc:
                raise InputError(
                    f"{self.path}: cannot write a file here ({exc.strerror})"
                ) from None
            os.close(fd)
            self._temp = Path(name)
        try:
            self._file: sf.SoundFile | None = sf.SoundFile(
                str(self._temp or self._target), "w", rate, 1, subtype, format=fmt
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
            mode = (self._target.stat().st_mode & 0o7777 if self._target.exists()
                    else 0o666 & ~_umask())
            os.chmod(self._temp, mode)
            os.replace(self._temp, self._target)
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
