import pytest

from speechpipe.stages.cache import LruCache
from speechpipe.stages.phrases import PhraseOptions, PhraseSegmenter


def test_first_phrase_is_short_and_later_ones_longer():
    seg = PhraseSegmenter(PhraseOptions(first_words=3, max_words=5))
    assert seg.feed("the") == []
    assert seg.feed("the little prince decided") == ["the little prince"]
    assert seg.feed("the little prince decided to leave his") == []
    assert seg.feed("the little prince decided to leave his planet and") == [
        "decided to leave his planet"
    ]


def test_clause_punctuation_cuts_early():
    seg = PhraseSegmenter(PhraseOptions(first_words=3, max_words=5))
    assert seg.feed("Yes, I") == ["Yes,"]
    assert seg.feed("Yes, I agree.") == ["I agree."]
    assert seg.feed("Yes, I agree. Then") == []


def test_final_flushes_the_rest_and_nothing_is_spoken_twice():
    seg = PhraseSegmenter(PhraseOptions(first_words=3, max_words=5))
    spoken = seg.feed("one two three four")
    spoken += seg.feed("one two three four five", final=True)
    assert " ".join(spoken) == "one two three four five"


def test_lru_cache_evicts_the_least_recently_used_and_counts():
    cache: LruCache[str, int] = LruCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1
    cache.put("c", 3)  # evicts b
    assert cache.get("b") is None
    assert (cache.hits, cache.misses) == (1, 1)
    assert "a" in cache and "c" in cache and len(cache) == 2
    with pytest.raises(ValueError):
        LruCache(0)
