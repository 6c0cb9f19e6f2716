"""ASR stage mechanics with a scripted recognizer (the real model is covered end to end in
test_end_to_end.py; here the schedule and the monotonic-commit contract are checked fast)."""

import asyncio

import numpy as np

from speechpipe.models.whisper_engine import DecodeResult, WhisperRequest, WhisperResult
from speechpipe.stages.asr import AsrOptions, AsrStage
from speechpipe.stages.channels import Channel
from speechpipe.stages.clock import BasisStreamClock
from speechpipe.stages.frames import STREAM_RATE, TextHypothesis, VadEvent
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


async def run_stage(items, options=STEP_OPTIONS):
    recognizer = ScriptedRecognizer()
    stage = AsrStage(recognizer, BasisStreamClock(), options=options, language="es")
    inbox: Channel[LabeledAudio] = Channel(1)  # BLOCK: the stage sees audio as it "arrives"
    outbox: Channel[TextHypothesis] = Channel(1000)
    events: Channel = Channel(1000)

    async def produce():
        for item in items:
            await inbox.put(item)
        inbox.close()

    async with asyncio.TaskGroup() as group:
        group.create_task(produce())
        group.create_task(asyncio.wait_for(stage.run(inbox, outbox, events), 10))
    return [h async for h in outbox], recognizer


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
