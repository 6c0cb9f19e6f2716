"""Which language a speaker speaks, from every detection heard so far (``source_lang=auto``).

Whisper's detector answers on the audio a decode heard: early answers, on half a second,
are often wrong, and one answer at the moment the language must be fixed can be wrong too
(docs/design.md, "Detecting the language"). ``LanguageVote`` keeps every answer: each
detection's probabilities count with the seconds of audio it heard, so a later answer on
more audio weighs more, and one odd answer does not outvote the ones before it. Its
``leader`` is the language with the most weight and its **share** of all the weight (a
probability-weighted mean, between 0 and 1): the confidence shown to the user, and the
figure the lock rule compares with ``asr.language_confident``.

Pure: no model, no I/O; ``stages.utterance`` feeds it per decode, ``stages.asr`` carries a
session's unsure answers into its next utterance.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

KEPT_LANGUAGES = 5  # a detection's most likely languages kept (``WhisperResult.language_probs``)


def top_languages(probabilities: Iterable[tuple[str, float]], among: frozenset[str] = frozenset(),
                  kept: int = KEPT_LANGUAGES) -> tuple[tuple[str, float], ...]:
    """A detection's ``kept`` most likely languages, most likely first. With ``among`` (not
    empty): those languages only, renormalized over them, i.e. the probability of each given
    that the speech is one of them (``asr.detect_among``); all languages if none is among."""
    ranked = sorted(probabilities, key=lambda pair: -pair[1])
    if among:
        ranked = [pair for pair in ranked if pair[0] in among] or ranked
        mass = sum(probability for _, probability in ranked) or 1.0
        ranked = [(language, probability / mass) for language, probability in ranked]
    return tuple(ranked[:kept])


@dataclass
class LanguageVote:
    """Detections weighed by the audio each heard."""

    weight: dict[str, float] = field(default_factory=dict)
    total: float = 0.0  # the seconds of all detections (the probabilities not listed too)

    def add(self, probabilities: Iterable[tuple[str, float]], heard_s: float) -> None:
        """One detection: its languages' probabilities, on ``heard_s`` seconds of audio."""
        heard_s = max(heard_s, 0.0)
        for language, probability in probabilities:
            self.weight[language] = self.weight.get(language, 0.0) + probability * heard_s
        self.total += heard_s

    def merge(self, other: LanguageVote) -> None:
        """Add another vote's weight (a session's earlier utterances)."""
        for language, weight in other.weight.items():
            self.weight[language] = self.weight.get(language, 0.0) + weight
        self.total += other.total

    def leader(self) -> tuple[str, float]:
        """The language with the most weight and its share of all weight; ("", 0) if none."""
        if not self.weight or self.total <= 0:
            return "", 0.0
        language = max(self.weight, key=lambda lang: (self.weight[lang], lang))
        return language, min(1.0, self.weight[language] / self.total)

    def copy(self) -> LanguageVote:
        """An independent copy."""
        return LanguageVote(dict(self.weight), self.total)



def settle_language(vote: LanguageVote, heard_s: float, confident: float, min_s: float,
                    lock_s: float) -> tuple[str, float] | None:
    """The language to fix now and its confidence (the vote's share), or None to wait.

    Fixed once the vote's leader holds ``confident`` of the weight on at least ``min_s``
    seconds of audio, and at ``lock_s`` whatever the share. The newest detection alone does
    not decide: on the shared and bundled clips, 12 of 77 answers of probability 0.8 or more
    at the moment they came were the wrong language, and no share of 0.8 was
    (scripts/language_detection.py; docs/design.md, "Detecting the language").
    """
    language, share = vote.leader()
    if language and (heard_s >= lock_s or (heard_s >= min_s and share >= confident)):
        return language, share
    return None
