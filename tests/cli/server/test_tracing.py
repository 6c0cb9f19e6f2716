"""OpenTelemetry is imported only when tracing is on (a fresh interpreter)."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk.trace", reason="needs the otel extra (speechpipe[otel])")




def test_opentelemetry_is_imported_only_when_tracing_is_on() -> None:
    import subprocess
    import sys

    code = ("import sys, speechpipe.server.serve, speechpipe.server.tracing; "
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout
