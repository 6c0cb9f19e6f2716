"""Fixtures of the end-to-end tests (helpers: ``tests/helpers.py``; fakes: ``tests/fakes.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from speechpipe.transport.file_replay import read_audio


@pytest.fixture
def fake_mic_wav(tmp_path: Path, spanish_clip: tuple[Path, dict[str, Any]]) -> Path:
    """The clip followed by silence, so the speaker visibly pauses (Chromium loops the file)."""
    audio = read_audio(spanish_clip[0])
    wav = tmp_path / "mic.wav"
    sf.write(wav, np.concatenate([audio, np.zeros(16000 * 4, np.int16)]), 16000,
             subtype="PCM_16")
    return wav
