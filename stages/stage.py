"""What a stage is: the one contract every stage of a session keeps.

A stage is an object with ``run(inbox, outbox, events)``: it reads ``inbox`` until that is
closed and drained, writes what it makes to ``outbox``, puts what the client is to see
outside the chain (errors, the ASR's captions and trace, a text MT's translations) on
``events``, and closes ``outbox`` when it is done, so closing a session's input drains the
whole chain in order. The last stage's outbox is the events channel itself (the TTS stage's
speech is events), so the chain's end closes it.

``speechpipe.pipeline_build`` names the stages and their channels; the session only starts
them (``speechpipe.session``). A stage that writes no events takes the channel and leaves it
alone; one that is run alone (tests) may be given none.
"""

from __future__ import annotations

from typing import Any, Protocol

from speechpipe.stages.channels import Channel
from speechpipe.stages.frames import OutputEvent

__all__ = ["Stage"]


class Stage(Protocol):
    """One stage of a session's pipeline (see the module)."""

    async def run(self, inbox: Channel[Any], outbox: Channel[Any],
                  events: Channel[OutputEvent]) -> None:
        """Read ``inbox`` to its end; write ``outbox`` and ``events``; close ``outbox``."""
        ...
