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


def test_no_mt_no_figures() -> None:
    fig = cascade_figures([_r("asr.commit", 1.0, "hello")], audio_s=1.0)
    assert fig["mt_s"] == 0 and fig["commit_to_commit_s"]["p50"] is None
