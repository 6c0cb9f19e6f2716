"""``bench cascade``'s trace reading (speechpipe.bench.cascade): cost and added latency."""

from __future__ import annotations

from speechpipe.bench.cascade import cascade_figures


def _r(event: str, t: float, committed: str, utt: int = 0, mt: float | None = None,
       final: bool = False) -> dict:
    record = {"event": event, "wall_t": t, "utterance": utt, "committed": committed,
              "final": final, "language": "en" if event.startswith("asr") else "es",
              "timings": {"mt": mt} if mt is not None else {}}
    return record


def test_latency_from_caption_commit_to_translation_update_and_commit() -> None:
    records = [
        _r("asr.commit", 1.0, "one two"),
        _r("mt.partial", 1.1, "", mt=0.05),        # update 0.1 s after; nothing committed
        _r("asr.commit", 2.0, "one two three"),
        _r("mt.commit", 2.3, "uno dos", mt=0.07),  # commits both waiting captions
        _r("asr.partial", 2.5, "one two three"),   # no growth: not a caption commit
        _r("mt.commit", 3.0, "uno dos tres", mt=0.08, final=True),
    ]
    fig = cascade_figures(records, audio_s=4.0)
    assert fig["committed_source_words"] == 3
    assert fig["mt_s"] == 0.2 and fig["mt_s_per_audio_s"] == 0.05
    assert fig["mt_ms_per_word"] == round(200 / 3, 2)
    assert fig["commit_to_update_s"]["n"] == 2
    assert fig["commit_to_commit_s"]["n"] == 2
    assert abs(fig["commit_to_commit_s"]["p95"] - 1.3) < 0.1  # the first waited to 2.3 s
    # covered: "one two" by "uno dos" at 2.3 s (1.3 s), "one two three" by the final (1.0 s)
    assert fig["commit_to_covered_s"]["n"] == 2
    assert abs(fig["commit_to_covered_s"]["p50"] - 1.15) < 0.01


def test_files_pool_their_caption_commits() -> None:
    """The "all files" row is the percentile of every file's commits at once, not a mean
    of the files' percentiles."""
    from speechpipe.bench.cascade import pooled_spread

    short = cascade_figures([_r("asr.commit", 1.0, "a"), _r("mt.commit", 1.1, "x")], 2.0)
    long = cascade_figures([_r("asr.commit", 1.0, "a"), _r("mt.commit", 1.5, "x"),
                            _r("asr.commit", 2.0, "a b"), _r("mt.commit", 2.2, "x y")], 3.0)
    pooled = pooled_spread([short, long], "commit_to_commit_s")
    assert pooled["n"] == 3 and sorted(pooled["values"]) == [0.1, 0.2, 0.5]
    assert pooled["p50"] == 0.2


def test_no_mt_no_figures() -> None:
    fig = cascade_figures([_r("asr.commit", 1.0, "hello")], audio_s=1.0)
    assert fig["mt_s"] == 0 and fig["commit_to_commit_s"]["p50"] is None


def test_prefix_sweep_times_both_readings_of_growing_prefixes(tmp_path) -> None:
    """On a tiny model the figures mean nothing; what is checked is that every row forces
    the prefix it says (growing), and times both readings."""
    import pytest

    from speechpipe.bench.mt_prefix import PREFIX_TOKENS, prefix_sweep
    from speechpipe.bench.tiny_mt import build_tiny_mt
    from speechpipe.models.whisper.prefill import native_prefill

    module = native_prefill()
    if module is None or not hasattr(module, "PrefixTranslator"):
        pytest.skip("the native prefill decoder is not built here (no C++ compiler?)")
    rows = prefix_sweep(build_tiny_mt(tmp_path / "m", "marian", spm_cache=tmp_path / "spm"),
                        "en", "fr", repeats=2, new_tokens=4)
    assert len(rows) == len(PREFIX_TOKENS)
    forced = [r["prefix_tokens"] for r in rows]
    assert forced[0] == 0 and forced == sorted(forced) and forced[-1] > forced[1] > 0
    assert all(r["stepwise_ms"] > 0 and r["one_pass_ms"] > 0 for r in rows)


def test_cascade_needs_files_or_the_sweep(capsys) -> None:
    from speechpipe.cli import main

    assert main(["bench", "cascade"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["speechpipe bench cascade: give --file PATH (one or more) or --prefix-sweep"]
