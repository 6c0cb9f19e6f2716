"""Music and tones with no speech, synthesized with numpy (deterministic, 16 kHz int16).

Used by the faithfulness tests (nothing spoken may come out of music) and to measure how
often the VAD takes music for speech:

    .venv/bin/python tests/synth_music.py     # webrtcvad and Silero voiced share per clip
    .venv/bin/python tests/synth_music.py --translate [--pace fast] [--set GROUP.FIELD=V]
        # what the pipeline commits on each clip (20 s, source fr and auto)

Levels are speech-like: every clip is normalized to an RMS of -20 dBFS (a close-talk voice
in the shared recordings sits between -26 and -16 dBFS).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["MUSIC_KINDS", "synthesize", "RATE"]

RATE = 16_000
RMS_DBFS = -20.0


def _t(seconds: float) -> NDArray[np.float64]:
    return np.arange(int(seconds * RATE)) / RATE


def _note(freq: float, seconds: float, harmonics: int = 6, decay: float = 2.5) -> NDArray:
    """A piano-like note: decaying harmonics with a short attack."""
    t = _t(seconds)
    wave = sum(np.sin(2 * np.pi * freq * k * t) / k**1.3 for k in range(1, harmonics + 1))
    envelope = np.minimum(1.0, t / 0.01) * np.exp(-decay * t)
    return wave * envelope


def _chords(seconds: float, rng: np.random.Generator) -> NDArray:
    """I-V-vi-IV in C, one chord a second, with a bass note."""
    progression = [(261.6, 329.6, 392.0), (196.0, 246.9, 293.7), (220.0, 261.6, 329.6),
                   (174.6, 220.0, 261.6)]
    out = np.zeros(int(seconds * RATE))
    for i in range(int(seconds)):
        chord = progression[i % len(progression)]
        start = i * RATE
        piece = sum(_note(f, 1.0) for f in chord) + 0.8 * _note(chord[0] / 2, 1.0, 3, 1.5)
        out[start : start + len(piece)] += piece[: len(out) - start]
    return out


def _drums(seconds: float, rng: np.random.Generator) -> NDArray:
    """Kick on 1 and 3, snare on 2 and 4, eighth-note hi-hats, 120 bpm."""
    out = np.zeros(int(seconds * RATE))
    beat = RATE // 2
    t = _t(0.25)
    kick = np.sin(2 * np.pi * (50 + 100 * np.exp(-t * 30)) * t) * np.exp(-t * 12)
    snare = (rng.standard_normal(len(t)) * 0.6 + np.sin(2 * np.pi * 200 * t)) * np.exp(-t * 20)
    hat_noise = np.diff(rng.standard_normal(int(0.05 * RATE) + 1))  # crude high-pass
    hat = hat_noise * np.exp(-_t(0.05) * 80) * 0.3
    for i in range(0, len(out), beat):
        hit = kick if (i // beat) % 2 == 0 else snare
        out[i : i + len(hit)] += hit[: len(out) - i]
        for j in (i, i + beat // 2):
            out[j : j + len(hat)] += hat[: max(0, len(out) - j)]
    return out


def _noise_bed(seconds: float, rng: np.random.Generator) -> NDArray:
    """Pink-ish noise (white noise through a 1/f-shaped spectrum), like a crowd or a hiss."""
    n = int(seconds * RATE)
    spectrum = np.fft.rfft(rng.standard_normal(n))
    freqs = np.fft.rfftfreq(n, 1 / RATE)
    spectrum /= np.sqrt(np.maximum(freqs, 20.0))
    return np.fft.irfft(spectrum, n)


def _melody(seconds: float, rng: np.random.Generator) -> NDArray:
    """A sung-like lead (vibrato, voice-range pitches) over chords and drums: the hardest
    case for a VAD, which keys on voice-band periodicity."""
    scale = [261.6, 293.7, 329.6, 349.2, 392.0, 440.0, 493.9, 523.3]
    out = np.zeros(int(seconds * RATE))
    note_s = 0.5
    for i in range(int(seconds / note_s)):
        freq = scale[int(rng.integers(len(scale)))]
        t = _t(note_s)
        vibrato = 1 + 0.01 * np.sin(2 * np.pi * 5.5 * t)
        phase = 2 * np.pi * np.cumsum(freq * vibrato) / RATE
        voice = sum(np.sin(k * phase) / k for k in range(1, 8))
        envelope = np.minimum(1.0, t / 0.03) * np.minimum(1.0, (note_s - t) / 0.05)
        start = int(i * note_s * RATE)
        out[start : start + len(t)] += voice * envelope
    return out + 0.5 * _chords(seconds, rng) / 3 + 0.5 * _drums(seconds, rng)


def _tones(seconds: float, rng: np.random.Generator) -> NDArray:
    """A steady 440 Hz tone, then beeps at 1 kHz (a test signal, a phone line)."""
    t = _t(seconds)
    steady = np.sin(2 * np.pi * 440 * t)
    beeps = np.sin(2 * np.pi * 1000 * t) * ((t % 1.0) < 0.5)
    return np.where(t < seconds / 2, steady, beeps)


def _band(seconds: float, rng: np.random.Generator) -> NDArray:
    """Chords, drums and a noise bed together (a radio jingle)."""
    return (_chords(seconds, rng) / 3 + _drums(seconds, rng)
            + 0.3 * _noise_bed(seconds, rng) / 1e-2)


MUSIC_KINDS = {
    "chords": _chords, "drums": _drums, "noise_bed": _noise_bed, "melody": _melody,
    "tones": _tones, "band": _band,
}


def synthesize(kind: str, seconds: float = 12.0, seed: int = 0) -> NDArray[np.int16]:
    """``kind`` (one of ``MUSIC_KINDS``) at -20 dBFS RMS, 16 kHz mono int16."""
    rng = np.random.default_rng(seed)
    wave = MUSIC_KINDS[kind](seconds, rng)
    wave = wave / (np.sqrt(np.mean(wave**2)) + 1e-12) * 10 ** (RMS_DBFS / 20)
    return (np.clip(wave, -1.0, 1.0) * 32767).astype(np.int16)


def _vad_report() -> None:
    import webrtcvad

    from speechpipe.stages.faithfulness import SPEECH_WINDOW, SileroSpeech

    silero = SileroSpeech()
    frame = RATE // 50
    print(f"{'kind':<10}" + "".join(f"{'webrtc ' + str(m):>10}" for m in range(4))
          + f"{'silero':>10}")
    for kind in MUSIC_KINDS:
        audio = synthesize(kind, 30.0)
        shares = []
        for mode in range(4):
            vad = webrtcvad.Vad(mode)
            frames = [audio[i : i + frame] for i in range(0, len(audio) - frame + 1, frame)]
            voiced = sum(vad.is_speech(f.tobytes(), RATE) for f in frames)
            shares.append(voiced / len(frames))
        usable = len(audio) // SPEECH_WINDOW * SPEECH_WINDOW
        probabilities, _ = silero(audio[:usable].astype(np.float32) / 32768.0, None)
        shares.append(float(np.mean(probabilities >= 0.5)))
        print(f"{kind:<10}" + "".join(f"{s * 100:>9.0f}%" for s in shares))


def _translate_report(pace: str, overrides: list[str]) -> None:
    import asyncio

    from speechpipe.config import PipelineOptions, with_overrides
    from speechpipe.file_translation import translate_audio
    from speechpipe.session import Pipeline
    from speechpipe.stages.request import SessionRequest

    pipeline = Pipeline.load(with_overrides(PipelineOptions(), overrides))
    try:
        pipeline.warm_up()
        for lang in ("fr", "auto"):
            for kind in MUSIC_KINDS:
                run = asyncio.run(translate_audio(pipeline, synthesize(kind, 20.0),
                                                  SessionRequest(source_lang=lang, pace=pace)))
                chunks = sum(r["event"] == "tts.audio" for r in run.records)
                print(f"{lang:<5}{kind:<10} source {len(run.source_text.split()):>3} words, "
                      f"English {len(run.target_text.split()):>3} words, {chunks} speech chunks: "
                      f"{run.target_text[:60]!r}", flush=True)
    finally:
        pipeline.close()


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--translate", action="store_true")
    parser.add_argument("--pace", choices=("fast", "realtime"), default="fast")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    if args.translate:
        _translate_report(args.pace, args.overrides)
    else:
        _vad_report()
