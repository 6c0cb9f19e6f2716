"""TranslationMemory: exact-match bounded LRU of committed source segment -> target."""

from __future__ import annotations

import pytest

from speechpipe.stages.translation_memory import TranslationMemory, normalize_segment


def test_hit_and_miss_are_counted() -> None:
    memory = TranslationMemory()
    assert memory.get("m", "en", "fr", "Thank you.") is None
    memory.put("m", "en", "fr", "Thank you.", "Merci.")
    assert memory.get("m", "en", "fr", "Thank you.") == "Merci."
    assert (memory.hits, memory.misses) == (1, 1)


def test_speculative_lookup_counts_no_miss() -> None:
    memory = TranslationMemory()
    assert memory.get("m", "en", "fr", "Thank", count_miss=False) is None
    assert memory.misses == 0


def test_keys_separate_models_and_language_pairs() -> None:
    memory = TranslationMemory()
    memory.put("opus", "en", "fr", "Yes.", "Oui.")
    assert memory.get("nllb", "en", "fr", "Yes.") is None
    assert memory.get("opus", "en", "de", "Yes.") is None
    assert memory.get("opus", "es", "fr", "Yes.") is None
    assert memory.get("opus", "en", "fr", "Yes.") == "Oui."


def test_normalization_is_whitespace_and_nfkc_only() -> None:
    memory = TranslationMemory()
    memory.put("m", "en", "fr", "  Thank\tyou  very much. ", "Merci beaucoup.")
    assert memory.get("m", "en", "fr", "Thank you very much.") == "Merci beaucoup."
    assert memory.get("m", "en", "fr", "Ｔhank you very much.") == "Merci beaucoup."  # NFKC
    # Case and punctuation change translations, so they are part of the key.
    assert memory.get("m", "en", "fr", "thank you very much.") is None
    assert memory.get("m", "en", "fr", "Thank you very much?") is None
    assert normalize_segment(" a \n b ") == "a b"


def test_bounded_lru_evicts_least_recently_used() -> None:
    memory = TranslationMemory(max_entries=2)
    memory.put("m", "en", "fr", "one", "un")
    memory.put("m", "en", "fr", "two", "deux")
    assert memory.get("m", "en", "fr", "one") == "un"  # now "two" is the oldest
    memory.put("m", "en", "fr", "three", "trois")
    assert len(memory) == 2
    assert memory.evictions == 1
    assert memory.get("m", "en", "fr", "two") is None
    assert memory.get("m", "en", "fr", "one") == "un"
    assert memory.get("m", "en", "fr", "three") == "trois"


def test_empty_and_overlong_segments_are_not_kept() -> None:
    memory = TranslationMemory(max_chars=10)
    memory.put("m", "en", "fr", "   ", "x")
    memory.put("m", "en", "fr", "ok", "  ")
    memory.put("m", "en", "fr", "a" * 11, "b")
    assert len(memory) == 0


def test_put_overwrites_and_clear_empties() -> None:
    memory = TranslationMemory()
    memory.put("m", "en", "fr", "Hi.", "Salut.")
    memory.put("m", "en", "fr", "Hi.", "Bonjour.")
    assert len(memory) == 1
    assert memory.get("m", "en", "fr", "Hi.") == "Bonjour."
    memory.clear()
    assert len(memory) == 0


def test_rejects_zero_capacity() -> None:
    with pytest.raises(ValueError):
        TranslationMemory(max_entries=0)
