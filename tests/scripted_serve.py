"""TEST ONLY: ``speechpipe`` whose ``serve`` runs the scripted pipeline (``tests/fakes.py``'s
``ScriptedPipeline``: no model is loaded), for the tests and the cluster bench that start
server nodes as subprocesses:

    python tests/scripted_serve.py [-v] serve --capacity N [serve flags]

``SCRIPTED_SPEECHPIPE`` is that command line's start (in place of ``speechpipe``). The shipped
package has no hook for it: this runs ``speechpipe.cli.main`` with ``run_server`` handed the
scripted pipeline (and no load options: its capacity is ``--capacity``'s, never calibrated).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parents[1]

SCRIPTED_SPEECHPIPE = [sys.executable, "-P", str(Path(__file__).resolve())]

__all__ = ["SCRIPTED_SPEECHPIPE", "main"]


def main(argv: list[str]) -> int:
    """``speechpipe.cli.main(argv)``, its ``serve`` on the scripted pipeline."""
    from speechpipe.cli import main as speechpipe_main
    from speechpipe.server import serve
    from tests.fakes import ScriptedPipeline

    run_server = serve.run_server

    def scripted_run_server(host: str, port: int, options: Any = None, *, load: Any = None,
                            pipeline: Any = None, **kwargs: Any) -> Any:
        if load is None or load.admission.capacity is None:
            raise SystemExit("scripted_serve: the scripted pipeline needs --capacity")
        return run_server(host, port, options, load=None, pipeline=ScriptedPipeline(),
                          **kwargs)

    serve.run_server = scripted_run_server  # type: ignore[assignment]
    return speechpipe_main(argv)


if __name__ == "__main__":
    # -P (SCRIPTED_SPEECHPIPE) keeps tests/ off the import path (its folders would shadow
    # top-level names); the clone's root goes first, for ``tests`` and ``speechpipe``
    sys.path.insert(0, str(_REPO))
    sys.exit(main(sys.argv[1:]))
