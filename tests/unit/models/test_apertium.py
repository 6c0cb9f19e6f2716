"""The Apertium text-MT backend (speechpipe.models.mt.apertium): the pure parts (the real
stage chains: the slow tier)."""

from __future__ import annotations

from pathlib import Path

import pytest

from speechpipe.models.mt.apertium import (
    continuation_after,
    escape,
    install_hint,
    installed_pairs,
    stage_commands,
    unescape,
)


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
