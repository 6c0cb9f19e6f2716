"""The CPU line of benches and the server: vendor, vector instructions, CTranslate2's GEMM."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from speechpipe.machine import cpu_info, describe_cpu, parse_cpuinfo

AMD_AVX2 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse sse2 avx avx2 fma bmi2

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse sse2 avx avx2 fma bmi2
"""

INTEL_VNNI = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R)   Platinum 8375C CPU @ 2.90GHz
flags\t\t: fpu sse avx avx2 avx512f avx512bw avx512_vnni
"""

AMD_ZEN4 = """vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9R14
flags\t\t: avx avx2 avx512f avx512bw avx512_vnni
"""


def test_an_avx2_amd_cpu_runs_onednn_and_repacks_the_weights() -> None:
    info = parse_cpuinfo(AMD_AVX2, cores=2, env={})
    assert (info.vendor, info.isa, info.gemm) == ("AuthenticAMD", "AVX2", "oneDNN")
    assert info.repacks_weights
    line = describe_cpu(info)
    assert line.startswith("AMD EPYC 7B13, 2 cores, AVX2, int8 GEMM oneDNN")
    assert "repacks the weights" in line


def test_an_intel_cpu_runs_mkl_and_its_model_name_is_tidied() -> None:
    info = parse_cpuinfo(INTEL_VNNI, cores=2, env={})
    assert (info.isa, info.gemm, info.repacks_weights) == ("AVX-512 VNNI", "MKL", False)
    assert describe_cpu(info) == (
        "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz, 2 cores, AVX-512 VNNI, int8 GEMM MKL")


def test_onednn_with_avx512_has_its_matrix_vector_kernel() -> None:
    info = parse_cpuinfo(AMD_ZEN4, cores=4, env={})
    assert (info.gemm, info.isa, info.repacks_weights) == ("oneDNN", "AVX-512 VNNI", False)
    assert "repacks" not in describe_cpu(info)


@pytest.mark.parametrize(("value", "gemm"), [("1", "MKL"), ("true", "MKL"), ("0", "oneDNN")])
def test_ct2_use_mkl_overrides_the_vendor_rule(value: str, gemm: str) -> None:
    assert parse_cpuinfo(AMD_AVX2, cores=2, env={"CT2_USE_MKL": value}).gemm == gemm
    assert parse_cpuinfo(INTEL_VNNI, cores=2, env={"CT2_USE_MKL": value}).gemm == gemm


def test_mkl_forced_on_amd_is_called_out() -> None:
    line = describe_cpu(parse_cpuinfo(AMD_AVX2, cores=2, env={"CT2_USE_MKL": "1"}))
    assert "non-Intel CPU" in line and "unset CT2_USE_MKL" in line


def test_no_gemm_claim_off_x86_and_no_crash_on_an_empty_cpuinfo(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # an empty cpuinfo names no model: the fallback asks platform.processor(), which runs
    # ``uname -p`` in a subprocess the first time; here it answers as on many ARM boards
    monkeypatch.setattr(platform, "processor", lambda: "")
    arm = parse_cpuinfo("", cores=8, env={}, machine="aarch64")
    assert arm.gemm == "" and arm.isa == ""
    assert "int8 GEMM" not in describe_cpu(arm)


def test_this_machine_is_described() -> None:
    info = cpu_info()
    assert info.cores >= 1
    if Path("/proc/cpuinfo").exists() and platform.machine() == "x86_64":
        text = Path("/proc/cpuinfo").read_text()
        assert info.vendor and info.vendor in text
        assert info.gemm in ("MKL", "oneDNN")
        assert info.isa  # every x86_64 Linux machine lists its flags
    assert describe_cpu(info).startswith(f"{info.model}, {info.cores} cores")


def test_the_server_exports_the_cpu_kind() -> None:
    from prometheus_client import generate_latest

    from speechpipe.server.metrics import ServerMetrics

    text = generate_latest(ServerMetrics().registry).decode()
    info = cpu_info()
    line = next(line for line in text.splitlines() if line.startswith("speechpipe_cpu_info{"))
    assert f'gemm="{info.gemm or "unknown"}"' in line
    assert f'repacks_weights="{str(info.repacks_weights).lower()}"' in line
    assert line.endswith(" 1.0")
