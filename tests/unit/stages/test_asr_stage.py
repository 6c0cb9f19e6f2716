"""ASR stage mechanics with a scripted recognizer (the real model is covered end to end in
test_end_to_end.py; here the schedule and the monotonic-commit contract are checked fast)."""

import asyncio

import numpy as np

from speechpipe.models.whisper.engine import DecodeResult, WhisperRequest, WhisperResult
from speechpipe.stages.asr import AsrOptions, AsrStage
from speechpipe.stages.channels import Channel
from speechpipe.stages.clock import BasisStreamClock
from speechpipe.stages.frames import STREAM_RATE, TextHypothesis, VadEvent
from speechpipe.stages.model_api import DecodeKind
from speechpipe.stages.vad import LabeledAudio

WORDS = "uno dos tres cuatro cinco seis siete ocho nueve diez".split()


class ScriptedRecognizer:
    """Says one word per 0.5 s of audio heard, continuing whatever prefix is forced."""

    def __init__(self):
        self.requests: list[WhisperRequest] = []

    async def __call__(self, request: WhisperRequest) -> WhisperResult:
        self.requests.append(request)
        heard = WORDS[: int(len(request.audio) / STREAM_RATE / 0.5)]
        decodes = []
        for task in request.tasks:
            done = len(task.prefix.split())
            words = heard[done:] if task.task == "transcribe" else [w.upper() for w in heard[done:]]
            decodes.append(DecodeResult(task.task, " ".join(words), -0.2, 0.01))
        return WhisperResult("es", 1.0, tuple(decodes), 0.0, 0.0)


def chunk(start_s, end_s, events=(), voiced=True):
    n = int((end_s - start_s) * STREAM_RATE)
    return LabeledAudio(np.full(n, 100, np.int16), int(start_s * STREAM_RATE),
                        n if voiced else 0, tuple(events), 0.0)


STEP_OPTIONS = AsrOptions(step_s=0.5, min_voiced_s=0.3)


async def drive(stage, items):
    """Run ``stage`` over ``items`` fed one at a time; its hypotheses."""
    inbox: Channel[LabeledAudio] = Channel(1)  # BLOCK: the stage sees audio as it "arrives"
    outbox: Channel[TextHypothesis] = Channel(1000)

    async def produce():
        for item in items:
            await inbox.put(item)
        inbox.close()

    async with asyncio.TaskGroup() as group:
        group.create_task(produce())
        group.create_task(asyncio.wait_for(stage.run(inbox, outbox, Channel(1000)), 10))
    return [h async for h in outbox]


async def run_stage(items, options=STEP_OPTIONS):
    recognizer = ScriptedRecognizer()
    stage = AsrStage(recognizer, BasisStreamClock(), options=options, language="es")
    return await drive(stage, items), recognizer


def utterance(start, end):
    s, e = int(start * STREAM_RATE), int(end * STREAM_RATE)
    return [
        chunk(0, start, voiced=False),
        chunk(start, start + 0.2, [VadEvent("start", 0, s, s + 3200)]),
        *[chunk(t / 10, (t + 1) / 10) for t in range(int(start * 10) + 2, int(end * 10))],
        chunk(end, end + 0.6, [VadEvent("end", 0, e, e + 9600)], voiced=False),
    ]


async def test_committed_text_only_grows_and_ends_with_everything():
    hyps, recognizer = await run_stage(utterance(0.5, 4.0))
    source = [h for h in hyps if h.side == "source"]
    for before, after in zip(source, source[1:], strict=False):
        assert after.committed.startswith(before.committed)
    final = source[-1]
    assert final.final
    assert final.committed.split() == WORDS[: len(final.committed.split())]
    assert len(final.committed.split()) >= 6
    target = [h for h in hyps if h.side == "target"]
    assert target[-1].final and target[-1].committed == final.committed.upper()
    # decodes were forced to continue the committed text
    assert any(t.prefix for r in recognizer.requests for t in r.tasks)


async def test_partial_decodes_follow_the_step_in_stream_time():
    hyps, recognizer = await run_stage(utterance(0.5, 4.0))
    partial_lengths = [len(r.audio) / STREAM_RATE for r in recognizer.requests[:-1]]
    steps = np.diff(partial_lengths)
    assert all(abs(step - 0.5) < 0.11 for step in steps)


async def test_noise_blip_gives_no_words():
    hyps, recognizer = await run_stage(utterance(1.0, 1.2))
    assert all(not h.committed for h in hyps)
    assert recognizer.requests == []


