"""What the voice loses: the speech each phrase became, transcribed against the text it was given.

A development tool, run by hand (it prints what was said; the product never logs it)::

    python benchmarks/voice_losses.py --split tune            # the tuning half, X->English
    python benchmarks/voice_losses.py --split report --json r.json
    python benchmarks/voice_losses.py --split tune --set piper.length_scale=1.0

Each clip of ``../shared/samples`` (categories ``core_x_to_en`` and ``conversational_x_to_en``,
the chosen half of ``speechpipe.evaluation.split``) is replayed at fast pace through the same
pipeline ``speechpipe translate`` runs (deterministic). Every ``tts.audio`` phrase is cut out of
the rendered output at its ``audio_start``/``audio_dur`` and transcribed alone with Whisper
base (int8, English, beam 5); the text the voice was handed is also synthesized alone, at
speed 1, with no trimming (``isolated``), and transcribed the same way. Words are compared
after ``scores.normalize_text`` (digits and number words compared as one), aligned with
difflib. A text word missing from what was heard is a loss, put in the first class it fits:

``number``, ``abbreviation`` (all capitals or dotted: "EU", "U.S.", "Mr."), ``apostrophe``,
``symbol`` (``&``, ``%``, ``/``, ``$``, ...), ``hyphen``, ``first_word`` / ``last_word`` of a
phrase (a cut at its edge), ``short_phrase`` (a phrase of 1-2 words), ``sped_up`` (spoken
faster than 1.0), ``other``.

The table shows, per class, the text words, those lost in the played speech and those lost
in the isolated synthesis: a loss in both is the text (the voice cannot say it), a loss only
in the played speech is how it was played (speed, trimming, a continuation's cut tail). It
also checks the timeline: a phrase laid before the previous one ended (an overlap) and how
late phrases were laid after they were produced. Then the clip-level figures: the streamed
text's BLEU and the ASR-BLEU of the whole output (as ``speechpipe eval`` transcribes it).
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import os
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from speechpipe.config import PipelineOptions, with_overrides
from speechpipe.evaluation.manifest import reference_for
from speechpipe.evaluation.scores import corpus_bleu, normalize_text
from speechpipe.evaluation.split import split_of
from speechpipe.file_translation import translate_audio
from speechpipe.session import Pipeline
from speechpipe.stages import tts as tts_module
from speechpipe.stages.request import SessionRequest
from speechpipe.voices.registry import resolve_voice
from speechpipe.voices.tts_worker import resample_int16

CATEGORIES = ("core_x_to_en", "conversational_x_to_en")
RATE = 16_000
PAD_S = 0.3  # silence around a phrase before Whisper hears it
CLASSES = ("number", "abbreviation", "apostrophe", "symbol", "hyphen", "first_word",
           "last_word", "short_phrase", "sped_up", "other")
_DIGITS = re.compile(r"\d")
_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
         "fourteen fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_NUMBER_WORD = {w: str(i) for i, w in enumerate(_ONES)} | {
    w: str(20 + 10 * i) for i, w in enumerate(_TENS)}


def _default_manifest() -> Path:
    return Path(__file__).resolve().parents[2] / "shared" / "samples" / "manifest.jsonl"


def load_clips(manifest: Path, split: str, categories: tuple[str, ...]) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in manifest.read_text().splitlines() if line.strip()]
    clips = [r for r in rows if r.get("category") in categories and split_of(r) == split]
    for clip in clips:
        clip["path"] = manifest.parent / clip["file"]
    return clips


def compare_words(text: str) -> list[str]:
    """``normalize_text`` words, number words as digits ("ten" and "10" compare equal)."""
    return [_NUMBER_WORD.get(w, w) for w in normalize_text(text).split()]


def lost_words(text: str, heard: str) -> list[int]:
    """Indexes of the words of ``text`` (``text.split()``) missing from ``heard``."""
    raw = text.split()
    owner: list[int] = []  # compare word -> the raw word it came from
    words: list[str] = []
    for i, word in enumerate(raw):
        for part in compare_words(word):
            words.append(part)
            owner.append(i)
    got = compare_words(heard)
    matched = [False] * len(words)
    for block in difflib.SequenceMatcher(a=words, b=got, autojunk=False).get_matching_blocks():
        for k in range(block.a, block.a + block.size):
            matched[k] = True
    lost = sorted({owner[k] for k, ok in enumerate(matched) if not ok})
    return lost


def word_class(words: list[str], i: int, speed: float) -> str:
    word = words[i]
    bare = word.strip("\"'“”‘’«»()[]¿¡,.;:?!…")
    if _DIGITS.search(word):
        return "number"
    letters = re.sub(r"[^A-Za-z]", "", bare)
    if (len(letters) >= 2 and letters.isupper()) or re.search(r"[A-Za-z]\.[A-Za-z]", bare) or (
            word.endswith(".") and bare.casefold() in {"mr", "mrs", "ms", "dr", "st", "prof",
                                                      "vs", "etc", "jr", "sr"}):
        return "abbreviation"
    if "'" in bare or "’" in bare:
        return "apostrophe"
    if re.search(r"[&%/$€£+=@#*<>_~^|\\]", bare):
        return "symbol"
    if "-" in bare or "–" in bare:
        return "hyphen"
    if len(words) <= 2:
        return "short_phrase"
    if i == 0:
        return "first_word"
    if i == len(words) - 1:
        return "last_word"
    if speed > 1.0:
        return "sped_up"
    return "other"


def _pad(audio: np.ndarray) -> np.ndarray:
    pad = np.zeros(int(PAD_S * RATE), np.int16)
    return np.concatenate([pad, audio, pad])


def transcribe(model: Any, audio: np.ndarray) -> str:
    """Whisper base, English, beam 5, no previous text; int16 16 kHz in."""
    if not len(audio) or not np.any(audio):
        return ""
    segments, _ = model.transcribe(audio.astype(np.float32) / 32768.0, language="en",
                                   task="transcribe", beam_size=5,
                                   condition_on_previous_text=False, without_timestamps=True)
    return " ".join(s.text.strip() for s in segments).strip()


class VoiceLog:
    """What each TTS stage handed its voice: (voice text, speed, samples out), in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float, int]] = []
        original = tts_module.TtsStage.__init__
        log = self

        def init(stage: Any, speak: Any, *args: Any, **kwargs: Any) -> None:
            async def logged(text: str, speed: float, due: float | None) -> np.ndarray:
                samples = await speak(text, speed, due)
                log.calls.append((text, speed, len(samples)))
                return samples

            original(stage, logged, *args, **kwargs)

        tts_module.TtsStage.__init__ = init  # type: ignore[method-assign]


