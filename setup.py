"""Build of the one native part: ``speechpipe.models._ct2_prefill`` (models/native/).

Everything else is in pyproject.toml. The extension is compiled against CTranslate2's headers
vendored in ``third_party/ctranslate2-<version>/`` (its UPSTREAM file names the version, the
one place that does) and linked to the library inside the ctranslate2 wheel of that version (a
build requirement, so it is there in pip's build environment). Reasons: docs/design.md,
"Reading the forced prefix in one pass".

``SPEECHPIPE_BUILD_NATIVE`` (as websockets' ``BUILD_EXTENSION``):

- ``auto`` (the default): build it where a C++ compiler works; elsewhere the install still
  succeeds without it and Whisper decodes with CTranslate2's own ``generate``
  (models/whisper/prefill.py says which one runs);
- ``yes``: the install fails when it cannot be built (``.ci/run``);
- ``no``: do not build it.
"""

from __future__ import annotations

import glob
import os
import re

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD_NATIVE_CHOICES = ("auto", "yes", "no")


def vendored_ctranslate2() -> tuple[str, str]:
    """The vendored CTranslate2 folder (relative to here) and the version its UPSTREAM names."""
    folders = glob.glob("third_party/ctranslate2-*/UPSTREAM", root_dir=HERE)
    if len(folders) != 1:
        raise SystemExit(f"speechpipe: expected one third_party/ctranslate2-*/UPSTREAM, "
                         f"found {folders}")
    with open(os.path.join(HERE, folders[0]), encoding="utf-8") as upstream:
        found = re.search(r"^version: *(\S+)$", upstream.read(), re.MULTILINE)
    folder = os.path.dirname(folders[0])
    if found is None or folder != f"third_party/ctranslate2-{found.group(1)}":
        raise SystemExit(f"speechpipe: {folders[0]} has no 'version:' line matching its folder")
    return folder, found.group(1)


def _ct2_prefill_extensions() -> list:
    choice = os.environ.get("SPEECHPIPE_BUILD_NATIVE", "auto").strip().lower() or "auto"
    if choice not in BUILD_NATIVE_CHOICES:
        raise SystemExit(f"speechpipe: SPEECHPIPE_BUILD_NATIVE={choice!r}: use one of "
                         f"{', '.join(BUILD_NATIVE_CHOICES)}")
    if choice == "no":
        print("speechpipe: not building the prefill decoder (SPEECHPIPE_BUILD_NATIVE=no)")
        return []

    def cannot(reason: str) -> list:
        if choice == "yes":
            raise SystemExit(f"speechpipe: cannot build the prefill decoder ({reason}), and "
                             f"SPEECHPIPE_BUILD_NATIVE=yes")
        print(f"speechpipe: not building the prefill decoder ({reason})")
        return []

    folder, version = vendored_ctranslate2()
    try:
        import ctranslate2
        from pybind11.setup_helpers import Pybind11Extension
    except ImportError as exc:
        return cannot(str(exc))
    if ctranslate2.__version__ != version:
        return cannot(f"ctranslate2 {ctranslate2.__version__} in the build environment, the "
                      f"headers are {version}'s")
    libs = glob.glob(os.path.join(os.path.dirname(ctranslate2.__file__), os.pardir,
                                  "ctranslate2.libs", "libctranslate2*.so*"))
    if len(libs) != 1:
        return cannot(f"libctranslate2 not found in the ctranslate2 wheel: {libs}")
    return [Pybind11Extension(
        "speechpipe.models._ct2_prefill",
        ["models/native/ct2_prefill.cc"],
        depends=["models/native/rows_step.h"],  # included by the .cc: rebuild when it changes
        define_macros=[("SPEECHPIPE_CT2_VERSION", f'"{version}"')],
        # linked by path: the library's soname (with the wheel's hash) becomes the needed
        # name, which the process already has once ``import ctranslate2`` ran
        extra_link_args=[os.path.abspath(libs[0])],
        # -isystem: warnings stay on for our code and off for the vendored headers
        extra_compile_args=["-O2", "-Wall", "-Wextra", "-isystem", f"{folder}/include"],
        cxx_std=17,
        optional=choice == "auto",  # auto: a failed compile skips the extension
    )]


if __name__ == "__main__":  # as build backends run it; tests import the choice above
    setup(ext_modules=_ct2_prefill_extensions())
