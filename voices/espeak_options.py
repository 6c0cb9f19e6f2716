"""How an espeak-ng voice speaks (``--set espeak.*``): a leaf module, so the options tree
(``speechpipe.config``) imports it without the library or the voice registry.

Each field's bound is its ``metadata`` (``range``, ``text``: ``speechpipe.config`` holds every
leaf to one)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["EspeakOptions"]


@dataclass(frozen=True, slots=True)
class EspeakOptions:
    """The espeak-ng engine's options (``--set espeak.FIELD=VALUE``)."""

    rate_wpm: int = field(default=225, metadata={"range": (80, 450)})  # espeak-ng's own bounds
    """Words per minute at speed 1.0 (espeak-ng's own default is 175); the catch-up rate
    (``catch_up.*``) multiplies it. 225: a Spanish translation is longer than its English
    source, and at 175 its speech ended 2.37 s after the speaker (225: 1.98 s) with Whisper
    hearing it no worse (docs/benchmarks.md, "Other languages on real engines")."""
    variant: str = field(default="m3", metadata={
        "text": (16, r"[A-Za-z0-9]+", "a variant name such as m3 or klatt")})
    """espeak-ng's voice variant (``espeak-ng --voices=variant``: m1-m7, f1-f5, klatt, ...;
    empty: the language voice's own). ``m3``: Whisper heard the Spanish translations of the
    shared sentences as Spanish 12 of 12 (tuning half) and 14 of 14 (report half) against 11
    and 13 of 14 with none, and transcribed them closer (BLEU 44.4 / 50.9 against 36.3 / 39.6);
    French 5/6 and 6/8 against 4/6 and 5/8 (docs/benchmarks.md)."""

    def __post_init__(self) -> None:
        if self.variant and not (len(self.variant) <= 16 and self.variant.isascii()
                                 and self.variant.isalnum()):
            raise ValueError(f"espeak.variant must be a variant name such as m3 or klatt, "
                             f"not {self.variant[:20]!r}")
