"""The Apertium text-MT backend (speechpipe.models.mt.apertium): the pure parts here in the fast
tier; the real stage chains (Debian's apertium-eng-spa and apertium-fr-es, as .ci/run installs
them) in the slow tier, skipped with the install line where they are absent."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from speechpipe.errors import LanguageError
from speechpipe.models.mt.apertium import (
    ApertiumTranslator,
    continuation_after,
    escape,
    install_hint,
    installed_pairs,
    stage_commands,
    unescape,
)
from speechpipe.models.mt.apertium_options import ApertiumOptions
from speechpipe.stages.model_api import TextMtRequest
from speechpipe.stages.text_mt import IncrementalTextTranslation
from speechpipe.stages.text_mt_options import TextMtOptions

INSTALLED = installed_pairs()
needs_pairs = pytest.mark.skipif(
    ("en", "es") not in INSTALLED or ("fr", "es") not in INSTALLED,
    reason="Apertium pairs not installed: apt install apertium apertium-eng-spa apertium-fr-es")


def test_reserved_characters_are_escaped_and_restored() -> None:
    text = "a [b] {c} ^d$ @e \\f /g <h>"
    escaped = escape(text)
    assert all(f"\\{ch}" in escaped for ch in "[]{}^$@\\/<>")
    assert unescape(escaped + ".[][\n]") == text
    assert escape("one\x00two\nthree") == "one two three"  # no NUL reaches the chain


def test_continuation_after_a_prefix_the_translation_keeps() -> None:
    assert continuation_after("El gato duerme", "El gato duerme en la casa.") == "en la casa."
    assert continuation_after("", "Hola mundo") == "Hola mundo"
    assert continuation_after("el GATO,", "El gato duerme") == "duerme"


def test_continuation_after_a_revised_word_is_not_said_twice() -> None:
    # "sueños" (the first translation of "sleeps") was committed; the sentence now says
    # "duerme": the continuation starts after the revised word, nothing is repeated
    said = continuation_after("Los sueños de gato en la", "El gato duerme en la casa porque")
    assert said == "casa porque"
    assert continuation_after("a b c d", "a b") == ""


def test_stage_commands_put_every_stage_in_null_flush_mode(tmp_path: Path) -> None:
    mode = tmp_path / "xx-yy.mode"
    mode.write_text("lt-proc '/d/xx.automorf.bin' | apertium-tagger -g $2 '/d/xx.prob' | "
                    "lt-proc $1 '/d/gen.bin'\n")
    assert stage_commands(mode) == [
        ["lt-proc", "-z", "/d/xx.automorf.bin"],
        ["apertium-tagger", "-z", "-g", "/d/xx.prob"],
        ["lt-proc", "-z", "-n", "/d/gen.bin"],
    ]


def test_installed_pairs_read_mode_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("eng-spa", "fr-es", "es-pt_BR", "eco-es-fr", "spa-eng"):
        (tmp_path / f"{name}.mode").write_text("lt-proc x\n")
    monkeypatch.setattr("shutil.which", lambda name: "/usr/bin/" + name)
    pairs = installed_pairs(tmp_path)
    assert sorted(pairs) == [("en", "es"), ("es", "en"), ("fr", "es")]
    assert pairs[("en", "es")].name == "apertium:eng-spa"
    assert pairs[("en", "es")].package == "apertium-eng-spa"
    assert installed_pairs(tmp_path / "missing") == {}


def test_install_hint_names_the_debian_package() -> None:
    assert install_hint("en", "es") == "apt install apertium apertium-eng-spa"
    assert install_hint("fr", "es") == "apt install apertium apertium-fr-es"
    assert install_hint("de", "es") is None  # Debian has no German pair


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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
