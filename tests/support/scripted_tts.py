"""A test-only TTS engine: the seam's proof (this one module plus one ``register_engine``).

It speaks a 440 Hz tone, 60 ms per character, so a test can tell its speech from Piper's;
it logs the text it speaks at DEBUG on its own logger, which it declares, so the privacy
guard must cap that logger too. Its voices are ``NAME.scripted`` + ``NAME.scripted.json``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from speechpipe.voices.engines import TtsEngine

LOGGER = "tests.scripted_tts"
ENGINE = TtsEngine("scripted", "tests.support.scripted_tts:load", ".scripted",
                   text_loggers=(LOGGER,))
TONE_HZ = 440.0
SECONDS_PER_CHAR = 0.06

log = logging.getLogger(LOGGER)


class ToneSynthesizer:
    """Text in, a tone as long as the text out (``voices.engines.Synthesizer``)."""

    def __init__(self, voice: Any) -> None:
        self.sample_rate = int(voice.sample_rate)
        self.spoken: list[str] = []

    def synthesize(self, text: str, speed: float = 1.0) -> NDArray[np.int16]:
        log.debug("speaking %r", text)
        self.spoken.append(text)
        n = int(len(text.strip()) * SECONDS_PER_CHAR / speed * self.sample_rate)
        t = np.arange(n) / self.sample_rate
        return (8000 * np.sin(2 * np.pi * TONE_HZ * t)).astype(np.int16)


def load(voice: Any, options: Any) -> ToneSynthesizer:
    """The engine's loader (the tree has no ``scripted`` group: ``options`` is None)."""
    assert options is None
    return ToneSynthesizer(voice)


def write_voice(folder: Path, name: str = "scripted-en", locale: str = "en_US",
                sample_rate: int = 16_000) -> Path:
    """A voice of this engine in ``folder``: an (empty) model file and its config."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.scripted").write_bytes(b"")
    config = folder / f"{name}.scripted.json"
    config.write_text(json.dumps({"audio": {"sample_rate": sample_rate},
                                  "language": {"code": locale}}))
    return config
