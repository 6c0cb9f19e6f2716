"""What one Whisper decoder step costs on this machine, by window, beam and items per call.

    python scripts/decoder_step_cost.py [--audio WAV] [--language de] [--tokens 30]
        [--vocabulary-words N [--inplace]]

One CTranslate2 thread, the embedded Whisper base weights, the engine's own encoder input
(audio + 1 s of silence): for each window length, ``generate`` on one fixed encoder output
with ``beam`` hypotheses for each of ``items`` identical prompts, the end-of-text token
suppressed so every call takes exactly ``--tokens`` steps. Prints the best of three calls
and the milliseconds per step. Run it on a quiet machine (docs/benchmarks-history.md, "A third
machine"). A call's items are what ``WhisperEngine`` batches (the captions and the
translation of a request, and requests of other sessions); its beams share the encoder
output's cross-attention keys and values, its items do not. With ``--inplace`` (and a
restricted vocabulary: the native decoder) each shape is also timed with its steps
multiplying the int8 weights in place (``pipeline.asr_inplace_step``), in the same run, and
the ratio printed; the first columns are CTranslate2's own steps either way.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import soundfile as sf

from speechpipe.machine import describe_cpu
from speechpipe.models.whisper.engine import WhisperEngine
from speechpipe.models.whisper.prefill import ROWS_STEP_MAX
from speechpipe.models.whisper.weights import resolve_whisper_model

SHARED_CLIP = Path(__file__).resolve().parents[1] / "../shared/samples/wav/de_silero_60s.wav"
SHAPES = ((1, 1), (5, 1), (10, 1), (1, 5), (1, 10), (5, 2), (2, 5))  # (beam, items)


def step_cost(engine: WhisperEngine, audio: np.ndarray, language: str, window_s: float,
              beam: int, items: int, tokens: int, words: int = 0,
              rows_step: int = 0) -> tuple[float, int]:
    """Best-of-three seconds of one ``generate`` call and the steps it took; ``words``: the
    decoder restricted to the language's and English's most frequent words (0: full);
    ``rows_step``: steps of at most that many rows multiply in place (restricted only)."""
    import ctranslate2

    encoded = engine._encode_rows([engine.mel(audio[: int(window_s * 16_000)])])
    memory = ctranslate2.StorageView.from_array(
        np.ascontiguousarray(np.repeat(encoded, items, axis=0)))
    model, vocabulary = engine.decoder(language, words)
    prompt = engine._sot(language, "translate")
    eot = engine.eot
    best, steps = float("inf"), 0
    if vocabulary is not None:  # the shared model, its output layer restricted (native)
        native = engine.prefill()
        assert native is not None  # decoder() gives a restriction only with it
        restricted = native.module.PrefillDecoder(
            str(engine.model_dir), 1, sorted(int(i) for i in vocabulary.kept),
            rows_step=rows_step)
        rows = np.ascontiguousarray(np.repeat(encoded, items, axis=0))
        for _ in range(3):
            start = time.perf_counter()
            got = restricted.generate(rows, [prompt] * items, prompt_tokens=3, sot_index=0,
                                      beam_size=beam, max_steps=tokens, suppress=[eot])
            best = min(best, time.perf_counter() - start)
            steps = len(got[0].ids)
        return best, steps
    for _ in range(3):
        start = time.perf_counter()
        out = model.generate(memory, [prompt] * items, beam_size=beam,
                             max_length=2 * tokens, suppress_blank=False,
                             suppress_tokens=[eot])
        best = min(best, time.perf_counter() - start)
        steps = len(out[0].sequences_ids[0])
    return best, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--audio", type=Path, default=SHARED_CLIP)
    parser.add_argument("--language", default="de")
    parser.add_argument("--tokens", type=int, default=30)
    parser.add_argument("--windows", default="3,9", help="window lengths in seconds")
    parser.add_argument("--vocabulary-words", type=int, default=0,
                        help="decoders restricted to this many words per language "
                             "(asr.vocabulary_words; 0: the full vocabulary)")
    parser.add_argument("--inplace", action="store_true",
                        help="also time each shape with in-place steps (needs "
                             "--vocabulary-words)")
    args = parser.parse_args()
    if args.inplace and not args.vocabulary_words:
        raise SystemExit("--inplace needs --vocabulary-words (the native decoder)")
    try:
        audio, rate = sf.read(args.audio, dtype="float32")
    except (OSError, RuntimeError) as exc:  # missing file, not audio (soundfile's errors)
        raise SystemExit(f"{args.audio}: cannot read audio ({exc})") from None
    if rate != 16_000 or audio.ndim != 1:
        raise SystemExit(f"{args.audio}: needs 16 kHz mono audio")
    engine = WhisperEngine(resolve_whisper_model(), cpu_threads=1)
    print(f"machine: {describe_cpu()}; load average {os.getloadavg()[0]:.2f}")
    extra = f" {'in place':>8} {'ratio':>6}" if args.inplace else ""
    print(f"{'window':>6} {'beam':>4} {'items':>5} {'hyps':>4} {'call ms':>8} {'ms/step':>8}"
          + extra)
    for window_s in (float(w) for w in args.windows.split(",")):
        for beam, items in SHAPES:
            seconds, steps = step_cost(engine, audio, args.language, window_s, beam, items,
                                       args.tokens, args.vocabulary_words)
            per_step = seconds * 1000 / max(1, steps)
            line = (f"{window_s:>6.0f} {beam:>4} {items:>5} {beam * items:>4} "
                    f"{seconds * 1000:>8.0f} {per_step:>8.1f}")
            if args.inplace:
                fast, fast_steps = step_cost(engine, audio, args.language, window_s, beam,
                                             items, args.tokens, args.vocabulary_words,
                                             rows_step=ROWS_STEP_MAX)
                fast_step = fast * 1000 / max(1, fast_steps)
                line += f" {fast_step:>8.1f} {per_step / fast_step:>6.2f}"
            print(line, flush=True)
    print(f"machine: load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
