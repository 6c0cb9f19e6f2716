"""Subtitle files beside an ``eval --report``: each clip's translation and captions as WebVTT,
in a folder named after the report (``REPORT.json`` -> ``REPORT-subtitles/``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from speechpipe.errors import InputError
from speechpipe.file_translation import TranslationRun
from speechpipe.transport.subtitle_files import write_subtitles

__all__ = ["ReportSubtitles"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class ReportSubtitles:
    """``<id>.target.vtt`` (the translation) and ``<id>.source.vtt`` (the captions) of each
    clip, on the clip's timeline, committed text only (``stages.cues``)."""

    def __init__(self, report: str | Path) -> None:
        path = Path(report)
        self.folder = path.with_name(f"{path.stem}-subtitles")
        if self.folder.is_symlink():  # the files would land wherever it points
            raise InputError(f"{self.folder}: is a symbolic link; the subtitle folder must be "
                             "a real folder (remove the link)")
        try:  # made before any model loads: a folder that cannot be made fails now
            self.folder.mkdir(exist_ok=True)
        except OSError as exc:
            raise InputError(f"{self.folder}: cannot make the subtitle folder "
                             f"({exc.strerror})") from None

    def write(self, clip: dict[str, Any], run: TranslationRun) -> None:
        name = _UNSAFE.sub("_", str(clip.get("id") or Path(str(clip["path"])).stem)).strip(".")
        for side in ("target", "source"):
            write_subtitles(self.folder / f"{name or 'clip'}.{side}.vtt", run.cues(side))
