"""A release: ``python -m build`` makes an sdist and a wheel, and the wheel, installed into a
fresh virtual environment outside the checkout, translates the sample it ships.

The build runs as a user's does (sdist first, the wheel built from the unpacked sdist, so
the sdist must hold the native decoder's sources and the vendored headers), but offline:
without build isolation, on the build requirements the test extra installs. The fresh
environment gets the wheel alone (``--no-deps``); the already installed dependencies are
reached through a ``.pth`` naming this interpreter's site-packages, written after the
install, so that pip there never sees the checkout's (editable) speechpipe, and the checkout's
import finder (a ``.pth`` too, not read from a plain path) never runs: what is imported is
the wheel's, and the test checks it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import soundfile as sf

from tests.helpers import ROOT, says_gato_in_english

SAMPLE = "wav/es_gato.wav"  # package data of speechpipe.samples (pyproject.toml)

# run inside the fresh environment: where each part it imports comes from
WHERE = """
import importlib.resources, json, sys
import speechpipe
from speechpipe.models.whisper.prefill import native_prefill
native = native_prefill()
print(json.dumps({
    "speechpipe": speechpipe.__file__,
    "sample": str(importlib.resources.files("speechpipe.samples") / sys.argv[1]),
    "native": native and native.__file__,
}))
"""


def _run(argv: list[object], **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{argv}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


def test_the_wheel_installs_outside_the_checkout_and_translates_its_sample(tmp_path):
    required = bool(os.environ.get("SPEECHPIPE_REQUIRE_NATIVE"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    dist = tmp_path / "dist"
    built = _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, ROOT],
                 cwd=tmp_path, timeout=1200,
                 env={**env, "SPEECHPIPE_BUILD_NATIVE": "yes" if required else "auto"})
    # no -w: our C++ compiles without a warning (the vendored headers are -isystem)
    log = built.stdout + built.stderr
    assert [line for line in log.splitlines() if "warning:" in line
            and "models/native/" in line] == []

    (sdist,) = dist.glob("speechpipe-*.tar.gz")
    (wheel,) = dist.glob("speechpipe-*.whl")
    with tarfile.open(sdist) as tar:
        in_sdist = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    vendored = [p.relative_to(ROOT).as_posix() for p in ROOT.glob("third_party/**/*")
                if p.is_file()]
    assert len(vendored) > 50
    assert set(vendored) <= in_sdist, set(vendored) - in_sdist
    assert {"models/native/ct2_prefill.cc", "models/native/rows_step.h", "LICENSE",
            "MANIFEST.in", "setup.py"} <= in_sdist
    with zipfile.ZipFile(wheel) as wheel_zip:
        in_wheel = wheel_zip.namelist()
    assert f"speechpipe/samples/{SAMPLE}" in in_wheel
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in in_wheel)
    assert not [name for name in in_wheel if name.endswith((".cc", ".h"))]
    assert not required or any("/_ct2_prefill." in name for name in in_wheel)

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv], timeout=300)
    python = venv / "bin" / "python"
    _run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel],
         cwd=tmp_path, env=env, timeout=300)
    site_packages = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                          "['purelib'])"], cwd=tmp_path, env=env).stdout.strip()
    here = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (Path(site_packages) / "_speechpipe_test_dependencies.pth").write_text(
        "".join(f"{path}\n" for path in here))

    where = json.loads(_run([python, "-c", WHERE, SAMPLE], cwd=tmp_path, env=env).stdout)
    for part in ("speechpipe", "sample"):
        assert where[part].startswith(f"{venv}/"), where
    if required:
        assert where["native"] and where["native"].startswith(f"{venv}/"), where

    out = tmp_path / "translated.wav"
    said = _run([venv / "bin" / "speechpipe", "translate", where["sample"], "--out", out,
                 "--source-lang", "es"], cwd=tmp_path, env=env, timeout=600).stdout
    (line,) = [line for line in said.splitlines() if "->" in line]
    assert says_gato_in_english(line.split("->", 1)[1]), said
    audio, _ = sf.read(out, dtype="int16")
    assert np.abs(audio).max() > 1000
