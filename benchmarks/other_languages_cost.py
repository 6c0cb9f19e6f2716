"""What rule-based MT and the robotic voice add to a session's CPU: Apertium's stage chain
(its processes' CPU from /proc) and espeak-ng's synthesis (the synthesizing thread's CPU), per
second of audio, beside the whole process's, on real English speech into Spanish.

    python benchmarks/other_languages_cost.py [--pace realtime|fast] [--source auto|en] CLIP...

Run on a quiet machine; prints one line per clip and the totals.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import time
from pathlib import Path

from speechpipe.config import PipelineOptions
from speechpipe.file_translation import translate_audio
from speechpipe.session import Pipeline, apply_process_limits
from speechpipe.stages.request import SessionRequest
from speechpipe.transport.file_replay import read_audio

_TICKS = os.sysconf("SC_CLK_TCK")


def _proc_cpu(pids: tuple[int, ...]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _TICKS


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class TimedSynthesizer:
    """A synthesizer whose calls' thread CPU is summed."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.cpu_s = 0.0

    @property
    def sample_rate(self) -> int:
        return self.inner.sample_rate  # type: ignore[attr-defined,no-any-return]

    def synthesize(self, text: str, speed: float = 1.0):  # type: ignore[no-untyped-def]
        began = time.thread_time()
        try:
            return self.inner.synthesize(text, speed)  # type: ignore[attr-defined]
        finally:
            self.cpu_s += time.thread_time() - began


async def main(args: argparse.Namespace) -> None:
    options = PipelineOptions()
    apply_process_limits(options)
    pipeline = await asyncio.to_thread(Pipeline.load, options)
    pipeline.warm_up()
    request = SessionRequest(source_lang=args.source, target_lang="es", pace=args.pace)
    resolved = pipeline.resolve(request)
    assert resolved.voice is not None
    worker = pipeline.tts_worker(resolved.voice)
    timed = TimedSynthesizer(worker.synthesizer)
    worker.synthesizer = timed  # type: ignore[assignment]
    chain = pipeline.text_mt_worker("apertium:eng-spa")
    print(f"load average before: {os.getloadavg()}")
    print(f"{'clip':<28}{'audio s':>9}{'all CPU/s':>11}{'MT CPU/s':>10}{'TTS CPU/s':>11}")
    totals = [0.0, 0.0, 0.0, 0.0]
    for clip in args.clips:
        audio = read_audio(clip)
        seconds = len(audio) / 16_000
        mt0, tts0, all0 = _proc_cpu(chain.process.pids), timed.cpu_s, _self_cpu()
        pids = chain.process.pids
        await translate_audio(pipeline, audio, request)
        mt = _proc_cpu(pids) - mt0 if pids == chain.process.pids else float("nan")
        tts, everything = timed.cpu_s - tts0, _self_cpu() - all0 + mt
        for i, value in enumerate((seconds, everything, mt, tts)):
            totals[i] += value
        print(f"{Path(clip).stem:<28}{seconds:>9.2f}{everything / seconds:>11.4f}"
              f"{mt / seconds:>10.4f}{tts / seconds:>11.4f}")
    audio_s = totals[0]
    print(f"{'all':<28}{audio_s:>9.2f}{totals[1] / audio_s:>11.4f}{totals[2] / audio_s:>10.4f}"
          f"{totals[3] / audio_s:>11.4f}")
    print(f"MT + TTS: {(totals[2] + totals[3]) / audio_s:.4f} CPU-s per audio second")
    print(f"load average after: {os.getloadavg()}")
    pipeline.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pace", choices=("realtime", "fast"), default="realtime")
    parser.add_argument("--source", default="en")
    parser.add_argument("clips", nargs="+")
    asyncio.run(main(parser.parse_args()))
