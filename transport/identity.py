"""What a verified session token grants (``Identity``) and the seam that checks one
(``TokenVerifier``): a leaf module, so the server's limits (``transport.limits``, in the options
tree) name the verifier without the token code (``transport.auth``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["Identity", "TokenVerifier"]


@dataclass(frozen=True, slots=True)
class Identity:
    """A verified token. ``key`` is what per-token quotas count by (never the token itself);
    ``None`` for the one shared ``--token``, which every client holds."""

    key: str | None
    subject: str = ""
    expires_at: float | None = None
    room: str | None = None  # rooms: the room this token is for (``room`` claim)
    role: str | None = None  # rooms: ``speaker``, ``listener`` or ``participant`` (``role``)


class TokenVerifier(Protocol):
    """Checks a session token; returns the identity it grants."""

    def verify(self, token: str | None) -> Identity:
        """The token's identity, or ``AuthError``."""
        ...
