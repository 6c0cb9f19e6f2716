"""The vendored CTranslate2 headers (``third_party/ctranslate2-*/``) the native decoder
(``models/native/``) is built against.

- One place names the version: the folder's UPSTREAM file. The folder's name and the two
  ctranslate2 pins in pyproject.toml (a static file cannot read it) must agree with it, and
  no source or build file writes the version again.
- UPSTREAM lists exactly the files vendored, next to upstream's LICENSE.
- ``SPEECHPIPE_BUILD_NATIVE``: auto skips what cannot be built, yes fails, no skips.

That they are exactly the headers the native code includes (a compiler run): the slow tier."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

import ctranslate2
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


def test_the_folder_and_the_pins_agree_with_upstream():
    folder, version = _vendored()
    assert folder.name == f"ctranslate2-{version}"
    assert re.search(rf"^tag: v{re.escape(version)}$", (folder / "UPSTREAM").read_text(), re.M)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pins = [r for r in pyproject["build-system"]["requires"] + pyproject["project"]["dependencies"]
            if r.startswith("ctranslate2")]
    assert pins == [f"ctranslate2=={version}"] * 2


def test_no_source_or_build_file_writes_the_version_again():
    _, version = _vendored()
    folders = ["speechpipe", "stages", "transport", "models", "voices", "scripts", "benchmarks",
               "tests", ".ci"]
    files = [p for name in folders for p in (ROOT / name).rglob("*") if p.is_file()
             and (p.suffix in {".py", ".cc", ".h", ".toml", ".sh", ".cfg"} or name == ".ci")]
    files += [ROOT / "setup.py", ROOT / "MANIFEST.in"]
    written = [str(p.relative_to(ROOT)) for p in files if version in p.read_text(errors="replace")]
    assert written == []  # pyproject.toml's two pins are held above
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert pyproject.count(version) == 2


def test_upstream_lists_the_vendored_files_and_its_licence_is_there():
    folder, _ = _vendored()
    present = sorted(str(p.relative_to(folder)) for p in (folder / "include").rglob("*")
                     if p.is_file())
    assert _listed(folder) == present
    assert len(present) > 50  # the list was read, not an empty match
    licence = (folder / "LICENSE").read_text()
    assert licence.startswith("MIT License") and "The OpenNMT Authors" in licence


def _setup_module():
    spec = importlib.util.spec_from_file_location("speechpipe_setup", ROOT / "setup.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines the choice; setup() runs only as __main__
    return module


def test_the_build_switch(monkeypatch):
    setup = _setup_module()
    _, version = _vendored()
    assert setup.vendored_ctranslate2() == (f"third_party/ctranslate2-{version}", version)
    monkeypatch.setenv("SPEECHPIPE_BUILD_NATIVE", "no")
    assert setup._ct2_prefill_extensions() == []
    monkeypatch.setenv("SPEECHPIPE_BUILD_NATIVE", "sometimes")
    with pytest.raises(SystemExit, match="use one of auto, yes, no"):
        setup._ct2_prefill_extensions()
    if importlib.util.find_spec("pybind11") is not None:
        for choice in ("auto", "yes"):
            monkeypatch.setenv("SPEECHPIPE_BUILD_NATIVE", choice)
            (extension,) = setup._ct2_prefill_extensions()
            assert extension.optional is (choice == "auto")
            assert "-w" not in extension.extra_compile_args
            assert ("SPEECHPIPE_CT2_VERSION", f'"{version}"') in extension.define_macros
    # a ctranslate2 of another version in the build environment: auto skips, yes fails
    monkeypatch.setattr(ctranslate2, "__version__", "0.0.1")
    monkeypatch.setenv("SPEECHPIPE_BUILD_NATIVE", "auto")
    assert setup._ct2_prefill_extensions() == []
    monkeypatch.setenv("SPEECHPIPE_BUILD_NATIVE", "yes")
    with pytest.raises(SystemExit, match="SPEECHPIPE_BUILD_NATIVE=yes"):
        setup._ct2_prefill_extensions()
