"""speechpipe's home folder: where model caches, the MT model registry and installed voices live.

``$SPEECHPIPE_HOME`` when set, else the platform's user cache folder. Used by ``models/`` and
``voices/``.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["speechpipe_home"]


def speechpipe_home() -> Path:
    """Root of speechpipe's caches: ``$SPEECHPIPE_HOME``, else the platform's user cache dir."""
    env = os.environ.get("SPEECHPIPE_HOME")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("speechpipe"))
