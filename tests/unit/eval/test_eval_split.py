"""``speechpipe eval --split tune|report`` and ``--lang``: the fixed split of the shared clips by
recording source (speechpipe.evaluation.split)."""

from __future__ import annotations

import argparse

from speechpipe.evaluation.evaluate import select_clips
from speechpipe.evaluation.split import corpus_of, split_of


def _args(**kwargs: object) -> argparse.Namespace:
    return argparse.Namespace(**{"all": True, "category": None, "limit": None, "lang": None,
                                 "split": None, **kwargs})


def test_a_clip_s_recording_source_is_its_corpus() -> None:
    assert corpus_of("es_enh_11375_cv") == "cv"
    assert corpus_of("fr_nast_19778580") == "nast"
    assert corpus_of("en_jfk") == "jfk"
    assert corpus_of("es_fisher_3481") == "fisher"


def test_corpora_go_whole_to_one_half_and_calls_by_parity() -> None:
    assert split_of({"id": "es_enh_11375_cv"}) == split_of({"id": "es_enh_2692_cv"}) == "tune"
    assert split_of({"id": "fr_nast_19778580"}) == "report"
    assert split_of({"id": "es_fisher_3481"}) == "tune"  # odd call number
    assert split_of({"id": "es_fisher_1328"}) == "report"
    assert split_of({"id": "en_enh_476_epst"}) == "report"
    assert split_of({"id": "xx_unknown_1"}) == "report"  # the tuning half never grows silently


def test_eval_selects_a_half_and_languages() -> None:
    clips = [{"id": "es_enh_11375_cv", "lang": "es"}, {"id": "fr_nast_19778580", "lang": "fr"},
             {"id": "fr_comspeech_1966", "lang": "fr"}, {"id": "en_jfk", "lang": "en"}]
    ids = [c["id"] for c in select_clips(clips, _args(split="tune"), "de")]
    assert ids == ["es_enh_11375_cv", "fr_comspeech_1966"]
    ids = [c["id"] for c in select_clips(clips, _args(split="report", lang=["fr"]), "de")]
    assert ids == ["fr_nast_19778580"]