def analyse_clip(pipeline: Pipeline, whisper: Any, synth: Any | None, voice_log: VoiceLog,
                 clip: dict[str, Any], request: SessionRequest) -> dict[str, Any]:
    """Replay ``clip``; each phrase's text, voice text, speed, what was heard (played and,
    with a ``synth``, isolated) and its words lost."""
    import soundfile

    audio, rate = soundfile.read(clip["path"], dtype="int16")
    if audio.ndim > 1:
        audio = audio[:, 0]
    audio = resample_int16(audio, rate, RATE)
    voice_log.calls.clear()
    run = asyncio.run(translate_audio(pipeline, audio, replace(request, source_lang=clip["lang"])))
    out = run.output
    spoken = [c for c in voice_log.calls if c[2]]
    chunks = [r for r in run.records if r["event"] == "tts.audio"]
    if len(spoken) != len(chunks):
        raise RuntimeError(f"{clip['id']}: {len(spoken)} syntheses, {len(chunks)} chunks")
    phrases = []
    previous_end = 0.0
    for (voice_text, speed, _), chunk in zip(spoken, chunks, strict=True):
        start, dur = chunk["audio_start"], chunk["audio_dur"]
        played = out[int(round(start * RATE)): int(round((start + dur) * RATE))]
        isolated = (np.zeros(0, np.int16) if synth is None else
                    resample_int16(synth.synthesize(voice_text, 1.0), synth.sample_rate, RATE))
        text = chunk["text"]
        heard = transcribe(whisper, _pad(played))
        heard_iso = transcribe(whisper, _pad(isolated)) if synth is not None else heard
        phrases.append({
            "utterance": chunk["utterance"], "text": text, "voice_text": voice_text,
            "speed": speed, "heard": heard, "heard_isolated": heard_iso,
            "lost": lost_words(text, heard), "lost_isolated": lost_words(text, heard_iso),
            "overlap_s": round(max(0.0, previous_end - start), 4),
            "laid_late_s": round(start - chunk["stream_t"], 4),
            "dur_s": dur, "isolated_dur_s": round(len(isolated) / RATE, 4),
        })
        previous_end = max(previous_end, start + dur)
    return {"id": clip["id"], "category": clip["category"], "target_text": run.target_text,
            "reference": reference_for(clip, "en"),
            "start_offset": run.scores.get("start_offset"),
            "end_offset": run.scores.get("end_offset"),
            "asr_text": transcribe(whisper, out), "phrases": phrases}


