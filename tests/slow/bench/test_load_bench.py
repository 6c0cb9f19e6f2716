"""``speechpipe bench load``: short real runs (one session, a project sample) against the
live server on loopback."""

from __future__ import annotations

import pytest

from speechpipe.bench.load import (
    load_clips,
    run_level,
)
from tests.helpers import ROOT


@pytest.mark.asyncio(loop_scope="session")
async def test_one_short_real_session_through_the_bench(live_server):
    clips = load_clips(ROOT / "samples" / "manifest.jsonl", limit=2)
    url = f"ws://127.0.0.1:{live_server.server.port}/ws"
    report = await run_level(url, clips, 1, label="test", duration_s=4.0)
    assert report.started == 1 and report.finished == 1 and report.errors == 0
    assert report.target_commit, "a real session commits translated words"
    assert report.start_offsets and report.end_offsets
    assert report.mean_batch >= 1.0
    assert len(report.end_split) == len(report.end_offsets)
    assert sum(len(ends) for _, ends in report.by_language.values()) == len(report.end_offsets)
    (shares,) = report.committed_by_language.values()
    assert shares and all(0 <= s <= 1 and 0 <= t <= 1 for s, t in shares)


@pytest.mark.asyncio(loop_scope="session")
async def test_solo_runs_each_language_alone_one_after_the_other(live_server):
    """``--solo``'s path (``one_at_a_time``): one session per language, none overlapping;
    the same count at once overlaps. Real sessions on the live server, 2 s each."""
    clips = [c for c in load_clips(ROOT / "samples" / "manifest.jsonl")
             if c.lang in ("es", "fr")]
    url = f"ws://127.0.0.1:{live_server.server.port}/ws"
    alone = await run_level(url, clips, 2, label="solo", duration_s=2.0, one_at_a_time=True)
    assert alone.finished == 2 and alone.errors == 0
    assert sorted(alone.by_language) == ["es", "fr"]
    (first_start, first_end), (second_start, _) = sorted(alone.spans)
    assert second_start >= first_end, "the second session started before the first ended"
    together = await run_level(url, clips, 2, label="together", duration_s=2.0)
    assert together.finished == 2
    (first_start, first_end), (second_start, _) = sorted(together.spans)
    assert second_start < first_end, "concurrent sessions ran one after the other"


@pytest.mark.asyncio(loop_scope="session")
async def test_overload_runs_past_the_capacity_the_server_announces(pipeline):
    """``--overload`` without ``--capacity`` reads the server's own capacity from /metrics and
    runs past it; the extra session is refused with the documented code and a retry hint."""
    from speechpipe.bench.load import run_load_bench
    from speechpipe.server.admission import AdmissionOptions
    from speechpipe.server.options import LoadOptions
    from speechpipe.server.serve import ServerApp

    app = ServerApp("127.0.0.1", 0, pipeline=pipeline,
                    load=LoadOptions(admission=AdmissionOptions(capacity=1)))
    await app.start()
    try:
        await app.load()
        results = await run_load_bench(
            url=f"ws://127.0.0.1:{app.server.port}/ws", overload=2.0, duration_s=3.0,
            clips_manifest=str(ROOT / "samples" / "manifest.jsonl"),
        )
    finally:
        await app.stop(close_pipeline=False)
    assert results["capacity"] == {"server": 1}
    (row,) = results["levels"]
    assert row["sessions"] == 2 and row["started"] == 1 and row["finished"] == 1
    assert row["refused"] == 1 and row["retry_after_s"] and row["retry_after_s"][0] > 0
