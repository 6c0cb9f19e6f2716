"""The VAD's options (``--set vad.*``): a leaf module, so the options tree
(``speechpipe.config``) imports it without the stage, numpy or webrtcvad."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["VadOptions"]


@dataclass(frozen=True, slots=True)
class VadOptions:
    """Speech start, pause, end and forced-cut settings (``--set vad.*``)."""
    aggressiveness: int = 2  # webrtcvad 0 (lenient) .. 3 (strict)
    start_window_ms: int = 200  # speech starts when ...
    start_ratio: float = 0.6  # ... this share of the window is voiced
    pause_ms: int = 240  # unvoiced run inside an utterance reported as a pause
    # unvoiced run after which the ASR decodes ahead of a possible pause, so the pause finds
    # its decode done (0: off, the default); at least asr.pause_commit_margin_s to count.
    # 160 measured: the pause commits ~0.09 s sooner, but +0.02-0.03 CPU-s per audio second
    # and no EndOffset gain over all clips (docs/design.md, "Decoding ahead of the pause")
    hush_ms: int = 0
    hangover_ms: int = 600  # unvoiced run that ends the utterance
    max_utterance_s: float = 15.0  # longer speech is cut into utterances here
    soft_max_utterance_s: float = 8.0  # after this long, a pause ends the utterance

    def __post_init__(self) -> None:
        if not 0 <= self.aggressiveness <= 3:
            raise ValueError("aggressiveness must be 0..3")
        if not 0.0 < self.start_ratio <= 1.0:
            raise ValueError("start_ratio must be in (0, 1]")
        if self.pause_ms >= self.hangover_ms:
            raise ValueError("pause_ms must be shorter than hangover_ms")
        if not 0 <= self.hush_ms < self.pause_ms:
            raise ValueError("hush_ms must be 0 (off) or shorter than pause_ms")
