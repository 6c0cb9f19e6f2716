"""How often each int8 decoder step gives the float32 model's decode, on real clips.

    python scripts/int8_fidelity.py [--manifest ../shared/samples/manifest.jsonl]
        [--category core_x_to_en --category conversational_x_to_en] [--limit N]

For every clip, at 3, 6 and 10 s windows (those the clip reaches), both tasks (captions and
translation), beam 5: one int8 encoder output, decoded three ways. The float32 model decodes it
with CTranslate2's ``generate``, and that decode is the reference. The int8 native decoder
decodes it with CTranslate2's own step (on a CPU without VNNI, oneDNN's products saturate)
and with the in-place step (exact products; ``pipeline.asr_inplace_step``). The script prints
how many decodes equal the reference exactly, and the share of the reference's tokens each
decoder matches before its first difference (docs/benchmarks.md, twenty-sixth round).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import soundfile as sf

from speechpipe.machine import describe_cpu
from speechpipe.models.whisper.engine import WhisperEngine
from speechpipe.models.whisper.prefill import ROWS_STEP_MAX, native_prefill
from speechpipe.models.whisper.weights import resolve_whisper_model

SHARED = Path(__file__).resolve().parents[1] / "../shared/samples/manifest.jsonl"
WINDOWS_S = (3.0, 6.0, 10.0)


def matched_prefix(ids: list[int], reference: list[int]) -> int:
    """The reference's tokens ``ids`` gives before their first difference."""
    n = 0
    for a, b in zip(ids, reference, strict=False):
        if a != b:
            break
        n += 1
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path, default=SHARED)
    parser.add_argument("--category", action="append", default=[],
                        help="only these manifest categories (repeatable; default: the "
                             "x-to-English ones)")
    parser.add_argument("--limit", type=int, default=0, help="the first N clips (0: all)")
    args = parser.parse_args()
    import ctranslate2

    module = native_prefill()
    if module is None:
        raise SystemExit("the native decoder is not built here (see setup.py)")
    try:
        lines = args.manifest.read_text().splitlines()
    except OSError as exc:
        raise SystemExit(f"{args.manifest}: cannot read the manifest ({exc})") from None
    categories = set(args.category or ("core_x_to_en", "conversational_x_to_en"))
    clips = [c for c in map(json.loads, filter(None, lines)) if c.get("category") in categories]
    clips = clips[: args.limit] if args.limit else clips
    if not clips:
        raise SystemExit(f"{args.manifest}: no clip of {sorted(categories)}")
    engine = WhisperEngine(resolve_whisper_model(), cpu_threads=1)
    folder = str(engine.model_dir)
    reference_model = ctranslate2.models.Whisper(folder, device="cpu", compute_type="float32",
                                                 intra_threads=1)
    decoders = {"in place": module.PrefillDecoder(folder, 1, rows_step=ROWS_STEP_MAX),
                "CTranslate2's": module.PrefillDecoder(folder, 1)}
    print(f"machine: {describe_cpu()}")
    exact = dict.fromkeys(decoders, 0)
    matched = dict.fromkeys(decoders, 0)
    tokens = total = same = 0
    started = time.perf_counter()
    for clip in clips:
        audio, _ = sf.read(args.manifest.parent / clip["file"], dtype="float32")
        for window_s in WINDOWS_S:
            if window_s > clip["duration_s"] + 1:
                continue
            encoded = engine._encode_rows([engine.mel(audio[: int(window_s * 16_000)])])
            for task in ("transcribe", "translate"):
                prompt = engine._sot(clip["lang"], task)
                reference = list(reference_model.generate(
                    ctranslate2.StorageView.from_array(encoded), [prompt], beam_size=5,
                    max_length=96, suppress_blank=False)[0].sequences_ids[0])
                got = {name: list(d.generate(encoded, [prompt], prompt_tokens=3, sot_index=0,
                                             beam_size=5, max_steps=90)[0].ids)
                       for name, d in decoders.items()}
                total += 1
                tokens += len(reference)
                same += got["in place"] == got["CTranslate2's"]
                for name, ids in got.items():
                    exact[name] += ids == reference
                    matched[name] += matched_prefix(ids, reference)
    print(f"{total} decodes ({len(clips)} clips, windows 3/6/10 s, both tasks, beam 5) in "
          f"{time.perf_counter() - started:.0f} s")
    for name in decoders:
        print(f"{name:>14}: the float32 decode exactly {exact[name]} of {total}; its tokens "
              f"before the first difference {matched[name]} of {tokens} "
              f"({100 * matched[name] / max(1, tokens):.1f} %)")
    print(f"the two int8 steps agree: {same} of {total}")


if __name__ == "__main__":
    main()
