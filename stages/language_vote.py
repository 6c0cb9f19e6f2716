"""Which language a speaker speaks, from every detection heard so far (``source_lang=auto``).

Whisper's detector answers on the audio a decode heard: early answers, on half a second,
are often wrong, and one answer at the moment the language must be fixed can be wrong too,
even a sure-looking one (docs/design.md, "Detecting the language"). ``LanguageVote`` keeps
every answer: each detection's probabilities count with the seconds of audio it heard, so a
later answer on more audio weighs more, and one odd answer does not outvote the ones before
it. Its ``leader`` is the language with the largest **share** of the evidence (a
probability-weighted mean, between 0 and 1): the confidence shown to the user, and the
figure the lock rule compares with ``asr.language_confident``.

Pure: no model, no I/O; ``stages.utterance`` feeds it per decode, ``stages.asr`` carries a
session's unsure answers into its next utterance.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

KEPT_LANGUAGES = 5  # a detection's most likely languages kept (``WhisperResult.language_probs``)
# confident answers for one other language an utterance in a kept language needs to switch
# (``switched_language``): one is not enough (on 17 shared clips, 1.5 s of a French one was
# Arabic at 0.86, then 0.35 half a second later)
SWITCH_ANSWERS = 2


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
    """Detections weighed by the audio each heard, after what earlier utterances said.

    An utterance's detections are of growing prefixes of the same speech, so they count as
    their weighted mean, worth the newest one's seconds; earlier utterances of the session
    (``carried``) count each as one answer worth its length."""

    weight: dict[str, float] = field(default_factory=dict)  # this utterance: probability x s
    total: float = 0.0  # ... the seconds of its detections
    heard_s: float = 0.0  # ... the audio its newest detection heard
    prior: dict[str, float] = field(default_factory=dict)  # earlier utterances: share x s
    prior_s: float = 0.0  # ... their seconds

    def add(self, probabilities: Iterable[tuple[str, float]], heard_s: float) -> None:
        """One detection: its languages' probabilities, on ``heard_s`` seconds of audio."""
        heard_s = max(heard_s, 0.0)
        for language, probability in probabilities:
            self.weight[language] = self.weight.get(language, 0.0) + probability * heard_s
        self.total += heard_s
        self.heard_s = max(self.heard_s, heard_s)

    def share(self, language: str) -> float:
        """``language``'s share of all the evidence, 0-1 (0 when nothing was heard)."""
        own = self.weight.get(language, 0.0) * self.heard_s / self.total if self.total else 0.0
        seconds = self.prior_s + (self.heard_s if self.total else 0.0)
        if seconds <= 0:
            return 0.0
        return min(1.0, (self.prior.get(language, 0.0) + own) / seconds)

    def leader(self) -> tuple[str, float]:
        """The language with the largest share and that share; ("", 0) if none."""
        languages = set(self.weight) | set(self.prior)
        if not languages:
            return "", 0.0
        language = max(languages, key=lambda lang: (self.share(lang), lang))
        return language, self.share(language)

    def ranking(self, kept: int = 3) -> tuple[tuple[str, float], ...]:
        """The ``kept`` languages with the largest shares, largest first (ties by code): the
        candidates a user is offered when the leader is unsure (``translate``'s hint)."""
        languages = set(self.weight) | set(self.prior)
        shares = sorted(((lang, self.share(lang)) for lang in languages),
                        key=lambda pair: (-pair[1], pair[0]))
        return tuple(pair for pair in shares[:kept] if pair[1] > 0)

    def carried(self) -> LanguageVote:
        """What a later utterance starts from: all of this as earlier evidence."""
        languages = set(self.weight) | set(self.prior)
        seconds = self.prior_s + (self.heard_s if self.total else 0.0)
        return LanguageVote(prior={lang: self.share(lang) * seconds for lang in languages},
                            prior_s=seconds)

    def copy(self) -> LanguageVote:
        """An independent copy."""
        return LanguageVote(dict(self.weight), self.total, self.heard_s, dict(self.prior),
                            self.prior_s)


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


def switched_language(probabilities: Iterable[tuple[str, float]], kept: str, heard_s: float,
                      confident: float, min_s: float) -> str | None:
    """The language a speaker may have switched to, or None: another language than the
    session's ``kept`` one that a detection on at least ``min_s`` seconds gives
    ``confident`` or more. The caller counts such answers and takes ``SWITCH_ANSWERS`` of
    them: a file in Spanish and then English is translated as English from the first
    utterance the detector hears twice as English, instead of staying Spanish (issue 47)."""
    if heard_s < min_s:
        return None
    return next((language for language, probability in probabilities
                 if language != kept and probability >= confident), None)
