"""A room's captions while it lives: what ``GET /rooms/ID/captions.vtt?lang=xx`` returns.

``RoomCaptions`` (one per server) watches the events every room pipeline publishes (the hub
hands them over in ``RoomHub.publish``) and keeps, per feed (speaker, target language), a
``stages.cues.CueBuilder`` of at most ``max_utterances`` utterances: committed text only,
never tentative words. The store of a room is keyed weakly on its ``Room``: when the room ends
(its last member left, the registry forgets it) its captions go with it.

Times are on the **room's clock** (seconds since the room was made), so the cues of several
speakers, and of pipelines that started late on the same speaker (a new listener language),
share one timeline: each feed's stream time is placed on that clock once, at its first event
(VAD's, right after the audio arrived). ``cues(room, lang)`` gives, per speaker, the
translation into ``lang`` where a pipeline makes one, else that speaker's own captions when
they are in ``lang``.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from speechpipe.stages.cues import Cue, CueBuilder
from speechpipe.stages.frames import STREAM_RATE, OutputEvent, TextHypothesis, VadEvent
from speechpipe.transport.room import FeedKey, Room
from speechpipe.transport.subtitle_files import format_vtt

__all__ = ["RoomCaptions", "DEFAULT_UTTERANCES"]

DEFAULT_UTTERANCES = 600  # per feed: about an hour of talk (utterances last 1-15 s)


@dataclass(eq=False)
class _FeedCaptions:
    builder: CueBuilder
    offset_s: float  # room clock - the feed's stream clock
    source_langs: set[str] = field(default_factory=set)


def _stream_s(event: OutputEvent) -> float | None:
    if isinstance(event, VadEvent):
        return event.detected_at / STREAM_RATE
    if isinstance(event, TextHypothesis):
        return event.stream_pts / STREAM_RATE
    return None


class RoomCaptions:
    """Every room's captions on one server (see the module docs). Pure bookkeeping: the hub
    calls ``observe`` on the event loop; ``clock`` is the hub's."""

    def __init__(self, max_utterances: int = DEFAULT_UTTERANCES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_utterances = max_utterances
        self.clock = clock
        self._rooms: weakref.WeakKeyDictionary[Room, dict[FeedKey, _FeedCaptions]] = (
            weakref.WeakKeyDictionary())

    @property
    def enabled(self) -> bool:
        return self.max_utterances > 0

    def observe(self, room: Room, key: FeedKey, event: OutputEvent) -> None:
        """One event a feed published (events other than VAD and text are ignored)."""
        if not self.enabled:
            return
        stream_s = _stream_s(event)
        if stream_s is None:
            return
        feeds = self._rooms.setdefault(room, {})
        feed = feeds.get(key)
        if feed is None:
            offset = max(0.0, self.clock() - room.created) - stream_s
            feed = feeds[key] = _FeedCaptions(
                CueBuilder(max_utterances=self.max_utterances), offset)
        feed.builder.add(event)
        if isinstance(event, TextHypothesis) and event.side == "source" and event.language:
            feed.source_langs.add(event.language.lower())

    def languages(self, room: Room) -> list[str]:
        """The languages this room has captions in."""
        found: set[str] = set()
        for (_, target), feed in self._rooms.get(room, {}).items():
            if feed.builder.languages("target"):
                found.add(target)
            found.update(feed.source_langs)
        return sorted(found)

    def cues(self, room: Room, lang: str) -> list[Cue]:
        """The room's captions in ``lang``, every speaker's, in time order."""
        lang = lang.strip().lower()
        feeds = self._rooms.get(room, {})
        cues: list[Cue] = []
        for speaker in dict.fromkeys(key[0] for key in feeds):
            own = feeds.get((speaker, lang))
            translated = own.builder.cues("target", offset_s=own.offset_s) if own else []
            if translated:
                cues.extend(translated)
                continue
            for (member, _), feed in feeds.items():  # its captions, from one of its feeds
                if member == speaker and lang in feed.source_langs:
                    cues.extend(c for c in feed.builder.cues("source", offset_s=feed.offset_s)
                                if c.language.lower() == lang)
                    break
        return sorted(cues, key=lambda c: (c.start, c.end))

    def vtt(self, room: Room, lang: str) -> str:
        """``cues`` as a WebVTT file."""
        return format_vtt(self.cues(room, lang))
