"""WebVTT and SubRip text from cues (``stages.cues``), written by maintained libraries:
``webvtt-py`` for WebVTT, ``srt`` for SubRip. The format follows the file's suffix."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from speechpipe.errors import InputError
from speechpipe.stages.cues import Cue
from speechpipe.transport.file_output import check_output_path, replace_file

__all__ = ["SubtitleFormat", "subtitle_format", "format_subtitles", "format_vtt", "format_srt",
           "check_subtitle_path", "write_subtitles", "SUFFIXES"]

SubtitleFormat = Literal["vtt", "srt"]
SUFFIXES: dict[str, SubtitleFormat] = {".vtt": "vtt", ".srt": "srt"}


def subtitle_format(path: str | Path) -> SubtitleFormat:
    """``vtt`` or ``srt`` by the file's suffix; ``InputError`` for any other."""
    suffix = Path(path).suffix.lower()
    if suffix not in SUFFIXES:
        raise InputError(f"{path}: a subtitle file must end in .vtt (WebVTT) or .srt (SubRip)")
    return SUFFIXES[suffix]


def _clock(seconds: float) -> str:
    ms = max(0, round(seconds * 1000))
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    return f"{hours:02d}:{minutes:02d}:{rest // 1000:02d}.{rest % 1000:03d}"


def _vtt_text(line: str) -> str:
    # WebVTT cue text is markup: escape its three special characters (an arrow "-->" then
    # cannot appear either)
    return line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def format_vtt(cues: Sequence[Cue]) -> str:
    """A WebVTT file's text (webvtt-py)."""
    from webvtt import Caption, WebVTT

    captions = [Caption(start=_clock(c.start), end=_clock(c.end),
                        text=[_vtt_text(line) for line in c.lines if line.strip()])
                for c in cues if c.text.strip()]
    content: str = WebVTT(captions=captions).content
    return content if content.endswith("\n") else content + "\n"


def format_srt(cues: Sequence[Cue]) -> str:
    """A SubRip file's text (srt)."""
    import srt

    return str(srt.compose([
        srt.Subtitle(i, datetime.timedelta(seconds=c.start), datetime.timedelta(seconds=c.end),
                     c.text)
        for i, c in enumerate((c for c in cues if c.text.strip()), start=1)
    ]))


def format_subtitles(cues: Sequence[Cue], kind: SubtitleFormat) -> str:
    return format_vtt(cues) if kind == "vtt" else format_srt(cues)


def check_subtitle_path(path: str | Path) -> SubtitleFormat:
    """Before any audio is processed: the suffix names a format and a file can be made
    there (``InputError``, one line, otherwise). Returns the format."""
    kind = subtitle_format(path)
    check_output_path(path)
    return kind


def write_subtitles(path: str | Path, cues: Sequence[Cue]) -> None:
    """Write the cues as WebVTT or SubRip (by the suffix), replacing the file atomically (the
    path's own entry: a link there is replaced, not followed)."""
    text = format_subtitles(cues, subtitle_format(path))
    with replace_file(path, "the subtitles") as fh:
        fh.write(text)
