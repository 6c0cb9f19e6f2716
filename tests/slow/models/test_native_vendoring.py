"""The vendored CTranslate2 headers (``third_party/ctranslate2-*/``) are exactly the headers
the native decoder (``models/native/``) includes (a compiler run)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from tests.helpers import ROOT


def _vendored() -> tuple[Path, str]:
    """The vendored folder and the version its UPSTREAM names."""
    folders = sorted(ROOT.glob("third_party/ctranslate2-*"))
    assert len(folders) == 1, folders
    found = re.search(r"^version: *(\S+)$", (folders[0] / "UPSTREAM").read_text(), re.M)
    assert found, "UPSTREAM has no 'version:' line"
    return folders[0], found.group(1)


def _listed(folder: Path) -> list[str]:
    return re.findall(r"^  (include/\S+)$", (folder / "UPSTREAM").read_text(), re.M)


def test_the_vendored_headers_are_what_the_native_code_includes():
    folder, _ = _vendored()
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        if os.environ.get("SPEECHPIPE_REQUIRE_NATIVE"):
            pytest.fail("no C++ compiler, and SPEECHPIPE_REQUIRE_NATIVE is set")
        pytest.skip("no C++ compiler here")
    pybind11 = pytest.importorskip("pybind11")
    include = folder / "include"
    deps = subprocess.run(
        [compiler, "-std=c++17", "-MM", '-DSPEECHPIPE_CT2_VERSION=""', f"-I{include}",
         f"-I{pybind11.get_include()}", f"-I{sysconfig.get_paths()['include']}",
         str(ROOT / "models" / "native" / "ct2_prefill.cc")],
        capture_output=True, text=True, check=True, timeout=120).stdout
    used = sorted({str(Path(p).relative_to(folder)) for p in deps.replace("\\\n", " ").split()
                   if p.startswith(str(include))})
    assert used == _listed(folder), "refresh the vendored headers: UPSTREAM says how"
