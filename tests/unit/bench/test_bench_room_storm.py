"""``speechpipe bench room --join-storm``: the speaker's caption lag, as the bench reads it
(pure; the storm itself: the slow tier)."""

from __future__ import annotations

from speechpipe.bench.room_storm import caption_lags


def test_caption_lag_is_arrival_after_the_audio_it_covers_was_sent() -> None:
    events = [(12.5, {"type": "source", "audio_end": 2.0}), (13.0, {"type": "vad"}),
              (14.0, {"type": "target", "audio_end": 3.0})]
    assert caption_lags(events, t0=10.0) == [0.5, 1.0]