def utterance_with_silence(start, end, hush: bool):
    """Speech from ``start`` to ``end``, then silence that VAD calls a hush (160 ms, when
    ``hush``), a pause (240 ms) and the end (600 ms), in 20 ms chunks as they arrive live."""
    s, e = int(start * STREAM_RATE), int(end * STREAM_RATE)
    frame = int(0.02 * STREAM_RATE)
    items = [
        chunk(0, start, voiced=False),
        chunk(start, start + 0.2, [VadEvent("start", 0, s, s + 3200)]),
        *[chunk(t / 10, (t + 1) / 10) for t in range(int(start * 10) + 2, int(end * 10))],
    ]
    for i in range(1, 31):
        at = e + i * frame
        events = []
        if i == 8 and hush:
            events.append(VadEvent("hush", 0, e, at))
        if i == 12:
            events.append(VadEvent("pause", 0, e, at))
        if i == 30:
            events.append(VadEvent("end", 0, e, at))
        items.append(LabeledAudio(np.full(frame, 100, np.int16), at - frame, 0,
                                  tuple(events), 0.0))
    return items


async def run_logged(items, options):
    """Like ``run_stage``, logging each item put and each decode asked, in order."""
    log: list[tuple[str, float]] = []
    recognizer = ScriptedRecognizer()

    async def recognize(request):
        log.append(("decode", len(request.audio) / STREAM_RATE))
        return await recognizer(request)

    stage = AsrStage(recognize, BasisStreamClock(), options=options, language="es")
    inbox: Channel[LabeledAudio] = Channel(1)
    outbox: Channel[TextHypothesis] = Channel(1000)

    async def produce():
        for item in items:
            await inbox.put(item)
            log.append(("audio", (item.pts + len(item.samples)) / STREAM_RATE))
        inbox.close()

    async with asyncio.TaskGroup() as group:
        group.create_task(produce())
        group.create_task(asyncio.wait_for(stage.run(inbox, outbox, Channel(1000)), 10))
    return [h async for h in outbox], recognizer, log


def audio_heard_before_last_decode(log):
    last = max(i for i, (what, _) in enumerate(log) if what == "decode")
    return max(t for what, t in log[:last] if what == "audio")


async def test_a_hush_decodes_ahead_so_the_pause_commits_without_decoding_again():
    options = AsrOptions(step_s=1.0, early_step_s=1.0, min_voiced_s=0.3)
    with_hush, ahead, log_ahead = await run_logged(
        utterance_with_silence(0.5, 2.6, hush=True), options)
    without, plain, log_plain = await run_logged(
        utterance_with_silence(0.5, 2.6, hush=False), options)
    # without a hush, the last decode is the pause's, asked once the pause was heard
    # (2.6 s + 240 ms); with one, it is the hush's, asked at 2.6 s + 160 ms: the pause then
    # commits its hypothesis without decoding again
    assert audio_heard_before_last_decode(log_plain) >= 2.6 + 0.24 - 1e-6
    assert audio_heard_before_last_decode(log_ahead) < 2.6 + 0.24 - 1e-6
    hush_request = ahead.requests[-1]
    assert not hush_request.partial  # asked like a pause decode: never superseded ...
    assert hush_request.beam_size == options.final_beam_size  # ... with its beam
    assert len(ahead.requests) == len(plain.requests)  # no decode more than before
    final = lambda hyps, side: [h for h in hyps if h.side == side][-1]  # noqa: E731
    for side in ("source", "target"):
        assert final(with_hush, side).final
        assert final(with_hush, side).committed == final(without, side).committed
    committed_all = [h for h in with_hush if h.side == "target" and not h.final
                     and h.committed == final(with_hush, "target").committed]
    assert committed_all, "the pause committed everything before the end"


async def test_speech_after_a_hush_goes_on_as_usual():
    """A hush that is not followed by a pause is one more partial: nothing is committed
    that the agreement did not commit, and the utterance still ends with every word."""
    options = AsrOptions(step_s=1.0, early_step_s=1.0, min_voiced_s=0.3)
    items = utterance(0.5, 4.0)
    mid = int(2.0 * STREAM_RATE)
    at = next(i for i, item in enumerate(items) if item.pts >= mid)
    items[at] = LabeledAudio(items[at].samples, items[at].pts, items[at].voiced_samples,
                             (VadEvent("hush", 0, mid, mid + 2560),), 0.0)
    hyps, recognizer = await run_stage(items, options)
    source = [h for h in hyps if h.side == "source"]
    for before, after in zip(source, source[1:], strict=False):
        assert after.committed.startswith(before.committed)
    assert source[-1].final
    assert source[-1].committed.split() == WORDS[: len(source[-1].committed.split())]
    assert len(source[-1].committed.split()) >= 6
    assert sum(not r.partial for r in recognizer.requests) >= 2  # the hush's and the final


class NeverReplaced:
    """A shared worker's queue hold where every request is already being computed."""

    def replace(self, old, new):
        return None

    def withdraw(self, old):
        return False


