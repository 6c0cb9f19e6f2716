"""Decoders restricted to the tokens of the languages at hand (``models/whisper/vocab.py``):
the kept set is cached as a small file and no weights are copied (a fresh process)."""

from __future__ import annotations

import json

import numpy as np

from speechpipe.models.whisper.vocab import (
    restricted_vocabulary,
)
from speechpipe.models.whisper.weights import resolve_whisper_model


def test_the_kept_set_is_cached_as_a_small_file_and_no_weights_are_copied(tmp_path):
    full = resolve_whisper_model()
    vocabulary = restricted_vocabulary(full, ["es", "en"], 500, tmp_path)
    (cached,) = tmp_path.iterdir()
    assert cached.suffix == ".json" and cached.stat().st_size < 1 << 20  # not a ~120 MB model
    assert json.loads(cached.read_text()) == [int(i) for i in vocabulary.kept]
    written = cached.stat().st_mtime_ns
    again = restricted_vocabulary(full, ["en", "es"], 500, tmp_path)  # same set: the cache
    assert cached.stat().st_mtime_ns == written and list(tmp_path.iterdir()) == [cached]
    assert np.array_equal(again.kept, vocabulary.kept)
    cached.write_text("{not json")  # a torn file is computed again
    assert np.array_equal(restricted_vocabulary(full, ["es", "en"], 500, tmp_path).kept,
                          vocabulary.kept)
