"""The public API is lazy: ``import speechpipe`` in a fresh interpreter loads no engine."""

from __future__ import annotations

import subprocess
import sys


def test_import_speechpipe_is_cheap() -> None:
    """``import speechpipe`` loads no model library (nor numpy); ``speechpipe.Pipeline`` does
    load the pipeline's modules."""
    heavy = ("faster_whisper", "ctranslate2", "onnxruntime", "piper", "numpy", "av", "aiortc")
    code = (
        "import sys, speechpipe\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r}))\n"
        "speechpipe.Pipeline\n"
        "print('speechpipe.session' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = out.stdout.splitlines()
    assert before == "[]"
    assert after == "True"
