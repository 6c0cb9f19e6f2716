"""``speechpipe eval --offline-reference``: what the same model gives offline, on whole clips.

For each selected clip the pipeline's own loaded Whisper (``Pipeline.engine.model``: the
weights ``--asr-model`` resolves to, int8, ``pipeline.asr_threads`` threads) decodes the whole
clip at once: ``WhisperModel.transcribe(audio, task="translate", language=<the clip's lang>,
beam_size=--offline-beam, condition_on_previous_text=False)``, and once more with
``task="transcribe"`` for the captions (commit regret needs both sides; a clip already in the
target language has one decode, the transcription). After each streamed clip of several
utterances, each utterance's own audio span (``vad.start`` to ``vad.end`` of the trace, padded
by ``SPAN_PAD_S``) is translated offline the same way (``OfflineRun.span_texts``), so a
long recording's utterances are each held against what the model says for that span. The
audio is the same 16 kHz mono samples the streamed run is fed
(``transport.file_replay.read_audio``), so the gap between the two figures is the
streaming policy's, not the resampler's.

x-to-English with Whisper's own translation only (``--mt whisper``, ``--target-lang en``):
Whisper's ``translate`` task speaks English only, so for another target the offline decode
would not be the same system's output (the streamed figures of any target are scored
against the manifest's ``translations``; ``manifest.reference_for``).

Results are cached under ``$SPEECHPIPE_HOME/eval-offline/`` (one JSON file per key) keyed by
the clip file's SHA-256, the model's identity (the SHA-256 of its ``model.bin`` as pinned
when the bundled model was assembled, else the folder, size and mtime of ``model.bin``; plus
the faster-whisper and CTranslate2 versions), the beam size, the language and the task (and,
for an utterance's span, the span), so a repeated eval decodes nothing again. The decode
runs before the streamed clips, never while one is paced in real time (span decodes: after
a clip's run, before the next).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from speechpipe.errors import InputError

__all__ = ["MAX_BEAM", "add_offline_arguments", "offline_beam", "check_offline_request",
           "model_identity", "cache_key", "OfflineCache", "OfflineRun", "offline_references",
           "file_sha256"]

log = logging.getLogger(__name__)

DEFAULT_BEAM = 5
MAX_BEAM = 20
CACHE_FOLDER = "eval-offline"
_KEY_VERSION = 1  # bump when what a cached entry means changes
_CHUNK = 1 << 20
SPAN_PAD_S = 0.2  # audio kept either side of an utterance's VAD span (its edges are tight)


def add_offline_arguments(parser: argparse.ArgumentParser) -> None:
    """``--offline-reference`` and ``--offline-beam`` on the ``eval`` parser."""
    parser.add_argument(
        "--offline-reference", action="store_true",
        help="also decode each whole clip offline with the same Whisper weights (beam "
             "search, no conditioning on previous text; cached) and report its BLEU and the "
             "gap streamed - offline per category; x-to-English with --mt whisper only")
    parser.add_argument(
        "--offline-beam", default=None, metavar="N",
        help=f"beam size of the offline reference (1..{MAX_BEAM}, default {DEFAULT_BEAM})")


def offline_beam(args: argparse.Namespace) -> int | None:
    """The offline beam size of ``args`` (None without ``--offline-reference``); raises
    ``InputError`` for a bad value, or ``--offline-beam`` alone."""
    text = getattr(args, "offline_beam", None)
    if not getattr(args, "offline_reference", False):
        if text is not None:
            raise InputError("--offline-beam needs --offline-reference")
        return None
    if text is None:
        return DEFAULT_BEAM
    try:
        beam = int(str(text).strip())
    except ValueError:
        beam = 0
    if not 1 <= beam <= MAX_BEAM:
        raise InputError(f"--offline-beam must be a whole number from 1 to {MAX_BEAM}, "
                         f"not {text!r}")
    return beam


def check_offline_request(target_lang: str, mt: str) -> None:
    """``--offline-reference`` is x-to-English with Whisper's translation; ``InputError``
    otherwise (before any model loads)."""
    if mt not in ("whisper", "auto") or target_lang.strip().lower() != "en":
        raise InputError("--offline-reference supports x-to-English with Whisper's own "
                         f"translation only (--mt whisper --target-lang en), not --mt {mt} "
                         f"--target-lang {target_lang}")


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def model_identity(model_dir: str | Path) -> str:
    """What names the weights a folder holds, cheaply: the pinned SHA-256 of ``model.bin``
    the bundled model's marker records, else the folder, size and mtime of ``model.bin``;
    with the decoding libraries' versions (a new faster-whisper may decode differently)."""
    import ctranslate2
    import faster_whisper

    from speechpipe.models.whisper.weights import MARKER

    folder = Path(model_dir).resolve()
    try:
        marker = json.loads((folder / MARKER).read_text(encoding="utf-8"))
        weights = "sha256:" + str(marker["files"]["model.bin"]["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        stat = (folder / "model.bin").stat()
        weights = f"{folder}:{stat.st_size}:{stat.st_mtime_ns}"
    return (f"{weights} faster-whisper {faster_whisper.__version__} "
            f"ctranslate2 {ctranslate2.__version__} int8")


def cache_key(audio_sha256: str, model: str, beam: int, language: str, task: str,
              span: tuple[float, float] | None = None) -> str:
    """The cache key of one offline decode (hex SHA-256 of its inputs); ``span``: the
    seconds of the clip decoded (None: all of it)."""
    fields: dict[str, Any] = {"v": _KEY_VERSION, "audio": audio_sha256, "model": model,
                              "beam": beam, "language": language, "task": task}
    if span is not None:
        fields["span"] = [round(span[0], 3), round(span[1], 3)]
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


class OfflineCache:
    """One JSON file per key under ``root``; written atomically (temp file, then rename),
    so concurrent evals and a killed run leave either no entry or a whole one."""

    def __init__(self, root: Path | None = None) -> None:
        if root is None:
            from speechpipe.models.home import speechpipe_home

            root = speechpipe_home() / CACHE_FOLDER
        self.root = root

    def path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def get(self, key: str) -> str | None:
        """The cached text, or None (missing or unreadable: decoded again)."""
        try:
            entry = json.loads(self.path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        text = entry.get("text") if isinstance(entry, dict) else None
        return text if isinstance(text, str) else None

    def put(self, key: str, text: str, fields: dict[str, Any]) -> None:
        """Store ``text``; a cache that cannot be written costs the next run a decode, not
        this run its result (a warning, without the text)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-", suffix=".json")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    json.dump({**fields, "text": text}, fh, ensure_ascii=False)
                os.replace(tmp, self.path(key))
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            log.warning("cannot write the offline-reference cache in %s (%s)", self.root,
                        exc.strerror)


@dataclass
class OfflineRun:
    """Offline texts by clip id (``texts``: the target side, translation or, for a clip in
    the target language, transcription; ``source_texts``: the transcription), and how many
    decodes ran now or were read from the cache. With ``whisper`` (the loaded model) it
    also decodes utterance spans (``span_texts``)."""
    beam: int
    model: str
    texts: dict[str, str] = field(default_factory=dict)
    source_texts: dict[str, str] = field(default_factory=dict)
    decoded: int = 0
    cached: int = 0
    decode_seconds: float = 0.0
    spans_decoded: int = 0
    spans_cached: int = 0
    audio_sha256: dict[str, str] = field(default_factory=dict)
    whisper: Any = field(default=None, repr=False)
    cache: OfflineCache | None = field(default=None, repr=False)
    decode: Callable[[Any, Any, str, str, int], str] | None = field(default=None, repr=False)

    def summary(self) -> dict[str, Any]:
        return {"beam": self.beam, "model": self.model, "decoded": self.decoded,
                "cached": self.cached, "decode_s": round(self.decode_seconds, 3),
                "spans_decoded": self.spans_decoded, "spans_cached": self.spans_cached}

    def _text(self, key: str, fields: dict[str, Any], decode: Callable[[], str]
              ) -> tuple[str, bool]:
        """(text, decoded now) of one key: from the cache, else decoded and stored."""
        cache = self.cache or OfflineCache()
        text = cache.get(key)
        if text is not None:
            return text, False
        started = time.perf_counter()
        text = decode()
        self.decode_seconds += time.perf_counter() - started
        cache.put(key, text, fields)
        return text, True

    def span_texts(self, clip: dict[str, Any], audio: Any, spans: list[tuple[float, float]],
                   target: str, side: str = "target") -> list[str]:
        """The offline text of each span (seconds) of ``clip``'s 16 kHz int16 ``audio``,
        padded by ``SPAN_PAD_S``: its translation (``side="target"``) or its captions
        (``side="source"``); cached by the clip's audio, the task and the span. Blocking
        (run it between clips, never while one is timed)."""
        import numpy as np

        if self.whisper is None and self.decode is None:
            raise RuntimeError("span_texts needs the loaded model")
        if side not in ("source", "target"):
            raise ValueError(f"side must be 'source' or 'target', not {side!r}")
        task = "transcribe" if side == "source" or clip["lang"] == target else "translate"
        audio_sha = self.audio_sha256.get(clip["id"]) or file_sha256(clip["path"])
        decode = self.decode or decode_whole
        rate = 16000
        out = []
        for start, end in spans:
            span = (round(start, 3), round(end, 3))
            fields = {"audio": audio_sha, "model": self.model, "beam": self.beam,
                      "language": clip["lang"], "task": task, "span": list(span)}
            key = cache_key(audio_sha, self.model, self.beam, clip["lang"], task, span)
            a = max(0, int((start - SPAN_PAD_S) * rate))
            b = min(len(audio), int((end + SPAN_PAD_S) * rate))
            piece = np.asarray(audio[a:b]).astype(np.float32) / 32768.0
            def run(piece: Any = piece) -> str:
                if not len(piece):
                    return ""
                return decode(self.whisper, piece, clip["lang"], task, self.beam)

            text, decoded = self._text(key, fields, run)
            if decoded:
                self.spans_decoded += 1
            else:
                self.spans_cached += 1
            out.append(text)
        return out


def decode_whole(model: Any, audio: Any, language: str, task: str, beam: int) -> str:
    """The whole clip decoded at once by a loaded ``faster_whisper.WhisperModel``."""
    segments, _ = model.transcribe(audio, task=task, language=language, beam_size=beam,
                                   condition_on_previous_text=False)
    return " ".join(segment.text.strip() for segment in segments).strip()


def offline_references(
    model: Any, model_dir: str | Path, clips: list[dict[str, Any]], beam: int, target: str,
    *, cache: OfflineCache | None = None, progress: bool = True,
    decode: Callable[[Any, Any, str, str, int], str] = decode_whole,
) -> OfflineRun:
    """Offline texts of ``clips`` (from the cache where it has them). Blocking; call it
    while no session runs (before the streamed clips)."""
    import numpy as np

    from speechpipe.transport.file_replay import read_audio

    cache = cache or OfflineCache()
    run = OfflineRun(beam=beam, model=model_identity(model_dir), whisper=model, cache=cache,
                     decode=decode)
    iterator: Any = clips
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(clips, desc="offline reference", unit="clip", file=sys.stderr, leave=False)
        iterator = bar
    for clip in iterator:
        audio_sha = run.audio_sha256[clip["id"]] = file_sha256(clip["path"])
        samples: list[Any] = []  # read once, only when a decode needs it

        def whole(task: str, clip: dict[str, Any] = clip, samples: list[Any] = samples) -> str:
            if not samples:
                samples.append(read_audio(clip["path"]).astype(np.float32) / 32768.0)
            return decode(model, samples[0], clip["lang"], task, beam)

        target_task = "transcribe" if clip["lang"] == target else "translate"
        for task in dict.fromkeys((target_task, "transcribe")):  # target side first
            fields = {"audio": audio_sha, "model": run.model, "beam": beam,
                      "language": clip["lang"], "task": task}
            key = cache_key(audio_sha, run.model, beam, clip["lang"], task)
            text, decoded = run._text(key, fields, partial(whole, task))
            if decoded:
                run.decoded += 1
            else:
                run.cached += 1
            if task == target_task:
                run.texts[clip["id"]] = text
            if task == "transcribe":
                run.source_texts[clip["id"]] = text
    if bar is not None:
        bar.close()
    return run
