"""The CPU this runs on, as far as the ASR's speed depends on it (a leaf module: no models).

What a Whisper decoder step costs depends less on the clock than on which int8 GEMM
CTranslate2 runs, and that depends on the CPU (``docs/design.md``, "The CPU decides what a
decoder step costs"):

- CTranslate2 uses Intel MKL on Intel CPUs and oneDNN on every other x86 CPU
  (``CT2_USE_MKL`` overrides its choice).
- oneDNN has an int8 matrix-vector kernel only for AVX-512. Live decoding multiplies 1-10
  rows by each weight matrix, so on an AVX2-only CPU without MKL (an AMD EPYC of the
  Zen 2/3 kind, for one) every decoder step repacks all the decoder's weights: about 80 %
  of a step's time, measured with ``perf``. There a step costs 2-3x what it does on an
  AVX-512 Intel CPU, and an extra row (a beam, an item) costs little next to an extra step.

``speechpipe bench cost``, ``bench load``, ``eval --compare``, ``scripts/decoder_step_cost.py``
and ``speechpipe serve`` print :func:`describe_cpu` so that figures from different machines
are not compared as if they came from one.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuInfo", "parse_cpuinfo", "cpu_info", "describe_cpu", "usable_cores"]

_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True, slots=True)
class CpuInfo:
    """What decides a decoder step's cost: vendor, vector instructions, the int8 GEMM."""
    model: str  # "AMD EPYC 7B13", "Intel(R) Xeon(R) Platinum 8488C", ...
    vendor: str  # "GenuineIntel", "AuthenticAMD", "" when unknown
    cores: int  # the cores this process may run on
    isa: str  # the widest int8 instructions: "AMX", "AVX-512 VNNI", "AVX-512", "AVX2", ...
    gemm: str  # CTranslate2's int8 GEMM: "MKL" or "oneDNN" ("" when unknown: not x86)

    @property
    def repacks_weights(self) -> bool:
        """True where oneDNN has no int8 matrix-vector kernel: every decoder step repacks
        the weights (AVX2 and older without MKL)."""
        return self.gemm == "oneDNN" and not self.isa.startswith(("AVX-512", "AMX"))


def _isa(flags: set[str]) -> str:
    if "amx_int8" in flags:
        return "AMX"
    if "avx512_vnni" in flags:
        return "AVX-512 VNNI"
    if "avx512f" in flags and "avx512bw" in flags:
        return "AVX-512"
    if "avx2" in flags:
        return "AVX2"
    if "avx" in flags:
        return "AVX"
    return "SSE" if flags else ""


def parse_cpuinfo(text: str, *, cores: int, env: Mapping[str, str] | None = None,
                  machine: str = "x86_64") -> CpuInfo:
    """``CpuInfo`` from the text of ``/proc/cpuinfo`` (its first processor), the usable core
    count and the environment (``CT2_USE_MKL``, CTranslate2's own switch)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor is enough: the cores of a VM are alike
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    vendor = fields.get("vendor_id", "")
    model = " ".join(fields.get("model name", "").split()) or platform.processor() or "unknown CPU"
    gemm = ""
    if machine.lower() in ("x86_64", "amd64"):
        forced = (env or {}).get("CT2_USE_MKL", "").strip().lower()
        if forced:
            gemm = "MKL" if forced in _TRUE else "oneDNN"
        else:  # CTranslate2's rule (src/cpu/backend.cc): MKL only on a genuine Intel
            gemm = "MKL" if vendor == "GenuineIntel" else "oneDNN"
    return CpuInfo(model=model, vendor=vendor, cores=cores, isa=_isa(flags), gemm=gemm)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cpu_info() -> CpuInfo:
    """This machine's ``CpuInfo`` (Linux's ``/proc/cpuinfo``; elsewhere what ``platform``
    tells)."""
    cores = usable_cores()
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    return parse_cpuinfo(text, cores=cores, env=os.environ, machine=platform.machine())


def describe_cpu(info: CpuInfo | None = None) -> str:
    """One line: model, cores, vector instructions, CTranslate2's int8 GEMM and what it means
    for a decoder step."""
    info = info or cpu_info()
    line = f"{info.model}, {info.cores} cores"
    if info.isa:
        line += f", {info.isa}"
    if info.gemm:
        line += f", int8 GEMM {info.gemm}"
    if info.gemm == "MKL" and info.vendor and info.vendor != "GenuineIntel":
        line += " (MKL on a non-Intel CPU takes its slow generic path: unset CT2_USE_MKL)"
    elif info.repacks_weights:
        line += (" (no int8 matrix-vector kernel without AVX-512: CTranslate2's decoder step "
                 "repacks the weights, 2-3x an AVX-512 Intel CPU's step; the native in-place "
                 "step, pipeline.asr_inplace_step=auto, reads them where they lie)")
    return line
