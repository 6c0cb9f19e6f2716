"""Every default in one place: the options a pipeline is built with."""

from __future__ import annotations

from dataclasses import dataclass, field

from speechpipe.stages.asr import AsrOptions
from speechpipe.stages.phrases import PhraseOptions
from speechpipe.stages.vad import VadOptions

__all__ = ["PipelineOptions"]


@dataclass(frozen=True, slots=True)
class PipelineOptions:
    asr_model: str = "whisper-base"  # a bundled name, or a CTranslate2 Whisper folder
    asr_threads: int = 2
    voice_dirs: tuple[str, ...] = ()
    phrase_cache_items: int = 2048
    vad: VadOptions = field(default_factory=VadOptions)
    asr: AsrOptions = field(default_factory=AsrOptions)
    phrases: PhraseOptions = field(default_factory=PhraseOptions)
    input_capacity_frames: int = 1500  # 30 s of 20 ms frames before audio is coalesced
    fast_input_capacity_frames: int = 5  # --pace fast: the producer waits, every step decodes
