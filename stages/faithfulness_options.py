"""The faithfulness guards' options (``--set faithful.*``): a leaf module, so the
options tree (``speechpipe.config``) imports it without the guards, numpy or Silero."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FaithfulnessOptions"]


@dataclass(frozen=True, slots=True)
class FaithfulnessOptions:
    """Thresholds of the guards and of the coverage check (``--set faithful.NAME=VALUE``)."""

    guard: bool = True  # False: decodes commit whatever they say (for A/B and tests only)
    min_speech_s: float = 0.2  # a span with less Silero speech than this commits no words
    speech_threshold: float = 0.5  # Silero probability that counts a window as speech
    words_per_speech_s: float = 6.0  # a decode never adds more words than this rate ...
    extra_words: int = 3  # ... plus this many, per side (a loop or a hallucination)
    target_per_source_word: float = 2.5  # target words allowed per source word heard ...
    target_extra_words: int = 3  # ... plus this many
    recover: bool = True  # translate uncovered audio on its own when coverage is short
    min_ratio: float = 0.5  # target/source words below this: the translation is short
    min_source_words: int = 8  # shorter captions are never judged short (too noisy)
    max_recoveries: int = 2  # extra decodes per commit at most
