"""The stage contract (``stages.stage.Stage``): ``run(inbox, outbox, events)``; a stage closes
its outbox once its inbox is closed and drained (so closing the session's input drains the
chain), also when it fails. A stage run alone may be given no events channel.

``AsrStage``'s run is covered by ``tests/unit/stages/test_asr_stage.py``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from speechpipe.stages.asr import AsrStage
from speechpipe.stages.channels import Channel
from speechpipe.stages.clock import BasisStreamClock
from speechpipe.stages.mt import SpeechTranslationPassthrough
from speechpipe.stages.phrases import PhraseOptions
from speechpipe.stages.text_mt import TextMtStage
from speechpipe.stages.tts import CaptionsOnly, TtsStage
from speechpipe.stages.vad import VadOptions, VadStage


async def _speak(text: str, speed: float = 1.0, due: float | None = None) -> np.ndarray:
    return np.full(1600, 1000, np.int16)


async def _translate(request: Any) -> Any:
    raise AssertionError("nothing to translate")


STAGES: dict[str, Callable[[], Any]] = {
    "vad": lambda: VadStage(VadOptions()),
    "mt passthrough": SpeechTranslationPassthrough,
    "text mt": lambda: TextMtStage(_translate, source_lang="en", target_lang="fr",
                                   clock=BasisStreamClock()),
    "tts": lambda: TtsStage(_speak, BasisStreamClock(), 16_000, PhraseOptions()),
    "captions only": CaptionsOnly,
}


@pytest.mark.parametrize("name", list(STAGES))
async def test_a_stage_closes_its_outbox(name: str) -> None:
    stage = STAGES[name]()
    inbox: Channel[Any] = Channel(4)
    outbox: Channel[Any] = Channel(64)
    inbox.close()
    await asyncio.wait_for(stage.run(inbox, outbox), 10)
    assert outbox.closed, name


@pytest.mark.parametrize("name", ["text mt", "tts"])
async def test_a_failing_stage_closes_its_outbox_too(name: str) -> None:
    stage = STAGES[name]()
    inbox: Channel[Any] = Channel(4)
    outbox: Channel[Any] = Channel(64)
    inbox.put_nowait(object())  # not a hypothesis: the stage fails on it
    inbox.close()
    with pytest.raises(Exception):  # noqa: B017 - whichever error the stage raises
        await asyncio.wait_for(stage.run(inbox, outbox), 10)
    assert outbox.closed, name


@pytest.mark.parametrize("stage", [VadStage, SpeechTranslationPassthrough, TextMtStage, TtsStage,
                                   CaptionsOnly, AsrStage])
def test_every_stage_runs_between_an_inbox_an_outbox_and_the_events(stage: type) -> None:
    assert list(inspect.signature(stage.run).parameters)[1:] == ["inbox", "outbox", "events"]


async def test_a_text_mt_stage_puts_its_translations_on_the_events_it_is_run_with() -> None:
    from speechpipe.stages.frames import TextHypothesis
    from speechpipe.stages.model_api import TextMtResult

    async def translate(request: Any) -> Any:
        return TextMtResult("le chat", "le chat")

    stage = TextMtStage(translate, source_lang="en", target_lang="fr", clock=BasisStreamClock())
    inbox: Channel[Any] = Channel(4)
    outbox: Channel[Any] = Channel(64)
    events: Channel[Any] = Channel(64)
    inbox.put_nowait(TextHypothesis("source", 0, 0, "the cat", "", "en", 0, 16_000, 16_000,
                                    final=True))
    inbox.close()
    await asyncio.wait_for(stage.run(inbox, outbox, events), 10)
    said = [e for e in events._items if isinstance(e, TextHypothesis)]
    assert said and said[-1].committed == "le chat" and said[-1].side == "target"
