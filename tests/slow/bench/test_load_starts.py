"""``speechpipe bench load --starts``: one tiny real run (2 sessions, 1 short clip each,
synchronized) against the live server on loopback."""

from __future__ import annotations

import pytest

from speechpipe.bench.load import (
    load_clips,
    run_start_case,
)
from tests.helpers import ROOT


@pytest.mark.asyncio(loop_scope="session")
async def test_two_synchronized_sessions_of_one_short_clip_are_both_heard(live_server):
    clips = load_clips(ROOT / "samples" / "manifest.jsonl", languages=("es",), per_language=1)
    assert len(clips) == 1 and clips[0].lang == "es"
    url = f"ws://127.0.0.1:{live_server.server.port}/ws"
    case = await run_start_case(url, clips, 2, label="2 synchronized", mode="synchronized",
                                recordings=1)
    row = case.row()
    assert case.together, "both admitted before the audio began"
    assert row["finished"] == 2 and row["errors"] == 0
    assert row["heard"] == row["recordings"] == 2
    assert 0 < row["first_p50"] < 30 and row["end_p95"] < 30
    # where each utterance's EndOffset went: one split per server utterance heard, its
    # parts never negative and adding up to at most the longest EndOffset measured
    assert len(case.end_split) >= 2
    assert all(min(parts) >= 0 for parts in case.end_split)
    assert set(row["end_split_p50"]) == {"queued", "late", "silence"}
    assert max(sum(parts) for parts in case.end_split) <= max(case.ends) + 1.0
    # both clients streamed the clip (and the playlist's silence around it)
    clip_s = len(clips[0].audio) / 16000
    assert 2 * clip_s <= row["audio_s"] <= 2 * (clip_s + 3.0)
    with pytest.raises(ValueError):
        await run_start_case(url, clips, 1, label="x", mode="sideways")
