"""Which decoder ran: the native one or CTranslate2's, and which kernel stepped it (a leaf
module: no models; the engines are read by their attributes).

Every bench figure is printed with this line (issue 73) because the same build decodes three
ways, and a figure from one says little about another:

- **Whisper (ASR)**: the native prefix-prefill decoder (``models.whisper.prefill``, kept only
  where the warm-up found it decodes what ``generate`` does: ``WhisperDecoders.verify_native``)
  or CTranslate2's ``generate``. Inside the native decoder, a single decoder step multiplies
  the int8 weights in place (``RowsDense``: its AVX2 kernel, or plain C++ without AVX2) where
  ``pipeline.asr_inplace_step`` chose it and the warm-up kept it; else CTranslate2's int8 GEMM
  steps it (Intel MKL or oneDNN, by the CPU: ``speechpipe.machine``).
- **Text MT**: the native prefix reader (``models.mt.prefill.PrefixReader``) or
  CTranslate2's ``translate_batch``; both multiply with CTranslate2's int8 GEMM.

``speechpipe serve`` prints ``speechpipe: decoder ...`` before ``ready``; the benches that start a
server read it back from its log (``parse_decoder_line``), the others ask their own pipeline.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from speechpipe.machine import CpuInfo, cpu_info

__all__ = ["DecoderPath", "asr_decoder_path", "mt_decoder_path", "whisper_decoder_path",
           "pipeline_decoder_paths", "describe_decoders", "parse_decoder_line",
           "SERVER_PREFIX"]

# the line ``speechpipe serve`` prints once ready (``SERVER_PREFIX`` + ``describe_decoders``)
SERVER_PREFIX = "speechpipe: decoder "
_AVX2_OR_WIDER = ("AVX2", "AVX-512", "AVX-512 VNNI", "AMX")
_LINE = re.compile(r"^(ASR|MT) (native|ctranslate2), ([^;|]*?)(?:; ([^|]*?))?$")


@dataclass(frozen=True, slots=True)
class DecoderPath:
    """The decoder one part ran on."""
    part: str  # "asr" (Whisper) or "mt" (text MT)
    path: str  # "native" or "ctranslate2"
    kernel: str  # what multiplied a decoder step: "in-place int8 step (AVX2 kernel)", ...
    note: str = ""  # why the native decoder or the in-place step was set aside; "" if not

    def describe(self) -> str:
        """One line: ``ASR native, in-place int8 step (AVX2 kernel)`` (``; why`` when a
        faster path was set aside)."""
        note = self.note.replace(";", ",").replace("|", "/").replace("\n", " ")
        return (f"{self.part.upper()} {self.path}, {self.kernel}"
                + (f"; {note}" if note else ""))

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def _gemm(cpu: CpuInfo) -> str:
    """CTranslate2's int8 GEMM on this CPU: ``CTranslate2 int8 GEMM oneDNN (AVX2)``."""
    where = ", ".join(part for part in (cpu.gemm, cpu.isa) if part)
    return "CTranslate2 int8 GEMM" + (f" ({where})" if where else "")


def asr_decoder_path(*, native_verified: bool | None, native_refused: str = "",
                     rows_step_refused: str | None = None,
                     cpu: CpuInfo | None = None) -> DecoderPath:
    """The Whisper decoder path from what the warm-up found (``WhisperDecoders``:
    ``native_verified`` True when the native decoder was kept, False when it disagreed with
    ``generate``, None when it was not built or not checked; ``rows_step_refused`` "" when the
    in-place step was kept, a reason when set aside, None when it was off)."""
    cpu = cpu or cpu_info()
    if native_verified is not True:
        note = ("the native decoder set aside: " + native_refused if native_refused
                else "the native decoder not built or not checked" if native_verified is None
                else "the native decoder set aside")
        return DecoderPath("asr", "ctranslate2", "generate, " + _gemm(cpu), note)
    if rows_step_refused == "":
        kernel = ("AVX2 kernel" if cpu.isa in _AVX2_OR_WIDER else "plain C++")
        return DecoderPath("asr", "native", f"in-place int8 step ({kernel})")
    note = f"the in-place step set aside: {rows_step_refused}" if rows_step_refused else ""
    return DecoderPath("asr", "native", "steps on " + _gemm(cpu), note)


def mt_decoder_path(*, native: bool, cpu: CpuInfo | None = None) -> DecoderPath:
    """The text-MT decoder path: the native prefix reader (``native``) or CTranslate2's
    ``translate_batch``; both step on CTranslate2's int8 GEMM."""
    cpu = cpu or cpu_info()
    if native:
        return DecoderPath("mt", "native", "prefix reader, steps on " + _gemm(cpu))
    return DecoderPath("mt", "ctranslate2", "translate_batch, " + _gemm(cpu))


def whisper_decoder_path(engine: Any, cpu: CpuInfo | None = None) -> DecoderPath:
    """``asr_decoder_path`` of a warmed-up ``WhisperEngine`` (its ``decoders``)."""
    decoders = engine.decoders
    return asr_decoder_path(native_verified=decoders.native_verified,
                            native_refused=decoders.native_refused,
                            rows_step_refused=decoders.rows_step_refused, cpu=cpu)


def pipeline_decoder_paths(pipeline: Any, cpu: CpuInfo | None = None) -> list[DecoderPath]:
    """The decoder paths of a warmed-up ``Pipeline``: Whisper's, then each loaded
    CTranslate2 text-MT model's (``Ct2TextTranslator.prefix_reads`` None: no native reader)."""
    cpu = cpu or cpu_info()
    engine = getattr(pipeline, "engine", None)  # a test's stand-in may have none
    paths = ([whisper_decoder_path(engine, cpu)]
             if hasattr(getattr(engine, "decoders", None), "native_verified") else [])
    for worker in getattr(pipeline, "_text_mt", {}).values():
        translator = getattr(worker, "translator", None)
        if translator is not None and hasattr(translator, "prefix_reads"):
            path = mt_decoder_path(native=translator.prefix_reads is not None, cpu=cpu)
            if path not in paths:
                paths.append(path)
    return paths


def describe_decoders(paths: list[DecoderPath]) -> str:
    """The one line printed with a bench's figures: the paths joined by `` | ``."""
    return " | ".join(path.describe() for path in paths) or "no decoder ran"


def parse_decoder_line(text: str) -> list[DecoderPath]:
    """The paths of a ``describe_decoders`` line (with or without ``SERVER_PREFIX``), or of
    the last such line in a server's log; [] when there is none."""
    lines = [line[len(SERVER_PREFIX):] for line in text.splitlines()
             if line.startswith(SERVER_PREFIX)]
    line = lines[-1] if lines else text.strip()
    paths = []
    for piece in line.split(" | "):
        match = _LINE.match(piece.strip())
        if match is None:
            return []
        part, path, kernel, note = match.groups()
        paths.append(DecoderPath(part.lower(), path, kernel.strip(), (note or "").strip()))
    return paths
