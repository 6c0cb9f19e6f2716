"""The punctuation held at an utterance window's edge (docs/design.md, "Nothing at a window's
edge is final"; issue 45): a sentence end is held back from a commit until the next committed
words or the utterance's end confirm it, and a translation's sentence end is committed only
where the captions heard one.

``UtteranceEdge`` is a part of ``stages.utterance.UtteranceDecoder`` (its state lives in the
decoder's fields, declared below for the type checker).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from speechpipe.stages.agreement import normalize_word
from speechpipe.stages.asr_options import AsrOptions
from speechpipe.stages.commit import SENTENCE_END_MARKS, CommitPolicy, sentence_end_count
from speechpipe.stages.model_api import DecodeKind

__all__ = ["UtteranceEdge"]

_I_FORMS = frozenset(("i", "i'm", "i'll", "i've", "i'd"))


def _starts_sentence(word: str) -> bool:
    """A capitalized word (not "I"): what may follow a sentence end."""
    bare = word.lstrip("\"'“‘«¿¡(")
    return bool(bare) and bare[0].isupper() and bare.casefold().rstrip(".,;:!?") not in _I_FORMS


class UtteranceEdge:
    """The punctuation after each side's committed words (``UtteranceDecoder``'s)."""

    options: AsrOptions
    edge: dict[str, str]
    source: CommitPolicy
    target: CommitPolicy
    source_context: str
    target_context: str

    if TYPE_CHECKING:
        def text(self, side: str) -> str: ...  # ``UtteranceDecoder.text``

    def _glue_held_edge(self, side: str) -> None:
        """Commit the punctuation held as ``side``'s edge (a translation's sentence end only
        where the captions heard one) before the window moves on."""
        fragment = self.edge.pop(side, "")
        if fragment and not normalize_word(fragment) and (
                side == "source" or self._end_rests_on_captions(fragment)):
            self._glue(side, fragment)

    def _set_edge(self, side: str, policy: CommitPolicy, glued: str) -> None:
        """The newest decode's view of the punctuation after the committed words replaces the
        held one; a decode of an empty window (nothing forced, so nothing glued) keeps it."""
        if policy.committed or glued:
            self.edge[side] = glued

    def _glue_edge(self, side: str, policy: CommitPolicy, new: int,
                   following: list[str]) -> None:
        """Commit the edge's punctuation before the ``new`` last committed words (0: at the
        end): the words after it, or the utterance's end, confirm it. Where the word before
        lies in the context, it is glued there when the following word starts a sentence."""
        fragment = self.edge.pop(side, "")
        if not fragment or normalize_word(fragment):
            return
        if side == "target" and not self._end_rests_on_captions(fragment):
            return  # not a sentence end the captions heard: the phrase goes on without it
        if policy.glue_before(fragment, new):
            return
        if policy.committed[: len(policy.committed) - new] or (
                following and not _starts_sentence(following[0])):
            return
        if side == "source" and self.source_context:
            self.source_context += fragment
        elif side == "target" and self.target_context:
            self.target_context += fragment

    def _end_rests_on_captions(self, fragment: str) -> bool:
        """May the translation's held ``fragment`` be committed? Punctuation that ends no
        sentence may; a sentence end only while the committed captions end more sentences
        than the committed translation (``asr.ends_rest_on_captions``): Whisper ends a
        translation window with a full stop because the audio ends there, and the captions
        of the same audio, held to the same rule, say whether the speaker ended one."""
        captions = self.text("source")
        if not (self.options.ends_rest_on_captions and captions) or not any(
                mark in fragment for mark in SENTENCE_END_MARKS):
            return True  # no captions to rest on (not decoded, or none committed yet)
        return sentence_end_count(captions) > sentence_end_count(self.text("target"))

    def _hold_end(self, side: str, policy: CommitPolicy, kind: DecodeKind) -> None:
        """Before anything is published: a sentence end on the last committed word is held
        unless the utterance ended (``asr.hold_sentence_end``)."""
        if kind != DecodeKind.FINAL and self.options.hold_sentence_end:
            held = policy.hold_sentence_end()
            if held:
                self.edge[side] = held

    def _glue(self, side: str, fragment: str) -> None:
        """Punctuation right after the committed text: on the window's last committed word,
        or on the context's when the window has none yet (still append-only as a string)."""
        policy = self.source if side == "source" else self.target
        if policy.glue(fragment) or policy.committed or normalize_word(fragment):
            return
        if side == "source" and self.source_context:
            self.source_context += fragment
        elif side == "target" and self.target_context:
            self.target_context += fragment
