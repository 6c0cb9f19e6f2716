"""Whisper's language detection on growing prefixes of real clips, and the lock rules on them.

    python scripts/language_detection.py [--manifest ../shared/samples/manifest.jsonl ...]
        [--detections OUT.json] [--from-detections OUT.json]

Why it exists (issue 47, item 1): ``source_lang=auto`` fixes the language of an utterance
from Whisper's detection on the audio heard so far, decode after decode. This script replays
that on every clip of the manifests (the shared real clips and the bundled espeak samples by
default): the detector (Whisper's, as the engine calls it; kept as the engine keeps it,
``top_languages``: the five most likely, renormalized over ``--among`` when given)
on the clip from 0.3 s before its speech (webrtcvad, the first 90 ms voiced) to 0.5, 0.75, ...
3.5 s of audio, as the pipeline's partials see it every ``asr.step_s``, and on the whole clip
(its first 15 s at most: an utterance's window).
Then it scores the lock rules on those same detections: which language each fixes, and when:

- ``last``: the newest detection alone decides (the rule before this round): fixed once its
  probability reaches ``confident`` on at least ``min_s`` of audio, else at ``lock_s`` to the
  newest detection's language;
- ``vote``: ``speechpipe.stages.language_vote.settle_language``, the same thresholds on the
  share of the detections so far, averaged with weights by the audio each heard.

It prints, per rule and category, how many clips are fixed to the right language, the mean
wait, and how many are fixed with a confidence under ``confident`` (those a session detects
again at its next utterance). One model run; ``--from-detections`` rescores saved detections.
Run it on a quiet machine when its timings matter (they do not here: the figures are counts).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from speechpipe.stages.language_vote import top_languages

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = (ROOT / "../shared/samples/manifest.jsonl", ROOT / "samples/manifest.jsonl")
PREFIXES_S = tuple(0.5 + 0.25 * k for k in range(13))  # 0.5 ... 3.5 s of audio
LEAD_IN_S = 0.3


def speech_start(audio: np.ndarray, rate: int = 16_000) -> float:
    """Seconds to the first 90 ms of voiced 30 ms frames (webrtcvad, mode 2); 0 if none."""
    import webrtcvad

    vad = webrtcvad.Vad(2)
    frame = rate * 30 // 1000
    pcm = (np.clip(audio, -1, 1) * 32767).astype(np.int16)
    run = 0
    for k in range(len(pcm) // frame):
        voiced = vad.is_speech(pcm[k * frame:(k + 1) * frame].tobytes(), rate)
        run = run + 1 if voiced else 0
        if run == 3:
            return (k - 2) * frame / rate
    return 0.0


def detect(manifests: list[Path]) -> list[dict]:
    """The detections of every clip (a row per clip: id, lang, category, prefix -> every
    language's probability)."""
    import ctranslate2

    from speechpipe.models.whisper.engine import WhisperEngine
    from speechpipe.models.whisper.weights import resolve_whisper_model

    engine = WhisperEngine(resolve_whisper_model(), cpu_threads=2)
    rows = []
    for manifest in manifests:
        for line in manifest.read_text().splitlines():
            clip = json.loads(line)
            if clip.get("category") == "long_soak":
                continue  # minutes of one speaker: its first seconds are another clip's
            audio, rate = sf.read(manifest.parent / clip["file"], dtype="float32")
            if audio.ndim > 1:
                audio = audio.mean(axis=1)
            if rate != 16_000:
                audio, rate = soxr.resample(audio, rate, 16_000).astype(np.float32), 16_000
            start = max(0.0, speech_start(audio) - LEAD_IN_S)
            heard = [s for s in PREFIXES_S if start + s < len(audio) / rate]
            detections = {}
            for seconds in [*heard, None]:
                # "whole": at most 15 s (an utterance window is never longer)
                end = (min(len(audio), int((start + 15) * rate)) if seconds is None
                       else int((start + seconds) * rate))
                view = ctranslate2.StorageView.from_array(np.ascontiguousarray(
                    engine._encode_rows([engine.mel(audio[int(start * rate):end])])))
                key = "whole" if seconds is None else f"{seconds:.2f}"
                # every language's probability: scoring keeps what the engine keeps
                detections[key] = [(token[2:-2], float(prob)) for token, prob
                                   in engine.model.model.detect_language(view)[0]]
            rows.append({"id": clip["id"], "lang": clip["lang"],
                         "category": clip.get("category", ""),
                         "source": ("bundled" if manifest.resolve() == MANIFESTS[1].resolve()
                                    else "shared"),
                         "whole_s": round(len(audio) / rate - start, 2),
                         "detections": detections})
    return rows


def fixed_by(rule: str, detections: dict, confident: float, min_s: float, lock_s: float
             ) -> tuple[str, float, float]:
    """(language, seconds heard when fixed, its confidence) under ``rule``."""
    from speechpipe.stages.language_vote import LanguageVote, settle_language

    vote = LanguageVote()
    heard = 0.0
    for key, probs in detections.items():
        if key == "whole":
            continue
        heard = float(key)
        vote.add(probs, heard)
        language, confidence = probs[0] if rule == "last" else vote.leader()
        if rule == "last":
            if heard >= lock_s or (heard >= min_s and confidence >= confident):
                return language, heard, confidence
        elif (decision := settle_language(vote, heard, confident, min_s, lock_s)) is not None:
            return decision[0], heard, decision[1]
    # the utterance ended before lock_s: its final decode heard the whole clip
    probs = detections["whole"]
    vote.add(probs, max(heard, lock_s))
    language, confidence = probs[0] if rule == "last" else vote.leader()
    return language, max(heard, lock_s), confidence


RULES = ("last", "vote")


def score(rows: list[dict], confident: float, min_s: float, lock_s: float) -> None:
    """Print right / wait / unsure per rule and group."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        group = "bundled (espeak)" if row["source"] == "bundled" else row["category"]
        groups[group].append(row)
        groups["all"].append(row)
    print(f"rule thresholds: confident {confident}, min {min_s} s, lock {lock_s} s of audio")
    print(f"{'group':28} {'clips':>5} | " + " | ".join(
        f"{rule + ': right':>11} {'wait':>6} {'unsure':>6} {'wrong sure':>10}" for rule in RULES)
        + " | whole clip right")
    for group, members in groups.items():
        cells = []
        for rule in RULES:
            fixes = [fixed_by(rule, r["detections"], confident, min_s, lock_s) for r in members]
            right = [f[0] == r["lang"] for f, r in zip(fixes, members, strict=True)]
            pairs = zip(fixes, right, strict=True)
            cells.append(f"{sum(right):>11} {statistics.mean(f[1] for f in fixes):>5.2f}s "
                         f"{sum(f[2] < confident for f in fixes):>6} "
                         f"{sum(f[2] >= confident and not ok for f, ok in pairs):>10}")
        whole = sum(r["detections"]["whole"][0][0] == r["lang"] for r in members)
        print(f"{group:28} {len(members):>5} | {' | '.join(cells)} | {whole}")
    wrong = [(r["id"], r["lang"], fixed_by("vote", r["detections"], confident, min_s, lock_s))
             for r in rows]
    print("fixed wrong by the vote:", ", ".join(
        f"{cid} -> {lang} ({conf:.2f} at {heard:.2f} s)"
        for cid, truth, (lang, heard, conf) in wrong if lang != truth) or "none")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifest", action="append", type=Path)
    parser.add_argument("--detections", type=Path, help="save the detections here (JSON)")
    parser.add_argument("--from-detections", type=Path, help="rescore saved detections")
    parser.add_argument("--confident", type=float, default=0.8)
    parser.add_argument("--min-s", type=float, default=1.3)
    parser.add_argument("--lock-s", type=float, default=3.0)
    parser.add_argument("--among", default="", help="detect among these languages only "
                        "(comma-separated, as asr.detect_among): each detection's five most "
                        "likely languages filtered to them")
    args = parser.parse_args()
    if args.from_detections:
        rows = json.loads(args.from_detections.read_text())
    else:
        rows = detect(args.manifest or [m for m in MANIFESTS if m.exists()])
        if args.detections:
            args.detections.write_text(json.dumps(rows))
    among = frozenset(args.among.split(",")) if args.among else frozenset()
    for row in rows:  # what the engine hands on (WhisperResult.language_probs)
        row["detections"] = {key: top_languages(map(tuple, probs), among)
                             for key, probs in row["detections"].items()}
    if among:
        print(f"detection among {','.join(sorted(among))}")
    score(rows, args.confident, args.min_s, args.lock_s)


if __name__ == "__main__":
    main()
