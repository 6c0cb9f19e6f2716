"""``SessionRequest``: what a client asks a session for (languages, voice, rates, mode).

It is the common vocabulary of the transports that receive requests, the pipeline that serves
them and library users; it lives in the lowest layer so all of them can import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["SessionRequest"]


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """What a client asks for. Validation (languages, voice, rates) happens in the factory,
    which raises ``speechpipe.errors.InputError`` subclasses for a bad request."""

    source_lang: str = "auto"
    target_lang: str = "en"
    voice: str | None = None
    output_sample_rate: int = 16_000
    mode: Literal["balanced", "fast", "quality"] = "balanced"
    mt: str = "auto"  # auto | whisper | ct2:NAME (speechpipe.models.mt.routes)
    priority: Literal["live", "replay"] = "live"
    pace: Literal["realtime", "fast"] = "realtime"
    client_id: str = ""
    # the namespace of the shared phrase cache, for in-process callers: sessions only reuse
    # speech synthesized for the same one. --compare and bench cost give each variant or session
    # its own, so none hears speech synthesized earlier for another for free. "": the pipeline
    # decides (``Pipeline.phrase_namespace``: the common one, or one per session under
    # ``pipeline.phrase_cache_per_session``); a client's start message cannot set it.
    phrase_cache: str = ""
    # False: captions only, no voice and no speech synthesis (a room's pipeline into a
    # language the server has a text-MT model but no voice for)
    speech: bool = True