def tabulate(clips: list[dict[str, Any]], out: Any = sys.stdout) -> dict[str, Any]:
    words: Counter[str] = Counter()
    lost: Counter[str] = Counter()
    lost_iso: Counter[str] = Counter()
    examples: dict[str, list[str]] = defaultdict(list)
    total = played_lost = iso_lost = 0
    phrase_count = overlaps = 0
    late: list[float] = []
    speeds: Counter[float] = Counter()
    by_speed: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for clip in clips:
        for p in clip["phrases"]:
            phrase_count += 1
            overlaps += p["overlap_s"] > 0.005
            late.append(p["laid_late_s"])
            speeds[p["speed"]] += 1
            tokens = p["text"].split()
            key = "1.0" if p["speed"] <= 1.0 else ">1.0"
            by_speed[key][0] += len(tokens)
            by_speed[key][1] += len(p["lost"])
            for i in range(len(tokens)):
                cls = word_class(tokens, i, p["speed"])
                words[cls] += 1
                total += 1
                if i in p["lost"]:
                    lost[cls] += 1
                    played_lost += 1
                    if len(examples[cls]) < 4:
                        examples[cls].append(f"{tokens[i]!r} in {p['text']!r} -> {p['heard']!r}")
                if i in p["lost_isolated"]:
                    lost_iso[cls] += 1
                    iso_lost += 1
    print(f"{'class':<14}{'words':>7}{'lost played':>13}{'lost isolated':>15}", file=out)
    for cls in CLASSES:
        if words[cls]:
            print(f"{cls:<14}{words[cls]:>7}{lost[cls]:>13}{lost_iso[cls]:>15}", file=out)
    print(f"{'all':<14}{total:>7}{played_lost:>13}{iso_lost:>15}", file=out)
    recall = 1 - played_lost / total if total else None
    recall_iso = 1 - iso_lost / total if total else None
    print(f"per-phrase word recall: played {recall:.4f}, isolated {recall_iso:.4f} "
          f"({phrase_count} phrases, {total} words)", file=out)
    for key, (n, k) in sorted(by_speed.items()):
        print(f"  speed {key}: {n} words, {k} lost ({k / n:.1%})" if n else "", file=out)
    print(f"speeds: {dict(sorted(speeds.items()))}", file=out)
    print(f"timeline: {overlaps} overlaps; laid after produced: max {max(late, default=0):.2f} s",
          file=out)
    hyps = [c["target_text"] for c in clips]
    refs = [c["reference"] for c in clips]
    bleu = corpus_bleu(hyps, refs) if clips else None
    asr_bleu = corpus_bleu([c["asr_text"] for c in clips], refs) if clips else None
    print(f"clips {len(clips)}: text BLEU {bleu:.2f}, ASR-BLEU (whole output) {asr_bleu:.2f}",
          file=out)
    starts = [c["start_offset"] for c in clips if c.get("start_offset") is not None]
    ends = [c["end_offset"] for c in clips if c.get("end_offset") is not None]
    if starts and ends:
        print(f"fast pace: StartOffset p50 {np.median(starts):.2f} s, "
              f"EndOffset p50 {np.median(ends):.2f} s", file=out)
    for cls in CLASSES:
        for example in examples[cls]:
            print(f"  {cls}: {example}", file=out)
    return {"recall_played": recall, "recall_isolated": recall_iso, "words": total,
            "bleu": bleu, "asr_bleu": asr_bleu,
            "start_offset_p50": float(np.median(starts)) if starts else None,
            "end_offset_p50": float(np.median(ends)) if ends else None,
            "classes": {c: [words[c], lost[c], lost_iso[c]] for c in CLASSES if words[c]}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--manifest", type=Path, default=_default_manifest())
    parser.add_argument("--split", choices=("tune", "report"), default="tune")
    parser.add_argument("--category", action="append", default=None)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--set", action="append", default=[], metavar="GROUP.FIELD=VALUE")
    parser.add_argument("--json", type=Path, default=None, help="write every phrase here")
    parser.add_argument("--phrases", action="store_true", help="print every phrase")
    parser.add_argument("--no-isolated", action="store_true",
                        help="skip the isolated synthesis (its column repeats the played one)")
    args = parser.parse_args()

    from faster_whisper import WhisperModel

    clips = load_clips(args.manifest, args.split, tuple(args.category or CATEGORIES))
    clips = clips[: args.limit] if args.limit else clips
    options = with_overrides(PipelineOptions(), args.set)
    pipeline = Pipeline.load(options)
    whisper = WhisperModel(os.path.expanduser("~/.cache/speechpipe/models/whisper-base"),
                           compute_type="int8", cpu_threads=2)
    voice = resolve_voice(None, "en", options.voice_dirs)
    synth = None if args.no_isolated else pipeline.tts_worker(voice).synthesizer
    voice_log = VoiceLog()
    request = SessionRequest(pace="fast", priority="replay")
    results = []
    t0 = time.monotonic()
    try:
        for n, clip in enumerate(clips, 1):
            results.append(analyse_clip(pipeline, whisper, synth, voice_log, clip, request))
            print(f"[{n}/{len(clips)}] {clip['id']} {time.monotonic() - t0:.0f} s",
                  file=sys.stderr)
    finally:
        pipeline.close()
    if args.phrases:
        for clip in results:
            for p in clip["phrases"]:
                mark = "" if not p["lost"] else f"  LOST {p['lost']}"
                print(f"{clip['id']} x{p['speed']:.2f} {p['voice_text']!r} -> {p['heard']!r}"
                      f" | iso {p['heard_isolated']!r}{mark}")
    summary = tabulate(results)
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "clips": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
