"""Translation memory: committed source segments we have translated before -> their target.

Live speech repeats itself ("thank you", "yes, exactly", a speaker's catchphrase); a phrase
table lookup is free where MT costs tens of milliseconds. Matching is exact on a lightly
normalised source (Unicode NFKC, whitespace collapsed); case and punctuation are kept because
they change translations ("Yes." vs "Yes?"). Keys include the model and the language pair.

Bounded LRU; ``hits``/``misses``/``evictions`` are plain counters that the app layer exports
as metrics. One memory may be shared by all sessions on an event loop; a lock makes it safe to
share across threads as well.
"""

from __future__ import annotations

import threading
import unicodedata
from collections import OrderedDict

__all__ = ["TranslationMemory", "normalize_segment"]

MemoryKey = tuple[str, str, str, str]


def normalize_segment(text: str) -> str:
    """A source segment as the memory keys it."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


class TranslationMemory:
    """Exact-match, bounded LRU cache of source segment -> target text."""

    def __init__(self, max_entries: int = 4096, *, max_chars: int = 500) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        self.max_entries = max_entries
        self.max_chars = max_chars
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self._entries: OrderedDict[MemoryKey, str] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def key(model_id: str, source_lang: str, target_lang: str, source: str) -> MemoryKey:
        """The memory key: model, language pair and normalized source segment."""
        return (model_id, source_lang, target_lang, normalize_segment(source))

    def get(
        self,
        model_id: str,
        source_lang: str,
        target_lang: str,
        source: str,
        *,
        count_miss: bool = True,
    ) -> str | None:
        """The remembered target, counting a hit (or a miss, unless ``count_miss=False``:
        for speculative lookups whose miss is counted later)."""
        key = self.key(model_id, source_lang, target_lang, source)
        with self._lock:
            target = self._entries.get(key)
            if target is None:
                if count_miss:
                    self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return target

    def put(
        self, model_id: str, source_lang: str, target_lang: str, source: str, target: str
    ) -> None:
        """Remember a finished segment; empty or overlong segments are not kept."""
        key = self.key(model_id, source_lang, target_lang, source)
        if not key[3] or not target.strip() or len(key[3]) > self.max_chars:
            return
        with self._lock:
            self._entries[key] = target
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
                self.evictions += 1

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()
