"""Where the project's own clips are (``samples/``: nine short clips and ``manifest.jsonl``).

They ship inside the package as ``speechpipe.samples`` (package data: ``pyproject.toml`` maps
the repository's ``samples/`` folder there), so the benches find their default clips from an
installed wheel as from a checkout. An editable install made before that mapping existed does
not know the package; it is found in the checkout beside ``speechpipe/`` instead.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["own_samples"]

PACKAGE = "speechpipe.samples"


def _candidates() -> list[Path]:
    found: list[Path] = []
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations is not None:
        found.extend(Path(location) for location in spec.submodule_search_locations)
    import speechpipe

    checkout = Path(speechpipe.__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file():  # a source tree, not site-packages
        found.append(checkout / "samples")
    return found


def own_samples() -> Path:
    """The folder holding the own clips' ``manifest.jsonl``.

    Never raises: when no candidate holds the manifest, the first candidate (or
    ``samples``) is returned, and the caller's own check names the missing file.
    """
    candidates = _candidates()
    for folder in candidates:
        if (folder / "manifest.jsonl").is_file():
            return folder
    return candidates[0] if candidates else Path("samples")
