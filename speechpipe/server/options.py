"""The server's load options: admission, the degrade ladder, load sampling (a leaf module).

``LoadOptions`` (``--set load.*``, with ``admission.*`` and ``degrade.*`` beneath it) sits in
the configuration tree (``speechpipe.config``); this module and the two it imports hold
pure cores and their options only, so the tree is read without loading a server.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from speechpipe.server.admission import AdmissionOptions
from speechpipe.server.degrade import DegradeOptions

__all__ = ["LoadOptions"]


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """Admission, the degrade ladder and load sampling (``--set load.*``)."""
    admission: AdmissionOptions = field(default_factory=AdmissionOptions)
    degrade: DegradeOptions = field(default_factory=DegradeOptions)
    degrade_enabled: bool = True
    tick_s: float = 0.5  # load sampling period (also the loop-lag probe's timer)
    latency_window_s: float = 3.0  # ASR turnarounds of this recent past count as "current"