async def test_a_pause_that_comes_while_the_hush_decode_runs_commits_its_result_at_once():
    """In flight (a shared worker), the hush decode is still running when the pause is heard:
    its hypothesis is committed as it lands, in one hypothesis with nothing tentative (the
    voice's cue to finish), not a partial first and the commit a moment later."""
    recognizer = ScriptedRecognizer()

    async def slow(request):
        if not request.partial:  # the hush decode: still running when the pause is heard
            await asyncio.sleep(0.2)
        return await recognizer(request)

    options = AsrOptions(step_s=1.0, early_step_s=1.0, min_voiced_s=0.3)
    stage = AsrStage(slow, BasisStreamClock(), options=options, language="es",
                     queue=NeverReplaced())
    hyps = await drive(stage, utterance_with_silence(0.5, 2.6, hush=True))
    hush_request = next(r for r in recognizer.requests if not r.partial)
    hush_end = hush_request.audio.size + int(0.2 * STREAM_RATE)  # the window starts at 0.2 s
    target = [h for h in hyps if h.side == "target"]
    from_hush = [h for h in target if abs(h.audio_end - hush_end) <= 1]
    assert len(from_hush) == 1
    assert from_hush[0].tentative == "" and from_hush[0].committed == target[-1].committed
    assert len(recognizer.requests) == sum(1 for r in recognizer.requests if r.partial) + 1


async def run_with_a_slow_partial(options):
    """In flight on a shared worker whose requests are all already running, each partial
    taking 0.3 s: the audio (speech 0.5-2.6 s, then the pause and the end) arrives meanwhile,
    so the partial running when the pause is heard stopped hearing long before it. Returns
    the hypotheses, the stage and the log of decodes asked and partials landed, in order."""
    recognizer = ScriptedRecognizer()
    log: list[tuple[str, bool]] = []

    async def slow_partials(request):
        log.append(("asked", request.partial))
        if request.partial:
            await asyncio.sleep(0.3)
            log.append(("partial landed", True))
        return await recognizer(request)

    stage = AsrStage(slow_partials, BasisStreamClock(), options=options, language="es",
                     queue=NeverReplaced())
    return await drive(stage, utterance_with_silence(0.5, 2.6, hush=False)), stage, log


async def test_the_pause_decode_does_not_wait_for_a_running_partial_that_did_not_hear_it():
    """The commit does not wait: a partial already running that stopped hearing before the
    pause would be decoded over at once, so the pause decode is asked while it still runs
    and its result is dropped, never applied; the words committed are the same."""
    overtaking, stage, log = await run_with_a_slow_partial(
        AsrOptions(step_s=1.0, early_step_s=1.0, min_voiced_s=0.3,
                   commit_overtakes_partial=True))
    # the default waits for the partial (docs/design.md: its words are spoken sooner)
    waiting, old_stage, old_log = await run_with_a_slow_partial(
        AsrOptions(step_s=1.0, early_step_s=1.0, min_voiced_s=0.3))
    pause_asked = log.index(("asked", False))
    assert ("partial landed", True) not in log[:pause_asked]  # asked while the partial ran
    assert stage.overtaken == 1
    # the default: the pause decode waits until the partial has landed
    assert ("partial landed", True) in old_log[:old_log.index(("asked", False))]
    assert old_stage.overtaken == 0
    # the dropped partial's hypothesis is never emitted: only the pause decode's and the
    # end's (the end finds the pause decode covered everything: no decode more)
    assert [asked for what, asked in log if what == "asked"] == [True, False]
    assert len([h for h in overtaking if h.side == "target"]) == 2
    for side in ("source", "target"):
        last = [h for h in overtaking if h.side == side][-1]
        before = [h for h in waiting if h.side == side][-1]
        assert last.final and last.committed == before.committed
        assert len(last.committed.split()) == 5  # every word heard (one per 0.5 s of 2.6 s)


def test_only_a_commit_overtakes_and_only_a_partial_that_did_not_hear_the_pause():
    from speechpipe.stages.asr import UtteranceDecoder, overtakes_partial

    decoder = UtteranceDecoder(utterance=0, start_pts=0,
                               options=AsrOptions(min_voiced_s=0.3,
                                                  commit_overtakes_partial=True),
                               language="es",
                               translate=True)
    decoder.add(np.full(3 * STREAM_RATE, 100, np.int16), 3 * STREAM_RATE)
    decoder.last_voiced_end = 3 * STREAM_RATE
    assert decoder.due() != DecodeKind.PAUSE
    assert not overtakes_partial(decoder, 2 * STREAM_RATE)  # a partial is due: no commit
    decoder.pause_pending, decoder.pause_pts = True, 3 * STREAM_RATE
    assert decoder.due() == DecodeKind.PAUSE
    assert overtakes_partial(decoder, 2 * STREAM_RATE)
    assert overtakes_partial(decoder, 3 * STREAM_RATE)  # heard the voice end, not the silence
    margin = int(decoder.options.pause_commit_margin_s * STREAM_RATE)
    assert not overtakes_partial(decoder, 3 * STREAM_RATE + margin)  # heard it all: wait
    decoder.options = AsrOptions(min_voiced_s=0.3)  # the default: the commit waits
    assert not overtakes_partial(decoder, 2 * STREAM_RATE)
