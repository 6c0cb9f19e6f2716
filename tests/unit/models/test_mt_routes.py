"""``--mt auto``'s choice of route (speechpipe.models.mt.routes), from registry entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from speechpipe.errors import LanguageError
from speechpipe.models.mt.routes import MtRoute, choose_route, installed_pairs


@pytest.fixture
def entries(tmp_path: Path):
    def make(**models: tuple[list[str] | None, list[str] | None]) -> dict[str, dict]:
        out = {}
        for name, (sources, targets) in models.items():
            folder = tmp_path / name
            folder.mkdir(exist_ok=True)
            out[name] = {"path": str(folder), "source_langs": sources, "target_langs": targets}
        return out
    return make


def test_english_target_without_models_is_whisper(entries) -> None:
    assert choose_route("es", "en", entries()) == MtRoute("whisper")
    assert choose_route("auto", "en", entries()) == MtRoute("whisper")


def test_an_installed_pair_is_used_directly(entries) -> None:
    reg = entries(en_es=(["en"], ["es"]), es_en=(["es"], ["en"]))
    assert choose_route("en", "es", reg) == MtRoute("text", ("en_es",))
    assert choose_route("es", "en", reg) == MtRoute("text", ("es_en",))
    # auto source: a one-source pair cannot be trusted with a detected language
    assert choose_route("auto", "en", reg) == MtRoute("whisper")


def test_pivot_through_whisper_english(entries) -> None:
    reg = entries(en_es=(["en"], ["es"]))
    route = choose_route("fr", "es", reg)
    assert route == MtRoute("whisper+text", ("en_es",)) and route.whisper_translates
    # auto: an utterance detected as English is translated from its own captions
    assert choose_route("auto", "es", reg) == MtRoute("whisper+text", ("en_es",),
                                                      (("en", "en_es"),))


def test_two_text_pairs_beat_whisper_english(entries) -> None:
    reg = entries(en_es=(["en"], ["es"]), fr_en=(["fr"], ["en"]))
    route = choose_route("fr", "es", reg)
    assert route == MtRoute("text+text", ("fr_en", "en_es")) and not route.whisper_translates
    assert choose_route("de", "es", reg).kind == "whisper+text"


def test_the_most_specific_model_wins_and_multilingual_serves_auto(entries) -> None:
    four = ["de", "en", "es", "fr"]
    reg = entries(nllb=(four, four), en_es=(["en"], ["es"]))
    assert choose_route("en", "es", reg) == MtRoute("text", ("en_es",))
    assert choose_route("de", "fr", reg) == MtRoute("text", ("nllb",))
    assert choose_route("auto", "es", reg) == MtRoute("text", ("nllb",))


def test_a_missing_folder_is_not_a_route(entries, tmp_path: Path) -> None:
    reg = entries(en_es=(["en"], ["es"]))
    (tmp_path / "en_es").rmdir()
    with pytest.raises(LanguageError, match="models pull en-es"):
        choose_route("en", "es", reg)


@pytest.mark.parametrize(("target", "command"), [
    ("es", "speechpipe models pull en-es"), ("de", "speechpipe models pull en-de"),
    ("sw", "speechpipe models pull nllb-600m"),
])
def test_no_route_names_the_pull_command(entries, target: str, command: str) -> None:
    with pytest.raises(LanguageError) as info:
        choose_route("fr", target, entries(de_en=(["de"], ["en"])))
    message = str(info.value)
    assert command in message and "\n" not in message
    assert info.value.code == "unsupported_language"


def test_installed_pairs_by_target(entries) -> None:
    reg = entries(en_es=(["en"], ["es"]), multi=(None, ["es", "fr"]))
    assert installed_pairs(reg) == {"es": ["*", "en"], "fr": ["*"]}


APERTIUM = {("en", "es"): "apertium:eng-spa", ("es", "en"): "apertium:spa-eng",
            ("fr", "es"): "apertium:fr-es", ("es", "fr"): "apertium:es-fr"}


def test_apertium_direct_pair_never_through_english(entries) -> None:
    assert choose_route("fr", "es", entries(), APERTIUM) == MtRoute("text", ("apertium:fr-es",))
    assert choose_route("en", "es", entries(), APERTIUM) == MtRoute("text", ("apertium:eng-spa",))


def test_apertium_pivot_with_per_language_direct_pairs(entries) -> None:
    route = choose_route("de", "es", entries(), APERTIUM)
    assert route == MtRoute("whisper+text", ("apertium:eng-spa",))
    auto = choose_route("auto", "es", entries(), APERTIUM)
    assert auto.kind == "whisper+text" and auto.hops == ("apertium:eng-spa",)
    assert dict(auto.direct) == {"en": "apertium:eng-spa", "fr": "apertium:fr-es"}


def test_english_target_stays_whisper_with_apertium(entries) -> None:
    """The X -> English default does not change with Apertium installed (es-en exists)."""
    assert choose_route("es", "en", entries(), APERTIUM) == MtRoute("whisper")
    assert choose_route("auto", "en", entries(), APERTIUM) == MtRoute("whisper")


def test_a_neural_pair_beats_apertium(entries) -> None:
    reg = entries(en_es=(["en"], ["es"]))
    assert choose_route("en", "es", reg, APERTIUM) == MtRoute("text", ("en_es",))
    # a neural pivot: no Apertium direct pairs under its policy
    assert dict(choose_route("auto", "es", reg, APERTIUM).direct) == {"en": "en_es"}


def test_no_route_names_the_apt_package(entries) -> None:
    with pytest.raises(LanguageError) as info:
        choose_route("fr", "pt", entries(), {})
    message = str(info.value)
    assert "apt install apertium apertium-eng-spa" not in message
    with pytest.raises(LanguageError) as info:
        choose_route("en", "ca", entries(), {})
    assert "apt install apertium apertium-eng-cat" in str(info.value)
    assert "\n" not in str(info.value)
