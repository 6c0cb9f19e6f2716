"""File replay with a bring-your-own CTranslate2 MT model (issue 4).

No real MT model ships in any registry here, so the test builds a tiny NLLB-style model with
random weights (speechpipe/bench/tiny_mt.py): the words mean nothing; the mechanics must
hold — Whisper captions feed the text-MT stage, committed target text is spoken, the file
gets audio."""

from __future__ import annotations

import numpy as np
import soundfile as sf

from speechpipe.bench.tiny_mt import build_tiny_mt
from speechpipe.cli import main
from speechpipe.evaluation.trace import read_trace
from tests.helpers import OWN_SAMPLES


def test_translate_with_a_ct2_model_produces_audio(tmp_path):
    model = build_tiny_mt(tmp_path / "tiny-nllb", "nllb")
    clip = OWN_SAMPLES / "wav" / "es_gato.wav"
    out, trace = tmp_path / "out.wav", tmp_path / "trace.jsonl"
    code = main(["translate", str(clip), "--out", str(out), "--trace", str(trace),
                 "--pace", "fast", "--source-lang", "es", "--target-lang", "en",
                 "--mt", f"ct2:{model}"])
    assert code == 0
    records = read_trace(trace)
    source_commits = [r for r in records if r["event"] == "asr.commit" and r["committed"]]
    target = [r for r in records if r["event"].startswith("mt.")]
    assert source_commits, "Whisper captions should arrive"
    assert target and target[-1]["final"]
    for before, after in zip(target, target[1:], strict=False):
        if before["utterance"] == after["utterance"]:
            assert after["committed"].startswith(before["committed"])  # never retracted
    if target[-1]["committed"].strip():
        data, _ = sf.read(out, dtype="int16")
        assert np.abs(data).max() > 0
        assert any(r["event"] == "tts.audio" for r in records)


def test_ct2_with_an_unsupported_pair_is_one_clear_error(tmp_path, capsys):
    model = build_tiny_mt(tmp_path / "tiny-nllb", "nllb")
    clip = OWN_SAMPLES / "wav" / "es_gato.wav"
    code = main(["translate", str(clip), "--out", str(tmp_path / "o.wav"), "--source-lang",
                 "ja", "--target-lang", "en", "--mt", f"ct2:{model}"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ja" in err[0]
