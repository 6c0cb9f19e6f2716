"""The fixed split of ../shared/samples into a tuning half and a report half, by recording source.

Every threshold is chosen on the tuning half; figures are reported on both, and a rule is kept
only where both agree (a rule fitted until the shared clips agree has never transferred).

A clip's recording source is its corpus: the middle of its id (``es_enh_11375_cv`` -> ``cv``,
``fr_nast_19778580`` -> ``nast``), or the id itself for one-off recordings. Corpora of many
independent recordings (``fisher``: one telephone call each; ``epst``: one parliament speech
each) are split by the clip number's parity, odd to tuning, so both halves hold read and
conversational speech and English sources. The table below is the whole rule: a new clip
whose corpus is not in it goes to the report half, so the tuning half never grows silently.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["TUNE_CORPORA", "REPORT_CORPORA", "SPLIT_BY_PARITY", "corpus_of", "split_of"]

Half = Literal["tune", "report"]

TUNE_CORPORA = frozenset({
    "cv",  # Common Voice Spanish, read (seamless_communication)
    "comspeech",  # ComSpeech demo pages: de/es/fr read
    "mamba",  # mamba-decoder-s2st samples: es/fr read
    "libri",  # LibriSpeech English (wenet, leopard)
    "apollo11",  # 89 s English radio/mission audio: long speech
    "silero",  # 60 s German monologue: long speech
    "bonjour",  # French with a long silence: edge case
})
REPORT_CORPORA = frozenset({
    "nast",  # NAST-S2X demo: French read
    "cvss",  # CVSS French (StreamSpeech, speechbrain)
    "cvssapp",  # CVSS-C Spanish (an HF space app)
    "picovoice",  # Picovoice test sentences, 7 languages
    "jfk",  # Whisper's own English sample
    "aishell",  # Mandarin
})
SPLIT_BY_PARITY = frozenset({"fisher", "epst"})

_NUMBER = re.compile(r"(\d+)")


def corpus_of(clip_id: str) -> str:
    """The recording source of a clip id (see the module docs)."""
    parts = clip_id.split("_")
    for part in parts[1:]:
        if part in TUNE_CORPORA or part in REPORT_CORPORA or part in SPLIT_BY_PARITY:
            return part
    return parts[-1] if len(parts) > 1 else clip_id


def split_of(clip: Mapping[str, Any]) -> Half:
    """``tune`` or ``report`` for a manifest row (by its ``id``)."""
    clip_id = str(clip.get("id") or "")
    corpus = corpus_of(clip_id)
    if corpus in SPLIT_BY_PARITY:
        number = _NUMBER.search(clip_id)
        return "tune" if number is not None and int(number.group(1)) % 2 else "report"
    return "tune" if corpus in TUNE_CORPORA else "report"
