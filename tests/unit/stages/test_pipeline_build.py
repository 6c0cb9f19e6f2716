"""A session's pipeline as ``build_stages`` builds it (``speechpipe.pipeline_build``), without a
model: the stages in order, each between the channels ``CHAIN`` names, the channels' policies
at each pace, the MT and TTS places by route and request, and the ASR's view of the events
under the pivot. The sessions themselves run in the slow tier."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from speechpipe.config import PipelineOptions
from speechpipe.models.mt.routes import MtRoute
from speechpipe.pipeline_build import CHAIN, SessionParts, build_stages
from speechpipe.routing import ResolvedRequest
from speechpipe.stages.asr_options import AsrOptions
from speechpipe.stages.cache import LruCache
from speechpipe.stages.channels import Overflow
from speechpipe.stages.clock import BasisStreamClock
from speechpipe.stages.frames import ErrorEvent, TextHypothesis
from speechpipe.stages.ladder import DegradeState
from speechpipe.stages.language_vote import LanguageVote
from speechpipe.stages.mt import SpeechTranslationPassthrough
from speechpipe.stages.request import SessionRequest
from speechpipe.stages.text_mt import TextMtStage
from speechpipe.stages.translation_memory import TranslationMemory
from speechpipe.stages.tts import CaptionsOnly, TtsStage
from speechpipe.voices.speaker import Speaker


class _Worker:
    def __init__(self) -> None:
        self.spoken: list[tuple[str, int, float, float | None]] = []

    async def synthesize(self, text: str, rate: int, speed: float,
                         due: float | None) -> np.ndarray:
        self.spoken.append((text, rate, speed, due))
        return np.ones(len(text), np.int16)


def _parts(speaker: Any = None) -> SessionParts:
    return SessionParts(SimpleNamespace(), BasisStreamClock(), DegradeState(),  # type: ignore[arg-type]
                        LanguageVote(), TranslationMemory(16), None, speaker)


WHISPER = MtRoute("whisper")


def _resolved(route: MtRoute = WHISPER, text_mt: Any = None, **request: Any) -> ResolvedRequest:
    return ResolvedRequest(SessionRequest(**request), "es", None, AsrOptions(), text_mt, route)


class _Translator:
    model_id = "tiny"

    async def translate(self, request: Any) -> Any:
        raise AssertionError("nothing to translate")


@pytest.mark.parametrize("pace", ["realtime", "fast"])
async def test_the_stages_run_in_a_chain_of_named_channels(pace: str) -> None:
    built = build_stages(_resolved(pace=pace), PipelineOptions(), _parts())
    assert list(built.stages) == ["vad", "asr", "mt", "tts"] == list(CHAIN)
    for name, (inbox, outbox) in CHAIN.items():
        placed = built.stages[name]
        assert (placed.inbox, placed.outbox) == (built.channels[inbox], built.channels[outbox])
        assert placed.events is built.events  # no pivot: every stage sees the client's events
    assert built.stages["tts"].outbox is built.events  # the chain's end closes the events
    assert built.stages["vad"].stage is built.vad and built.stages["asr"].stage is built.asr
    assert built.input is built.channels["input"]


def test_the_channel_policies_by_pace() -> None:
    options = PipelineOptions()
    live = build_stages(_resolved(pace="realtime"), options, _parts()).channels
    fast = build_stages(_resolved(pace="fast"), options, _parts()).channels
    assert (live["input"].policy, live["input"].capacity) == (
        Overflow.COALESCE, options.input_capacity_frames)
    assert (fast["input"].policy, fast["input"].capacity) == (
        Overflow.BLOCK, options.fast_input_capacity_frames)
    assert (live["labeled"].policy, live["labeled"].capacity) == (
        Overflow.COALESCE, options.input_capacity_frames)
    assert (fast["labeled"].policy, fast["labeled"].capacity) == (Overflow.BLOCK, 1)
    for channels in (live, fast):
        assert {name: (c.policy, c.capacity) for name, c in channels.items()
                if name in ("source", "target", "events")} == {
            "source": (Overflow.BLOCK, 64), "target": (Overflow.BLOCK, 64),
            "events": (Overflow.BLOCK, 512)}
        assert all(c.name == name for name, c in channels.items())


async def test_the_mt_and_tts_places_by_route_and_request() -> None:
    options = PipelineOptions()
    plain = build_stages(_resolved(), options, _parts())
    assert isinstance(plain.stages["mt"].stage, SpeechTranslationPassthrough)
    assert isinstance(plain.stages["tts"].stage, CaptionsOnly)  # no speaker: captions only
    text = build_stages(_resolved(MtRoute("text", ("tiny",)), _Translator()), options, _parts())
    assert isinstance(text.stages["mt"].stage, TextMtStage)
    assert text.stages["mt"].stage.translate_side == "source"
    worker = _Worker()
    speaker = Speaker(worker, LruCache(8), namespace="", rate=24_000)  # type: ignore[arg-type]
    spoken = build_stages(_resolved(output_sample_rate=24_000), options, _parts(speaker))
    tts = spoken.stages["tts"].stage
    assert isinstance(tts, TtsStage) and tts.sample_rate == 24_000
    assert tts.speak == speaker.speak


async def test_under_the_pivot_the_asr_keeps_whisper_s_english_off_the_events() -> None:
    route = MtRoute("whisper+text", ("en_fr",))
    built = build_stages(_resolved(route, _Translator(), target_lang="fr"), PipelineOptions(),
                         _parts())
    mt = built.stages["mt"].stage
    assert isinstance(mt, TextMtStage) and mt.translate_side == "target"
    view = built.stages["asr"].events
    assert view is not built.events
    english = TextHypothesis("target", 0, 0, "the cat", "", "en", 0, 1, 1)
    captions = TextHypothesis("source", 0, 0, "el gato", "", "es", 0, 1, 1)
    for event in (english, captions, ErrorEvent("x", "y", 0, 0)):
        await view.put(event)
    assert [type(e).__name__ for e in built.events._items] == ["TextHypothesis", "ErrorEvent"]
    assert built.events._items[0] is captions
    assert all(built.stages[name].events is built.events for name in ("vad", "mt", "tts"))


async def test_a_speaker_speaks_from_its_namespace_s_cache() -> None:
    worker = _Worker()
    cache: Any = LruCache(8)
    first = Speaker(worker, cache, namespace="a", rate=16_000)  # type: ignore[arg-type]
    again = Speaker(worker, cache, namespace="a", rate=16_000)  # type: ignore[arg-type]
    other = Speaker(worker, cache, namespace="b", rate=16_000,  # type: ignore[arg-type]
                    deadline_order=False)
    await first.speak("hola", 1.0, 5.0)
    await again.speak("hola", 1.0, 6.0)  # from the cache
    await other.speak("hola", 1.0, 7.0)  # its own namespace; first in, first out
    assert worker.spoken == [("hola", 16_000, 1.0, 5.0), ("hola", 16_000, 1.0, None)]
    assert len(await asyncio.wait_for(first.speak("hola"), 1)) == 4
