"""File replay input and output without the models: streamed reading, frames, the writer."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import soundfile as sf
import soxr

from speechpipe.errors import AudioInputError, InputError
from speechpipe.stages.frames import FRAME_SAMPLES, STREAM_RATE
from speechpipe.transport.file_output import SpeechFileWriter
from speechpipe.transport.file_replay import (
    READ_BLOCK_S,
    frames_of,
    probe_audio,
    read_audio,
    stream_audio,
)


def test_streamed_resampling_matches_one_shot(tmp_path):
    rng = np.random.default_rng(3)
    rate = 44_100
    seconds = 3 * READ_BLOCK_S + 0.37  # several blocks and a ragged end
    audio = (rng.standard_normal((int(rate * seconds), 2)) * 0.1).astype(np.float32)
    sf.write(tmp_path / "a.wav", audio, rate, subtype="FLOAT")
    streamed = read_audio(tmp_path / "a.wav")
    one_shot = soxr.resample(audio.mean(axis=1), rate, STREAM_RATE, quality="HQ")
    one_shot = np.clip(np.round(one_shot * 32768.0), -32768, 32767).astype(np.int16)
    assert abs(len(streamed) - len(one_shot)) <= 1
    n = min(len(streamed), len(one_shot))
    assert np.max(np.abs(streamed[:n].astype(int) - one_shot[:n])) <= 2  # rounding only


def test_stream_rate_audio_is_passed_through_exactly(tmp_path):
    audio = np.random.default_rng(4).integers(-3000, 3000, 50_000).astype(np.int16)
    sf.write(tmp_path / "a.wav", audio, STREAM_RATE)
    assert np.array_equal(read_audio(tmp_path / "a.wav"), audio)


def test_reading_a_long_file_holds_one_block(tmp_path):
    """Ten minutes of 44.1 kHz stereo: reading it whole as float32 would allocate >200 MB;
    the stream holds a few blocks of audio at a time."""
    rate, seconds = 44_100, 600
    block = (np.random.default_rng(5).standard_normal((rate * 10, 2)) * 3000).astype(np.int16)
    with sf.SoundFile(tmp_path / "long.wav", "w", rate, 2, "PCM_16") as fh:
        for _ in range(seconds // 10):
            fh.write(block)
    held = 0  # the most audio (numpy's memory) alive at once, read after each block
    tracemalloc.start()
    try:
        total = 0
        for piece in stream_audio(tmp_path / "long.wav"):
            total += len(piece)
            audio = tracemalloc.take_snapshot().filter_traces(
                [tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)])
            held = max(held, sum(trace.size for trace in audio.traces))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert abs(total - seconds * STREAM_RATE) <= 1
    whole = rate * seconds * 2 * 4
    print(f"audio held {held / 1e6:.1f} MB, peak traced memory {peak / 1e6:.1f} MB for "
          f"{seconds} s (float32 stereo whole: {whole / 1e6:.0f} MB)")
    assert held < 8 * READ_BLOCK_S * rate * 2 * 4  # a few float32 stereo blocks
    # the peak counts every allocation of the process, the interpreter's own tables too (in a
    # long test run one of them grew by 3.8 MB here): a bound that still refuses a whole read
    assert peak < whole / 8


def test_probe_refuses_rates_below_8_khz_without_reading(tmp_path):
    sf.write(tmp_path / "low.wav", np.zeros(16_000, np.int16), 1)
    with pytest.raises(AudioInputError, match="sample rate 1 Hz"):
        probe_audio(tmp_path / "low.wav")
    sf.write(tmp_path / "ok.wav", np.zeros(16_000, np.int16), 8_000)
    assert probe_audio(tmp_path / "ok.wav").seconds == 2.0


def test_frames_of_blocks_equal_frames_of_the_whole():
    audio = np.arange(10_007, dtype=np.int16)
    blocks = [audio[:333], audio[333:5000], audio[5000:5001], audio[5001:]]
    frames = list(frames_of(blocks))
    whole = list(frames_of([audio]))
    assert [f.pts for f in frames] == [f.pts for f in whole] == list(
        range(0, len(audio), FRAME_SAMPLES))
    for a, b in zip(frames, whole, strict=True):
        assert np.array_equal(a.samples, b.samples)
    assert np.array_equal(np.concatenate([f.samples for f in frames]), audio)


def test_writer_lays_chunks_on_the_timeline(tmp_path):
    rate = 8_000
    writer = SpeechFileWriter(tmp_path / "o.wav", rate)
    one = np.full(4_000, 100, np.int16)  # 0.5 s
    writer.write_at(0.25, one)
    writer.write_at(0.5, np.full(800, 200, np.int16))  # starts inside the first: head dropped
    writer.write_at(2.0, one)
    writer.commit(3 * rate)
    out, out_rate = sf.read(tmp_path / "o.wav", dtype="int16")
    assert out_rate == rate and len(out) == 3 * rate
    assert not out[:2_000].any()
    assert (out[2_000:6_000] == 100).all()
    assert not out[6_000:16_000].any()
    assert (out[16_000:20_000] == 100).all()
    assert not out[20_000:].any()
    assert [p.name for p in tmp_path.iterdir()] == ["o.wav"]


def test_discarded_writer_leaves_an_earlier_file_untouched(tmp_path):
    sf.write(tmp_path / "o.flac", np.ones(100, np.int16), 8_000)
    before = (tmp_path / "o.flac").read_bytes()
    writer = SpeechFileWriter(tmp_path / "o.flac", 8_000)
    writer.write_at(0.0, np.full(1_000, 7, np.int16))
    writer.discard()
    assert (tmp_path / "o.flac").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["o.flac"]


@pytest.mark.parametrize("name", ["o.txt", "o", "sub"])
def test_writer_refuses_what_it_cannot_write(tmp_path, name):
    (tmp_path / "sub").mkdir()
    with pytest.raises(InputError):
        SpeechFileWriter(tmp_path / name, 22_050)
    assert [p.name for p in tmp_path.iterdir()] == ["sub"]
