"""When to cut a long decode window that has no pause: at a quiet moment at its live edge.

The ASR decodes a bounded window of an utterance (``stages.asr``). A window moves on at a
VAD pause; speech that runs on without one is cut once the window is ``asr.max_window_s``
long, as soon as the newest audio is quiet (a gap between words, shorter than a VAD pause),
or at ``asr.max_window_s + asr.cut_grace_s`` whatever the audio. The cut decode hears the
whole window and commits everything, so it must end where no word is being spoken: the
words already committed in the window may reach up to the live edge, so an earlier cut
point would make the next window hear (and repeat) some of them. Pure functions on int16
samples.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["quiet_tail"]

HOP = 160  # 10 ms at 16 kHz


def quiet_tail(samples: NDArray[np.int16], tail: int = 1280, quantile: float = 0.2) -> bool:
    """Is the last ``tail`` samples' energy (mean square) no higher than the ``quantile`` of
    the 10 ms energies of all of ``samples``? (A pause between words is; a vowel is not.)"""
    hops = len(samples) // HOP
    if hops < 4 * max(1, tail // HOP) or tail < HOP:
        return False
    frames = samples[len(samples) - hops * HOP:].astype(np.float32).reshape(hops, HOP)
    energy = (frames * frames).mean(axis=1)
    last = energy[-max(1, tail // HOP):].mean()
    return bool(last <= np.quantile(energy, quantile))
