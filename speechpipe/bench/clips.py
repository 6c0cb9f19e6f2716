"""The benches' clips: a manifest's recordings (``--clips MANIFEST``, default the package's own
``samples/manifest.jsonl``) as int16 at 16 kHz, and the playlists ``bench load`` plays. The
manifest is read as ``eval`` reads it (``evaluation.manifest.load_manifest``), the audio as
every input file is (``transport.file_replay.read_audio``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from speechpipe.bench.own_samples import own_samples
from speechpipe.evaluation.manifest import load_manifest

__all__ = ["RATE", "Clip", "find_manifest", "load_clips", "speaker_language", "playlist",
           "playlist_recordings", "voiced_span"]

RATE = 16_000


@dataclass(frozen=True)
class Clip:
    """One recording of the playlist, int16 at 16 kHz."""
    id: str
    lang: str
    audio: np.ndarray  # int16 at 16 kHz


def find_manifest(explicit: str | None = None) -> Path:
    """``explicit``, else the project's own ``samples/manifest.jsonl``."""
    candidates = [Path(explicit)] if explicit else [
        Path.cwd() / "samples" / "manifest.jsonl",
        own_samples() / "manifest.jsonl",  # the package's own clips, installed or not
    ]
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError("no clips: pass --clips MANIFEST.jsonl")


def load_clips(manifest: Path, target: str = "en", limit: int = 12, *,
               languages: Sequence[str] = (), per_language: int | None = None) -> list[Clip]:
    """Clips whose language differs from the target (x -> English), resampled to 16 kHz;
    only ``languages`` when given, at most ``per_language`` of each."""
    from speechpipe.transport.file_replay import read_audio

    clips: list[Clip] = []
    for row in load_manifest(manifest):
        if row.get("lang") == target or not row.get("translation_en"):
            continue
        if languages and row.get("lang") not in languages:
            continue
        if per_language is not None and sum(
                c.lang == row.get("lang") for c in clips) >= per_language:
            continue
        if row.get("category") not in (None, "core_x_to_en") or (row.get("duration_s") or 0) > 20:
            continue
        clips.append(Clip(row["id"], row["lang"], read_audio(row["path"])))
        if len(clips) >= limit:
            break
    if not clips:
        raise FileNotFoundError(f"no x->{target} clips with a reference in {manifest}")
    return clips


def speaker_language(clips: Sequence[Clip], index: int) -> str:
    """The language client ``index`` speaks: the clips' languages in the order they first
    appear, cycling."""
    languages = list(dict.fromkeys(clip.lang for clip in clips))
    return languages[index % len(languages)]


def playlist(clips: Sequence[Clip], index: int, seconds: float, gap_s: float = 1.0, *,
             mix_languages: bool = False, detect_language: bool = False) -> tuple[np.ndarray, str]:
    """Audio for client ``index`` (clips, ``gap_s`` of silence between, >= ``seconds``) and the
    ``source_lang`` it starts with.

    A session is one speaker, and a speaker keeps their language: client ``index`` plays the
    clips of the ``index``-th language (in the order they first appear, cycling), rotated by
    its rank among the clients of that language so that sessions say different things at a
    time, and sends that language (``auto`` with ``detect_language``). With ``mix_languages``
    the playlist cycles through every clip whatever its language and sends ``auto``: the
    server keeps the first language it detects (``asr.keep_detected_language``), so most clips
    are then decoded in a wrong language; a stress of detection, not a conversation."""
    audio, lang, _ = playlist_recordings(clips, index, seconds=seconds, gap_s=gap_s,
                                         mix_languages=mix_languages,
                                         detect_language=detect_language)
    return audio, lang


def playlist_recordings(
    clips: Sequence[Clip], index: int, *, seconds: float = 0.0, count: int | None = None,
    gap_s: float = 1.0, mix_languages: bool = False, detect_language: bool = False,
) -> tuple[np.ndarray, str, list[tuple[float, float]]]:
    """``playlist``'s audio and language, and each recording's voiced span on the stream
    clock (``voiced_span``: first voiced frame, end of the last), for ``count`` recordings
    when given (else as many as fill ``seconds``)."""
    if mix_languages:
        own, k, lang = list(clips), index, "auto"
    else:
        lang = speaker_language(clips, index)
        own = [clip for clip in clips if clip.lang == lang]
        k = index // len({clip.lang for clip in clips})
        if detect_language:
            lang = "auto"
    parts: list[np.ndarray] = []
    spans: list[tuple[float, float]] = []
    total = 0
    gap = np.zeros(int(gap_s * RATE), np.int16)
    while (len(spans) < count) if count is not None else (total < seconds * RATE):
        clip = own[k % len(own)]
        first, end = voiced_span(clip.audio)
        spans.append(((total + first) / RATE, (total + end) / RATE))
        parts += [clip.audio, gap]
        total += len(clip.audio) + len(gap)
        k += 1
    return np.concatenate(parts), lang, spans


def voiced_span(pcm: np.ndarray, frame_ms: int = 20, below_peak_db: float = 30.0,
                floor_dbfs: float = -60.0) -> tuple[int, int]:
    """(first sample, end sample) of a recording's voiced frames: ``frame_ms`` frames whose
    RMS is within ``below_peak_db`` of its loudest frame and above ``floor_dbfs`` (what the
    client can tell of its own speech, with no server VAD); the whole recording when no
    frame is."""
    step = RATE * frame_ms // 1000
    n = len(pcm) // step
    if n == 0:
        return 0, len(pcm)
    frames = pcm[: n * step].astype(np.float64).reshape(n, step) / 32768.0
    rms = np.sqrt(np.mean(frames * frames, axis=1))
    threshold = max(float(rms.max()) * 10 ** (-below_peak_db / 20), 10 ** (floor_dbfs / 20))
    voiced = np.flatnonzero(rms >= threshold)
    if len(voiced) == 0:
        return 0, len(pcm)
    return int(voiced[0]) * step, (int(voiced[-1]) + 1) * step
