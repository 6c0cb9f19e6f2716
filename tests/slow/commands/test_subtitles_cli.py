"""``speechpipe translate --subtitles/--source-subtitles``: the real command on a bundled
recording (real models), its files read back by real parsers (``webvtt-py``, ``srt``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import soundfile as sf
import srt
import webvtt

from tests.helpers import OWN_SAMPLES, says_gato_in_english


def speechpipe(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "speechpipe", *args], capture_output=True,
                          text=True, timeout=600, cwd=cwd)


def seconds(stamp: str) -> float:
    h, m, s = stamp.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def words(text: str) -> list[str]:
    return text.split()


def test_translate_writes_vtt_and_srt_on_the_inputs_timeline(tmp_path: Path) -> None:
    clip = OWN_SAMPLES / "wav" / "es_gato.wav"
    duration = sf.info(str(clip)).duration
    result = speechpipe("translate", str(clip), "--out", "out.wav", "--source-lang", "es",
                        "--trace", "trace.jsonl", "--subtitles", "out.vtt",
                        "--source-subtitles", "source.srt", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "out.vtt" in result.stdout and "source.srt" in result.stdout
    records = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    committed = {"asr": "", "mt": ""}
    for r in records:  # the final committed text of each side, utterance after utterance
        if r["event"] in ("asr.commit", "mt.commit") and r["final"]:
            committed[r["event"][:-7]] += " " + r["committed"]

    vtt = webvtt.read(str(tmp_path / "out.vtt"))
    assert len(vtt) >= 1
    times = [(seconds(c.start), seconds(c.end)) for c in vtt]
    subs = list(srt.parse((tmp_path / "source.srt").read_text(encoding="utf-8")))
    assert len(subs) >= 1
    times_src = [(s.start.total_seconds(), s.end.total_seconds()) for s in subs]
    for spans in (times, times_src):
        for (a0, a1), (b0, b1) in zip(spans, spans[1:], strict=False):
            assert a0 < a1 <= b0 < b1  # times increase, cues never overlap
        assert spans[0][0] >= 0 and spans[-1][1] <= duration + 1e-3  # inside the audio
    assert words(" ".join(c.text for c in vtt)) == words(committed["mt"])
    assert words(" ".join(s.content for s in subs)) == words(committed["asr"])
    assert "gato" in committed["asr"].lower() and says_gato_in_english(committed["mt"])
    speech_start = min(r["audio_t"] for r in records if r["event"] == "vad.start")
    assert times[0][0] >= speech_start  # the translation starts no earlier than the speech
