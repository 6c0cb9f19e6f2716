"""The stage contract: ``run(inbox, outbox)``; a stage closes its outbox once its inbox is
closed and drained (so closing the session's input drains the chain), also when it fails.

``AsrStage`` keeps ``run(inbox, outbox, events)`` (and closes its outbox too) while the ASR
commit code is being rewritten; ``tests/stages/test_asr_stage.py`` covers it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from speechpipe.stages.channels import Channel
from speechpipe.stages.clock import BasisStreamClock
from speechpipe.stages.mt import SpeechTranslationPassthrough
from speechpipe.stages.phrases import PhraseOptions
from speechpipe.stages.text_mt import TextMtStage
from speechpipe.stages.tts import TtsStage
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
