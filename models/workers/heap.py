"""Handing freed heap memory back to the system (a leaf module: no models).

Weights let go in a long-running process (a restricted vocabulary's word lists, a text-MT
``Translator`` whose work the native reader took over) stay in glibc's free lists: reusable
by this process, but resident. ``malloc_trim`` returns them to the system, so the process's
RSS is the memory it uses.
"""

from __future__ import annotations

__all__ = ["malloc_trim"]


def malloc_trim() -> bool:
    """Hand freed heap memory back to the OS (glibc only). False where unavailable; the
    memory then stays reusable by this process."""
    import ctypes

    try:
        # the process's own symbols, libc's among them: no library search (ctypes.util's
        # find_library runs ``ldconfig -p`` in a subprocess, once a call)
        libc = ctypes.CDLL(None)
        return bool(libc.malloc_trim(0))
    except (OSError, AttributeError):
        return False
