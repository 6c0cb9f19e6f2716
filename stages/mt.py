"""MT stage selection.

Two kinds of backend:
- **speech translation** (the embedded default): Whisper's ``translate`` task runs inside the
  ASR stage on the same encoder output as the captions (one encode, two decodes), so target
  hypotheses already arrive from the ASR; ``SpeechTranslationPassthrough`` forwards them.
- **text MT** (``stages.text_mt.TextMtStage``, CTranslate2 models a user brings): translates
  the committed source text incrementally.

Both read source/target ``TextHypothesis`` items and write target-side ones downstream.
"""

from __future__ import annotations

from speechpipe.stages.channels import Channel
from speechpipe.stages.frames import OutputEvent, TextHypothesis

__all__ = ["SpeechTranslationPassthrough"]


class SpeechTranslationPassthrough:
    """The MT stage for Whisper speech translation: hypotheses pass through unchanged."""

    async def run(self, inbox: Channel[TextHypothesis], outbox: Channel[TextHypothesis],
                  events: Channel[OutputEvent] | None = None) -> None:
        """Forward Whisper's translation hypotheses from ``source`` to ``target`` (the ASR
        put them on ``events`` already)."""
        try:
            async for hypothesis in inbox:
                await outbox.put(hypothesis)
        finally:
            outbox.close()
