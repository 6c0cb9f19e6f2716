"""The incremental text MT's options (``--set text_mt.*``): a leaf module, so the options
tree (``speechpipe.config``) imports it without the stage or asyncio."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TextMtOptions"]


@dataclass(frozen=True, slots=True)
class TextMtOptions:
    """The incremental text-MT policy (``--set text_mt.*``)."""
    agreement: int = 2
    """LocalAgreement-n over target continuations."""
    hold_words: int = 0
    """0: target words commit by LocalAgreement-n (the default). N > 0: hold-N instead (Liu
    et al. 2020): an open update commits its continuation but the last N words at once,
    without waiting for the next update to agree. A translation commit then comes with the
    caption commit's own update; with a model not trained for prefixes the held tail is all
    that guards against a later source word reordering it (quality: docs/design.md)."""
    lookahead: bool = True
    """An open update also translates the committed source followed by the captions'
    tentative words, and commits the head of the committed source's translation on which
    the two agree, beside LocalAgreement-n over successive updates: a translation word the
    next words the ASR already hypothesizes do not change commits in the update of its
    caption commit, not one caption commit later. What commits is still a prefix of the
    committed source's own translation: it never rests on words not yet heard
    (docs/design.md, "Look-ahead agreement"). False: LocalAgreement-n alone."""
    commit_when_caught_up: bool = True
    """An open update whose source hypothesis has nothing tentative (the ASR committed
    everything it heard: a pause) commits the open segment's whole translation, as the
    captions commit everything at a pause; the segment stays open, so what follows is still
    translated with it. False: such words wait for the next update to agree (after the
    pause, or the utterance's end)."""
    show_tentative: bool = True
    """Show the words not yet committed as tentative text. A backend whose held words churn
    (Apertium re-translates the whole sentence: 23-29 % of shown held words were taken back
    on the shared sentences) shows only committed words (docs/benchmarks.md)."""
    beam_size: int = 1
    min_segment_words: int = 3
    """A sentence end closes a segment only after this many words (keeps "Dr." attached)."""
    clause_min_words: int = 12
    max_segment_words: int = 40
    open_new_tokens: int = 8
    """An open segment's update decodes at most this many tokens after the committed target
    (0: up to the length cap). LocalAgreement commits only the head on which two updates
    agree, so the rest of a long continuation is work no one hears; the segment's close and
    the utterance's end still translate to the end. Bounds an update's cost and latency."""
