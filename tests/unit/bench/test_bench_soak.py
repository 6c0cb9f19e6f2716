"""The soak bench's arithmetic and probes (the soak itself is a benchmark, run by hand:
``speechpipe bench soak --minutes 10``)."""

from __future__ import annotations

import asyncio

import pytest

from speechpipe.bench.soak import SAMPLES_DIR, fds, load_clips, slope_per_minute, snapshot


def test_rss_slope_is_per_minute_and_needs_enough_points() -> None:
    assert slope_per_minute([(0.0, 100.0), (60.0, 101.0), (120.0, 102.0)]) == pytest.approx(1.0)
    assert slope_per_minute([(t, 50.0) for t in range(0, 600, 10)]) == pytest.approx(0.0)
    assert slope_per_minute([(0.0, 1.0), (1.0, 2.0)]) is None
    assert slope_per_minute([(5.0, 1.0)] * 4) is None


def test_probes_and_clips() -> None:
    async def probe() -> dict[str, object]:
        return snapshot()

    sample = asyncio.run(probe())
    assert sample["rss_mb"] > 10 and sample["fds"] >= 3 and sample["tasks"] == 1
    assert not any(target.startswith("/proc/") for target in fds().values())
    clips = load_clips(SAMPLES_DIR)
    assert clips and all(lang != "en" and len(audio) > 16000 for lang, audio in clips)
