"""The phrase segmenter's options (``--set phrases.*``): a leaf module, so the options
tree (``speechpipe.config``) imports it without the segmenters or numpy."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PhraseOptions", "CONTINUATION_TAIL_S", "FUNCTION_WORDS"]


CONTINUATION_TAIL_S = 0.08  # quiet kept after a phrase the next one continues
# words a phrase does not end on before the end of its utterance (``no_end_words``)
FUNCTION_WORDS = ("a an the of to in on at by for from with and that "
                  "his her their its my your our")


@dataclass(frozen=True, slots=True)
class PhraseOptions:
    """When committed text becomes a spoken phrase (``--set phrases.*``)."""
    first_words: int = 2
    max_words: int = 5
    min_words_at_punctuation: int = 1
    cut: str = "just_in_time"  # or "count" (see ``stages.phrases``)
    lead_s: float = 1.0  # just in time: cut when less queued speech than this is left
    max_wait_words: int = 12  # just in time: never hold more words than this
    # just in time: a phrase does not end on these words before the end of the utterance
    # (space-separated; "": any word may end one). A phrase cut after an article,
    # preposition, conjunction or possessive is spoken as a fragment ("planet and,", "in
    # the,") that the listener mishears; held, the word opens the next phrase instead
    # (docs/benchmarks-history.md, "What the voice loses")
    no_end_words: str = FUNCTION_WORDS
    # just in time, phrases a listener can parse (docs/design.md; the policy before issue 20:
    # min_words=1, clause_cut=false, keep_units=false):
    min_words: int = 2  # a phrase before the end of the utterance has at least this many words
    # the utterance's first phrase (1: a lone first word may start the translation). Measured
    # (quiet machine, real time, 49 clips, same run): 1 gives 0.13 s earlier median
    # StartOffset (0.46 s on telephone speech) but telephone ASR-BLEU 30.75 against 37.15:
    # a word alone out of context is misheard (docs/benchmarks.md)
    first_min_words: int = 2
    clause_cut: bool = True  # held words are cut after their last clause punctuation
    keep_units: bool = True  # a name or a number is never split across two phrases
    # held words that make no such phrase (one word, a name or number that may go on) are
    # spoken anyway once the output has been silent this long and the oldest of them has
    # waited this long (never while speech is still queued)
    hold_silence_s: float = 0.5
    hold_wait_s: float = 1.5  # one decode step (1 s) and its decode: the next commit first
    # ... for the utterance's first word (-1: as hold_wait_s): until the first words are
    # committed, decodes come every 0.5 s (asr.early_step_s), so company comes sooner
    first_hold_wait_s: float = 0.75
    # a hypothesis with nothing tentative left (a pause decode committed everything heard)
    # is spoken whole at once, like the final: nothing can join its words until the speaker
    # goes on (False: held until the final, after the VAD's hangover)
    flush_when_caught_up: bool = True
    # a phrase the speaker's sentence goes on after keeps at most this much of the voice's
    # closing silence (issue 45: no sentence silence mid-sentence); 10: all of it
    continuation_tail_s: float = CONTINUATION_TAIL_S

    def __post_init__(self) -> None:
        if self.cut not in ("count", "just_in_time"):
            raise ValueError(f"phrases.cut must be count or just_in_time, not {self.cut!r}")
