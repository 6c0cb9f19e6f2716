"""The Apertium text-MT backend (speechpipe.models.mt.apertium) on the real stage chains
(Debian's apertium-eng-spa and apertium-fr-es, as .ci/run installs them), skipped with the
install line where they are absent."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from speechpipe.errors import LanguageError
from speechpipe.models.mt.apertium import (
    ApertiumTranslator,
    installed_pairs,
)
from speechpipe.models.mt.apertium_options import ApertiumOptions
from speechpipe.stages.model_api import TextMtRequest
from speechpipe.stages.text_mt import IncrementalTextTranslation
from speechpipe.stages.text_mt_options import TextMtOptions

INSTALLED = installed_pairs()
needs_pairs = pytest.mark.skipif(
    ("en", "es") not in INSTALLED or ("fr", "es") not in INSTALLED,
    reason="Apertium pairs not installed: apt install apertium apertium-eng-spa apertium-fr-es")


@needs_pairs
def test_real_pairs_translate_cased_punctuated_captions() -> None:
    en_es = ApertiumTranslator(INSTALLED[("en", "es")])
    fr_es = ApertiumTranslator(INSTALLED[("fr", "es")])
    try:
        assert "gato" in en_es.translate_text("The cat is in the house.").lower()
        # French apostrophes go in raw: "qu'il", "l'été" are translated, not left as they are
        spanish = fr_es.translate_text("Le chat dort dans la maison parce qu'il fait froid.")
        assert spanish.startswith("El gato duerme") and "qu'il" not in spanish
        assert en_es.translate_text("[brackets] <b> $5 @home") .count("\\") == 0
        with pytest.raises(LanguageError):
            en_es.check_languages("fr", "es")
    finally:
        en_es.close()
        fr_es.close()


@needs_pairs
async def test_sessions_share_one_chain_and_one_queue() -> None:
    translator = ApertiumTranslator(INSTALLED[("en", "es")])
    try:
        texts = [f"The {n} dogs sleep." for n in ("two", "three", "four", "five")] * 5
        results = await asyncio.gather(*(translator.translate(TextMtRequest(t, "en", "es"))
                                         for t in texts))
        assert [r.text for r in results[:4]] == [r.text for r in results[4:8]]
        assert all("perros" in r.text for r in results)
        assert translator.process.starts == 1 and translator.calls == len(texts)
    finally:
        translator.close()


@needs_pairs
async def test_a_killed_chain_is_started_again_and_the_text_retried() -> None:
    translator = ApertiumTranslator(INSTALLED[("en", "es")])
    try:
        translator.warm_up()
        os.killpg(translator.process.pids[0], signal.SIGKILL)
        began = time.monotonic()
        result = await translator.translate(TextMtRequest("The house is big.", "en", "es"))
        assert "casa" in result.text
        assert time.monotonic() - began < 2.0 and translator.restarts == 1
    finally:
        translator.close()


@needs_pairs
async def test_a_hung_chain_is_killed_at_its_deadline() -> None:
    translator = ApertiumTranslator(INSTALLED[("en", "es")], ApertiumOptions(deadline_s=0.5))
    try:
        translator.warm_up()
        stuck = translator.process.pids[3]
        os.kill(stuck, signal.SIGSTOP)  # a stage that never answers
        began = time.monotonic()
        result = await translator.translate(TextMtRequest("The house is big.", "en", "es"))
        assert "casa" in result.text and translator.restarts == 1
        assert time.monotonic() - began < 0.5 + 1.0
        assert not translator.process.running or stuck not in translator.process.pids
    finally:
        translator.close()


@needs_pairs
async def test_the_policy_holds_the_last_words_and_shows_only_committed() -> None:
    translator = ApertiumTranslator(INSTALLED[("en", "es")])
    try:
        policy = IncrementalTextTranslation(
            "en", "es", options=translator.policy(TextMtOptions()))
        words = "My sister lives in a small house near the river with her two dogs".split()
        for n in range(1, len(words)):
            requests = policy.update(" ".join(words[:n]))
            update = policy.apply([await translator.translate(r) for r in requests])
            assert update.tentative == ""  # held words are not shown
        committed_before_end = len(policy.committed.split())
        whole = translator.translate_text(" ".join(words))
        assert 0 < committed_before_end <= len(whole.split()) - translator.options.hold_words
        requests = policy.update(" ".join(words), final=True)
        policy.apply([await translator.translate(r) for r in requests])
        assert policy.final and policy.committed.split()[-2:] == whole.split()[-2:]
    finally:
        translator.close()
