"""A stand-in for the ``sounddevice`` package, put on ``PYTHONPATH`` by
``tests/slow/commands/test_client_cli.py``: the test machine has no sound device (nor
PortAudio), so the CLI's ``--mic`` and playback paths would otherwise never run. Only the
device is fake: the "microphone" plays the WAV named by ``$FAKE_MIC`` at real time in the
block size asked for, then silence; the "loudspeaker" appends what it is given (int16 bytes)
to ``$FAKE_SPEAKER``."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np
import soundfile as sf

MAX_SECONDS = 60  # the fake microphone stops by itself: a test that hangs still ends


class RawInputStream:
    def __init__(self, *, samplerate: int, channels: int, dtype: str, blocksize: int,
                 callback: Any) -> None:
        assert channels == 1 and dtype == "int16"
        audio, rate = sf.read(os.environ["FAKE_MIC"], dtype="int16")
        assert rate == samplerate, (rate, samplerate)
        total = MAX_SECONDS * samplerate
        self._audio = np.concatenate([audio, np.zeros(max(0, total - len(audio)), np.int16)])
        self._block = blocksize
        self._rate = samplerate
        self._callback = callback
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        t0 = time.monotonic()
        for i, offset in enumerate(range(0, len(self._audio), self._block)):
            if self._stopped.wait(max(0.0, t0 + i * self._block / self._rate - time.monotonic())):
                return
            block = self._audio[offset:offset + self._block]
            self._callback(block.tobytes(), len(block), None, None)

    def stop(self) -> None:
        self._stopped.set()

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)


class RawOutputStream:
    def __init__(self, *, samplerate: int, channels: int, dtype: str) -> None:
        assert channels == 1 and dtype == "int16"
        self._file = open(os.environ["FAKE_SPEAKER"], "ab")  # noqa: SIM115

    def start(self) -> None:
        pass

    def write(self, data: bytes) -> None:
        self._file.write(data)
        self._file.flush()

    def stop(self) -> None:
        pass

    def close(self) -> None:
        self._file.close()
