"""Every default in one place: the options a pipeline is built with."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

from speechpipe.errors import InputError
from speechpipe.models.batching import BatchOptions
from speechpipe.stages.asr import AsrOptions
from speechpipe.stages.phrases import PhraseOptions
from speechpipe.stages.tts import CatchUpOptions
from speechpipe.stages.vad import VadOptions

__all__ = ["PipelineOptions", "with_overrides"]


@dataclass(frozen=True, slots=True)
class PipelineOptions:
    asr_model: str = "whisper-base"  # a bundled name, or a CTranslate2 Whisper folder
    asr_threads: int = 1  # measured: 1 thread costs less CPU and was as fast on 2 shared cores
    asr_encode_bucket_s: float = 1.0  # encode lengths are multiples of this (batching)
    voice_dirs: tuple[str, ...] = ()
    phrase_cache_items: int = 512  # per voice; ~1 s of audio each
    tts_length_scale: float | None = 0.9  # Piper speaking rate: < 1 is faster (None: voice's)
    catch_up: CatchUpOptions = field(default_factory=CatchUpOptions)
    mt_threads: int = 2
    translation_memory_items: int = 4096
    vad: VadOptions = field(default_factory=VadOptions)
    asr: AsrOptions = field(default_factory=AsrOptions)
    phrases: PhraseOptions = field(default_factory=PhraseOptions)
    input_capacity_frames: int = 1500  # 30 s of 20 ms frames before audio is coalesced
    fast_input_capacity_frames: int = 5  # --pace fast: the producer waits, every step decodes
    batching: BatchOptions = field(default_factory=BatchOptions)  # the shared ASR worker
    # numpy BLAS threads for the whole process, set by the CLI and server entry points before
    # they load the models (``apply_process_limits``); None leaves the process as it is.
    # ``Pipeline.load`` itself never changes process-wide settings.
    blas_threads: int | None = 1


def with_overrides(options: PipelineOptions, overrides: Iterable[str]) -> PipelineOptions:
    """Apply ``group.field=value`` overrides (``--set``), converting to the field's type."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        group, _, name = key.strip().partition(".")
        groups = ("vad", "asr", "phrases", "catch_up", "batching", "pipeline")
        if not sep or group not in groups or not name:
            raise InputError(
                f"--set {item!r}: expected GROUP.FIELD=VALUE ({', '.join(groups)})"
            )
        section = options if group == "pipeline" else getattr(options, group)
        fields = {f.name: f for f in dataclasses.fields(section)}
        if name not in fields:
            raise InputError(f"--set {item!r}: {group} has no option {name!r} "
                             f"(has: {', '.join(sorted(fields))})")
        if dataclasses.is_dataclass(current := getattr(section, name)) or isinstance(
            current, tuple
        ):
            raise InputError(f"--set {item!r}: {name} is not a single value")
        current = getattr(section, name)
        try:
            if current is None:
                value: object = float(raw)
            elif isinstance(current, bool):
                if raw.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(raw)
                value = raw.lower() in ("true", "1")
            else:
                value = type(current)(raw)
            section = dataclasses.replace(section, **{name: value})
        except (TypeError, ValueError) as exc:
            raise InputError(f"--set {item!r}: {exc}") from None
        options = section if group == "pipeline" else dataclasses.replace(
            options, **{group: section}
        )
    return options
