"""``speechpipe bench cascade --prefix-sweep``: what an open segment's update costs as its
committed translation (the forced prefix) grows, read step by step (``translate_batch``)
against one pass (models/mt/prefill.py), on the same model in one process.

Each row: a forced prefix of N target tokens and an update decoding up to ``new_tokens``
more (``text_mt.open_new_tokens``), median and p95 of ``repeats`` calls, one thread.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from speechpipe.bench.stats import percentile_ms
from speechpipe.bench.tiny_mt import generated_sentences
from speechpipe.models.mt.ct2_translator import Ct2TextTranslator, TextMtRequest

__all__ = ["prefix_sweep", "print_prefix_sweep"]

PREFIX_TOKENS = (0, 8, 16, 24, 32, 48)


def _timed(translator: Ct2TextTranslator, request: TextMtRequest, repeats: int) -> list[float]:
    translator.translate(request)  # warm
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        translator.translate(request)
        times.append(time.perf_counter() - start)
    return times


def prefix_sweep(model_dir: Path, source_lang: str, target_lang: str, *, repeats: int = 5,
                 new_tokens: int = 8) -> list[dict[str, float | int]]:
    """Per prefix length: step-by-step and one-pass update times (ms, median and p95)."""
    stepwise = Ct2TextTranslator(model_dir, intra_threads=1, prefill=False)
    one_pass = Ct2TextTranslator(model_dir, intra_threads=1)
    if one_pass.prefix_reads is None:
        raise RuntimeError("the one-pass prefix reader is not available here (see the log)")
    source = " ".join(generated_sentences(3, seed=7))
    # a long target to cut prefixes from: the model's own greedy words, closed to its cap
    words = stepwise.translate(TextMtRequest(source, source_lang, target_lang)).text.split()
    rows = []
    for tokens in PREFIX_TOKENS:
        # words until the prefix reaches ``tokens`` pieces (the model's own, so it is a prefix
        # it could have committed)
        prefix, k = "", 0
        while k < len(words) and stepwise.forced_tokens(TextMtRequest(
                source, source_lang, target_lang, target_prefix=prefix)) < tokens:
            k += 1
            prefix = " ".join(words[:k])
        request = TextMtRequest(source, source_lang, target_lang, target_prefix=prefix,
                                max_new_tokens=new_tokens)
        forced = stepwise.forced_tokens(request)
        a, b = _timed(stepwise, request, repeats), _timed(one_pass, request, repeats)
        rows.append({"prefix_tokens": forced,
                     "stepwise_ms": round(1000 * statistics.median(a), 1),
                     "stepwise_p95_ms": round(percentile_ms(a, 95), 1),
                     "one_pass_ms": round(1000 * statistics.median(b), 1),
                     "one_pass_p95_ms": round(percentile_ms(b, 95), 1)})
    return rows


def print_prefix_sweep(rows: list[dict[str, float | int]]) -> None:
    print(f"{'prefix tokens':>13} {'step by step ms (p95)':>22} {'one pass ms (p95)':>18} "
          f"{'ratio':>6}")
    for r in rows:
        ratio = float(r["one_pass_ms"]) / float(r["stepwise_ms"])
        print(f"{r['prefix_tokens']:>13} {r['stepwise_ms']:>12} ({r['stepwise_p95_ms']:>6}) "
              f"{r['one_pass_ms']:>9} ({r['one_pass_p95_ms']:>6}) {ratio:>6.2f}")
