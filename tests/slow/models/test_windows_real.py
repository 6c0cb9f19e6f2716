"""Bounded windows on a real long recording (60 s of continuous German): the work per audio
second does not grow with the length of the speech.

The work is counted, not timed (``WhisperEngine.stats``): encoder input seconds per audio
second and decoder tokens (generated + forced prefix) per decode, for the first and the second
half of the stream, in one run (tokens per audio second follow the speech rate, which differs
between the halves). With the unbounded windows of earlier builds every decode re-read the
utterance so far, so long utterances cost more per second the longer they ran.
"""

from __future__ import annotations

from speechpipe.stages.frames import STREAM_RATE, TextHypothesis
from speechpipe.stages.request import SessionRequest
from speechpipe.transport.file_replay import read_audio, replay
from tests.helpers import shared_clip


async def _halves(pipeline, audio):
    """Engine counters for the decodes based on the first half of the audio, and the rest."""
    half = len(audio) // 2
    stats = pipeline.engine.stats
    start = stats.snapshot()
    middle: dict[str, float] = {}

    def on_event(item) -> None:
        event = item.event
        if (not middle and isinstance(event, TextHypothesis) and event.audio_end >= half):
            middle.update(stats.snapshot())

    request = SessionRequest(source_lang="de", pace="fast", priority="replay")
    async with pipeline.session(request) as session:
        await replay(session, audio, pace="fast", on_event=on_event)
    end = stats.snapshot()
    assert middle, "the decodes reached the second half"
    first = {k: middle[k] - start[k] for k in start}
    second = {k: end[k] - middle[k] for k in start}
    return first, second


async def test_cost_per_second_of_the_second_half_is_not_higher(pipeline):
    audio = read_audio(shared_clip("de_silero_60s"))
    seconds = len(audio) / STREAM_RATE / 2
    first, second = await _halves(pipeline, audio)
    work = {
        "encoder input s per audio s": (first["encoded_s"] / seconds,
                                        second["encoded_s"] / seconds),
        "decoder tokens per decode": (
            (first["generated_tokens"] + first["forced_tokens"]) / first["decode_items"],
            (second["generated_tokens"] + second["forced_tokens"]) / second["decode_items"]),
    }
    print(work)
    for name, (f, s) in work.items():
        # the halves hold different speech: 15 % leeway
        assert s <= 1.15 * f, f"{name}: first half {f:.2f}, second half {s:.2f}"


async def test_long_speech_decodes_bounded_windows(pipeline):
    """No decode of the long recording hears more than the window bound."""
    audio = read_audio(shared_clip("de_silero_60s"))
    asr = pipeline.options.asr
    bound = asr.max_window_s + asr.cut_grace_s + 1.0  # + a step of audio arriving meanwhile
    seen: list[float] = []
    engine = pipeline.engine
    original = engine.run_bucket  # every engine pass, the decode program's too

    def spy(requests):
        seen.extend(len(r.audio) / STREAM_RATE for r in requests)
        return original(requests)

    engine.run_bucket = spy  # type: ignore[method-assign]
    try:
        request = SessionRequest(source_lang="de", pace="fast", priority="replay")
        async with pipeline.session(request) as session:
            await replay(session, audio, pace="fast")
    finally:
        del engine.run_bucket
    assert seen and max(seen) <= bound, max(seen)
