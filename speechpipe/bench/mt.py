"""``speechpipe bench mt``: does incremental text MT cost grow with the utterance length?

Replays committed-source streams of growing length (``words_per_update`` new committed words
per update, as streaming ASR commits them) through ``IncrementalTextTranslation`` and a
``Ct2TextTranslator``, and reports per-update latency (median, p95) and the work per update
(tokens through the model: source encoded + target prefix forced + tokens generated).

Two policies are compared: ``segmented`` (the shipped policy: only the open sentence is
re-translated) and ``whole`` (re-translating the whole committed utterance prefix every
update, the naive policy). If work per update is flat in the utterance length, total work is
linear; if it grows linearly, total work is quadratic. The fitted exponents say which.

Without a model folder it builds a tiny random-weight model (``speechpipe.bench.tiny_mt``,
which the tests use too); its output is gibberish, but it runs to the decoding-length cap,
so its work tracks source length the way a real model's does.
"""

from __future__ import annotations

import math
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from speechpipe.bench.record import print_decoder
from speechpipe.bench.stats import percentile_ms
from speechpipe.decoder_path import mt_decoder_path
from speechpipe.models.mt.ct2_translator import Ct2TextTranslator, TextMtRequest
from speechpipe.stages.text_mt import IncrementalTextTranslation, TextMtOptions

__all__ = ["run_mt_growth_bench", "POLICIES"]

POLICIES: dict[str, TextMtOptions] = {
    "segmented": TextMtOptions(),
    "whole": TextMtOptions(min_segment_words=10**9, clause_min_words=10**9,
                           max_segment_words=10**9),
}


def _tiny_model(folder: Path) -> Path:
    from speechpipe.bench.tiny_mt import build_tiny_mt

    return Path(build_tiny_mt(folder / "tiny-nllb", "nllb"))


def _source_words(count: int) -> list[str]:
    """Deterministic English-like sentences (9-12 words each), cut to ``count`` words."""
    subjects = ["The old man", "A small bird", "My friend", "The teacher", "Our neighbour"]
    verbs = ["sees", "likes", "finds", "follows", "remembers"]
    objects = ["the red ball", "a green house", "the long river", "an open window"]
    tails = ["every morning.", "near the station.", "after dinner?", "in the rain!"]
    words: list[str] = []
    i = 0
    while len(words) < count:
        sentence = (f"{subjects[i % 5]} {verbs[(i // 5) % 5]} {objects[(i // 2) % 4]} "
                    f"{tails[(i // 3) % 4]}")
        words.extend(sentence.split())
        i += 1
    return words[:count]


def _exponent(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of log(y) against log(x): 1 = linear, 2 = quadratic."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0]
    if len(pts) < 2:
        return float("nan")
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    var = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / var if var else float("nan")


def _replay(
    translator: Ct2TextTranslator, words: list[str], options: TextMtOptions, step: int,
    source_lang: str, target_lang: str,
) -> dict[str, Any]:
    policy = IncrementalTextTranslation(source_lang, target_lang, options=options)
    latencies, work = [], []
    cuts = list(range(step, len(words), step)) + [len(words)]
    for n, end in enumerate(cuts):
        final = n == len(cuts) - 1
        started = time.perf_counter()
        requests: list[TextMtRequest] = policy.update(" ".join(words[:end]), final=final)
        results = translator.translate_batch(requests) if requests else []
        policy.apply(results)
        latencies.append(time.perf_counter() - started)
        work.append(sum(r.source_tokens + r.prefix_tokens + r.generated_tokens for r in results))
    return {
        "words": len(words),
        "updates": len(cuts),
        "latency_median_ms": 1000 * statistics.median(latencies),
        "latency_p95_ms": percentile_ms(latencies, 95),
        "tokens_per_update_mean": statistics.fmean(work),
        "tokens_per_update_max": max(work),
        "tokens_total": sum(work),
    }


def run_mt_growth_bench(
    model_dir: str | Path | None = None,
    lengths: Sequence[int] = (10, 20, 40, 80, 160),
    *,
    source_lang: str = "en",
    target_lang: str = "fr",
    words_per_update: int = 2,
    policies: Sequence[str] = ("segmented", "whole"),
    threads: int = 0,
    out: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the growth benchmark; print a table through ``out`` and return the figures."""
    with tempfile.TemporaryDirectory(prefix="speechpipe-bench-mt-") as tmp:
        folder = Path(model_dir) if model_dir is not None else _tiny_model(Path(tmp))
        translator = Ct2TextTranslator(folder, intra_threads=threads)
        translator.check_languages(source_lang, target_lang)
        translator.translate(TextMtRequest("warm up", source_lang, target_lang))
        report: dict[str, Any] = {
            "model": str(model_dir) if model_dir is not None else "tiny random-weight NLLB-style",
            "family": translator.family.value,
            "words_per_update": words_per_update,
            "policies": {},
        }
        out(f"MT growth bench: {report['model']} ({report['family']}), "
            f"{words_per_update} committed words per update")
        print_decoder([mt_decoder_path(native=translator.prefix_reads is not None)], out=out)
        out(f"{'policy':<10} {'words':>5} {'updates':>7} {'median ms':>9} {'p95 ms':>7} "
            f"{'tok/upd':>8} {'max tok':>7} {'total tok':>9}")
        for name in policies:
            rows = [
                _replay(translator, _source_words(n), POLICIES[name], words_per_update,
                        source_lang, target_lang)
                for n in lengths
            ]
            for row in rows:
                out(f"{name:<10} {row['words']:>5} {row['updates']:>7} "
                    f"{row['latency_median_ms']:>9.1f} {row['latency_p95_ms']:>7.1f} "
                    f"{row['tokens_per_update_mean']:>8.1f} {row['tokens_per_update_max']:>7} "
                    f"{row['tokens_total']:>9}")
            xs = [row["words"] for row in rows]
            per_update = _exponent(xs, [row["tokens_per_update_mean"] for row in rows])
            total = _exponent(xs, [row["tokens_total"] for row in rows])
            latency = _exponent(xs, [row["latency_median_ms"] for row in rows])
            out(f"{name:<10} growth exponents vs words: work/update {per_update:.2f}, "
                f"median latency {latency:.2f}, total work {total:.2f} "
                "(0 = flat, 1 = linear, 2 = quadratic)")
            report["policies"][name] = {
                "rows": rows,
                "exponent_work_per_update": per_update,
                "exponent_latency_median": latency,
                "exponent_total_work": total,
            }
    return report
