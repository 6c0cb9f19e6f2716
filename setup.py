"""Build of the one native part: ``speechpipe.models._ct2_prefill`` (models/native/).

Everything else is in pyproject.toml. The extension is compiled against the vendored
headers of CTranslate2 4.8.1 and linked to the library inside the ctranslate2 4.8.1 wheel
(a build requirement, so it is there in pip's build environment). It is optional: without a
C++ compiler the install still succeeds and Whisper decodes with CTranslate2's own
``generate`` (models/prefill.py says which one runs). Reasons: docs/design.md, "Reading the
forced prefix in one pass".
"""

from __future__ import annotations

import glob
import os

from setuptools import setup

CTRANSLATE2_VERSION = "4.8.1"  # the headers in models/native/include are this version's


def _ct2_prefill_extensions() -> list:
    try:
        import ctranslate2
        from pybind11.setup_helpers import Pybind11Extension
    except ImportError as exc:
        print(f"speechpipe: not building the prefill decoder ({exc})")
        return []
    if ctranslate2.__version__ != CTRANSLATE2_VERSION:
        print(f"speechpipe: not building the prefill decoder (ctranslate2 "
              f"{ctranslate2.__version__} in the build environment, headers are "
              f"{CTRANSLATE2_VERSION})")
        return []
    libs = glob.glob(os.path.join(os.path.dirname(ctranslate2.__file__), os.pardir,
                                  "ctranslate2.libs", "libctranslate2*.so*"))
    if len(libs) != 1:
        print(f"speechpipe: not building the prefill decoder (library not found: {libs})")
        return []
    return [Pybind11Extension(
        "speechpipe.models._ct2_prefill",
        ["models/native/ct2_prefill.cc"],
        depends=["models/native/rows_step.h"],  # included by the .cc: rebuild when it changes
        include_dirs=["models/native/include"],
        # linked by path: the library's soname (with the wheel's hash) becomes the needed
        # name, which the process already has once ``import ctranslate2`` ran
        extra_link_args=[os.path.abspath(libs[0])],
        extra_compile_args=["-O2", "-w"],
        cxx_std=17,
        optional=True,
    )]


setup(ext_modules=_ct2_prefill_extensions())
