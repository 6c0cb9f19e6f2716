"""When the TTS stage speaks faster (``--set catch_up.*``): a leaf module, so the options
tree (``speechpipe.config``) imports it without the stage, numpy or asyncio."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CatchUpOptions"]


@dataclass(frozen=True, slots=True)
class CatchUpOptions:
    """Speak faster when the translated speech lags the speaker, as interpreters do
    (``--set catch_up.*``; docs/design.md).

    ``span`` (the default): the rate follows the ear-voice span of the phrase about to be
    synthesized: from when the listener will hear it (``max(now, queued_until)``) back to when
    the speaker said its words. 1.0 up to ``span_s``, rising linearly to ``max_speed`` at
    ``span_s + ramp_s``; the rest of an utterance after its final hypothesis (the speaker has
    stopped) is spoken at least at ``finish_speed``, so the translation ends soon after the
    speaker. Rates are rounded to multiples of ``speed_step`` (the phrase cache keys on the
    rate; 0: not rounded). ``source_time`` is where the words were said: ``words`` places them
    in the hypothesis' audio span by their position in its text, ``end`` takes the span's end
    (an upper bound: the shortest span).

    ``backlog`` (the rule before issue 20): ``backlog`` is how far the end of the speech
    already queued lies ahead of the stream position now; each ``backlog_s`` step reached
    sets the speaking rate to its ``speeds`` entry."""

    mode: str = "span"  # or "backlog"
    backlog_s: tuple[float, ...] = (1.0, 2.0)
    speeds: tuple[float, ...] = (1.15, 1.3)
    span_s: float = 1.5
    ramp_s: float = 2.0
    max_speed: float = 1.35
    finish_speed: float = 1.3
    speed_step: float = 0.05
    source_time: str = "words"  # or "end"
    # a hypothesis with nothing tentative left (a pause decode committed everything heard)
    # counts as finishing: the speaker has said nothing more yet, so the rest is spoken at
    # the finish rate without waiting for the final, which comes only after the VAD's
    # hangover (False: only the final hypothesis)
    finish_when_caught_up: bool = True

    def __post_init__(self) -> None:
        if self.mode not in ("span", "backlog"):
            raise ValueError(f"catch_up.mode must be span or backlog, not {self.mode!r}")
        if self.source_time not in ("words", "end"):
            raise ValueError(
                f"catch_up.source_time must be words or end, not {self.source_time!r}")
