"""Piper text-to-speech with a bounded onnxruntime thread budget.

``piper.PiperVoice.load`` (piper-tts 1.8) builds its ``InferenceSession`` with default
``SessionOptions``: one spinning intra-op thread per core. With several sessions synthesizing
on a 2-core machine that oversubscribes the CPU and burns it on spin-waits, so the session is
built here the way ``load`` builds it, but with explicit thread counts and spinning off.

Synchronous on purpose: callers run ``synthesize`` in a worker thread (one synthesizer may be
shared by threads; onnxruntime's ``run`` is thread-safe and piper locks its phonemizer).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from speechpipe.errors import ModelError, VoiceError
from speechpipe.voices.piper_options import PiperOptions
from speechpipe.voices.registry import VoiceInfo, load_voice_info, read_voice_config

if TYPE_CHECKING:
    from piper import PiperVoice

__all__ = ["PiperOptions", "PiperSynthesizer", "load_piper"]


class PiperSynthesizer:
    """A loaded Piper voice: text in, int16 mono samples at ``sample_rate`` out."""

    def __init__(self, voice: VoiceInfo | str | Path, options: PiperOptions | None = None) -> None:
        """``voice`` is a ``VoiceInfo`` or a path to a ``.onnx`` with its ``.onnx.json``."""
        if not isinstance(voice, VoiceInfo):
            path = Path(voice)
            voice = load_voice_info(path.with_name(path.name + ".json"))
        self.voice = voice
        self.options = options or PiperOptions()
        self._piper = _load(voice, self.options)
        self._syn_config = _synthesis_config(self.options)

    @property
    def sample_rate(self) -> int:
        """The voice's native sample rate."""
        return int(self._piper.config.sample_rate)

    def synthesize(self, text: str, speed: float = 1.0) -> NDArray[np.int16]:
        """Speak ``text`` (one or more sentences); empty if there is nothing to say.

        ``speed`` > 1 speaks faster (it divides the voice's length scale)."""
        config = self._syn_config
        if speed != 1.0:
            import dataclasses

            base = config.length_scale or self._piper.config.length_scale or 1.0
            config = dataclasses.replace(config, length_scale=base / speed)
        chunks = [
            chunk.audio_int16_array
            for chunk in self._piper.synthesize(text, syn_config=config)
        ]
        if not chunks:
            return np.zeros(0, dtype=np.int16)
        return np.concatenate(chunks).astype(np.int16, copy=False)


def load_piper(voice: VoiceInfo, options: PiperOptions | None) -> PiperSynthesizer:
    """The ``piper`` engine's loader (``voices/engines.py``)."""
    return PiperSynthesizer(voice, options)


def _import_piper() -> Any:
    try:
        import onnxruntime
        import piper
        import piper.config
    except ImportError as exc:
        raise ModelError(
            f"Piper text-to-speech is not installed ({exc.name}): pip install piper-tts"
        ) from None
    # piper logs the text it speaks at DEBUG; speechpipe never logs what users say.
    piper_logger = logging.getLogger("piper.voice")
    if piper_logger.level < logging.INFO:
        piper_logger.setLevel(logging.INFO)
    return piper, piper.config, onnxruntime


def _load(voice: VoiceInfo, options: PiperOptions) -> PiperVoice:
    piper, piper_config, onnxruntime = _import_piper()
    checked = read_voice_config(voice)  # bounded, and no path or wild number reaches Piper
    try:
        config = piper_config.PiperConfig.from_dict(checked)
    except (ValueError, KeyError, TypeError) as exc:
        raise VoiceError(
            f"voice {voice.name!r}: unusable config {voice.config_path}: {exc!r}"
        ) from None
    session_options = onnxruntime.SessionOptions()
    session_options.intra_op_num_threads = max(1, options.intra_op_threads)
    session_options.inter_op_num_threads = 1
    session_options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    spin = "1" if options.allow_spinning else "0"
    session_options.add_session_config_entry("session.intra_op.allow_spinning", spin)
    session_options.add_session_config_entry("session.inter_op.allow_spinning", spin)
    if options.seed is not None:
        # Piper's graph draws its noise with RandomNormalLike, whose generator is seeded from
        # onnxruntime's process-wide seed when the session is made: set just before, it makes
        # the speech of a run reproducible (the same calls in the same order sound the same).
        # Piper's are the only random ops speechpipe runs, so nothing else depends on it.
        onnxruntime.set_seed(options.seed)
    try:
        session = onnxruntime.InferenceSession(
            str(voice.model_path),
            sess_options=session_options,
            providers=["CPUExecutionProvider"],
        )
    except Exception as exc:  # onnxruntime raises its own, unexported exception types
        raise VoiceError(f"voice {voice.name!r}: cannot load {voice.model_path}: {exc}") from exc
    loaded: PiperVoice = piper.PiperVoice(session=session, config=config)
    return loaded


def _synthesis_config(options: PiperOptions) -> Any:
    from piper.config import SynthesisConfig

    return SynthesisConfig(
        length_scale=options.length_scale,
        noise_scale=options.noise_scale,
        noise_w_scale=options.noise_w_scale,
        volume=options.volume,
    )
