"""``speechpipe stream`` and ``speechpipe listen`` against a real server: the CLI runs as a
subprocess (real exit codes, real signals, stderr as a user reads it) against the in-process
server on loopback with the embedded models (``live_server``), over real WebSockets."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from speechpipe.evaluation.evaluate import transcribe_speech
from speechpipe.transport.client import stream_session
from speechpipe.transport.file_replay import read_audio
from tests.helpers import OWN_SAMPLES, ROOT, says_gato_in_english

pytestmark = pytest.mark.asyncio(loop_scope="session")

GATO = OWN_SAMPLES / "wav" / "es_gato.wav"  # "El gato duerme en la casa ..." (4.0 s)


def ws_url(app: Any) -> str:
    return f"ws://127.0.0.1:{app.server.port}/ws"


def page_url(app: Any) -> str:
    return f"http://127.0.0.1:{app.server.port}/"


async def start_cli(*args: str, env: dict[str, str] | None = None
                    ) -> asyncio.subprocess.Process:
    # -P: the clone folder (the working directory) must not shadow the installed package
    return await asyncio.create_subprocess_exec(
        sys.executable, "-P", "-m", "speechpipe", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def run_cli(*args: str, within: float = 60.0) -> tuple[int, str, str]:
    proc = await start_cli(*args)
    async with asyncio.timeout(within):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def read_line_with(stream: asyncio.StreamReader, text: str, seen: list[str],
                         within: float = 30.0) -> None:
    """Read lines (kept in ``seen``) until one contains ``text``."""
    async with asyncio.timeout(within):
        while True:
            line = (await stream.readline()).decode()
            assert line, f"ended before {text!r}: {seen}"
            seen.append(line)
            if text in line:
                return


def heard(pipeline: Any, path: Path) -> tuple[float, str]:
    """(seconds, what Whisper hears) of a WAV the CLI wrote."""
    samples, rate = sf.read(path, dtype="int16")
    return len(samples) / rate, transcribe_speech(pipeline.engine.model, samples, rate).lower()


def leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".part")]


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


async def test_stream_a_file_saves_the_speech_and_prints_the_translation(
        live_server: Any, pipeline: Any, tmp_path: Path) -> None:
    out = tmp_path / "out.wav"
    code, stdout, stderr = await run_cli("stream", ws_url(live_server), str(GATO),
                                         "--source-lang", "es", "--out", str(out))
    assert code == 0, stderr
    captions = [line for line in stdout.splitlines() if "] en: " in line]
    assert captions and says_gato_in_english(" ".join(captions)), stdout
    assert any("] es: " in line and "gato" in line.lower() for line in stdout.splitlines())
    seconds, text = heard(pipeline, out)
    assert seconds > 1.0 and says_gato_in_english(text), (seconds, text)  # the translation, spoken
    assert "done: " in stderr and str(out) in stderr
    assert leftovers(tmp_path) == []


async def test_listen_hears_the_room_while_a_speaker_streams(
        live_server: Any, pipeline: Any, tmp_path: Path) -> None:
    room: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    begin = asyncio.Event()

    def seen(message: str | bytes) -> None:
        if isinstance(message, str) and not room.done():
            event = json.loads(message)
            if event.get("type") == "started":
                room.set_result(event["room"])

    speaker = asyncio.create_task(stream_session(
        ws_url(live_server), read_audio(GATO), start={"role": "speaker", "source_lang": "es"},
        on_message=seen, begin=begin, tail_s=2.0))
    listener = None
    try:
        async with asyncio.timeout(30):
            room_id = await room
        out = tmp_path / "room.wav"
        link = f"{page_url(live_server)}#room={room_id}&role=listener"
        listener = await start_cli("listen", link, "--out", str(out))
        assert listener.stdout is not None and listener.stderr is not None
        notes: list[str] = []
        await read_line_with(listener.stderr, "listening to the room", notes)
        begin.set()  # the listener is in: the speaker talks now
        lines: list[str] = []
        await read_line_with(listener.stdout, "] #1 en: ", lines, within=60)
        async with asyncio.timeout(60):
            await speaker  # everything the speaker said has been published
        listener.send_signal(signal.SIGINT)  # leave: what arrived is kept
        async with asyncio.timeout(40):
            rest, err = await listener.communicate()
        assert listener.returncode == 0, (notes, err)
        assert says_gato_in_english(" ".join(lines) + rest.decode()), lines
        assert "stopped: " in err.decode() and str(out) in err.decode()
        seconds, text = heard(pipeline, out)
        assert seconds > 1.0 and says_gato_in_english(text), (seconds, text)
        assert leftovers(tmp_path) == []
    finally:
        begin.set()
        if listener is not None and listener.returncode is None:
            listener.kill()
            await listener.wait()
        speaker.cancel()
        await asyncio.gather(speaker, return_exceptions=True)


async def test_sigterm_mid_file_keeps_what_arrived(live_server: Any, tmp_path: Path) -> None:
    out = tmp_path / "cut.wav"
    hermano = OWN_SAMPLES / "wav" / "es_hermano.wav"  # 7.2 s
    proc = await start_cli("stream", ws_url(live_server), str(hermano), "--source-lang", "es",
                           "--out", str(out))
    try:
        async with asyncio.timeout(40):  # until speech has come back into the partial file
            while not await asyncio.to_thread(speech_written, tmp_path):
                assert proc.returncode is None
                await asyncio.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(40):
            _, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "interrupted: kept" in err.decode()
    samples, _ = sf.read(out, dtype="int16")
    assert np.abs(samples).max() > 1000  # the speech that had arrived
    assert leftovers(tmp_path) == []


async def test_mic_in_and_speech_played_through_the_sound_device(
        live_server: Any, pipeline: Any, tmp_path: Path) -> None:
    """--mic and playback through the sound device library's API; the device is a stand-in
    (``tests/support/fake_sounddevice``: no sound hardware here) that speaks es_gato.wav."""
    speaker = tmp_path / "speaker.raw"
    env = {**os.environ, "FAKE_MIC": str(GATO), "FAKE_SPEAKER": str(speaker),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "support" / "fake_sounddevice"),
                                          os.environ.get("PYTHONPATH", "")])}
    proc = await start_cli("stream", ws_url(live_server), "--mic", "--source-lang", "es",
                           env=env)
    assert proc.stdout is not None
    try:
        lines: list[str] = []
        await read_line_with(proc.stdout, "] en: ", lines, within=60)  # the utterance ended
        proc.send_signal(signal.SIGINT)  # the way to end a microphone: stop, finish, keep
        async with asyncio.timeout(40):
            _, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0 and "stopped: " in err.decode(), err
    assert says_gato_in_english(" ".join(lines)), lines
    played = np.frombuffer(speaker.read_bytes(), "<i2")
    text = transcribe_speech(pipeline.engine.model, played, 22_050).lower()
    assert says_gato_in_english(text), text  # the translation came out of the loudspeaker


def speech_written(folder: Path) -> bool:
    return any(p.stat().st_size > 4096 for p in folder.glob(".cut.wav.*.part"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_bad_input_ends_in_one_line(live_server: Any, tmp_path: Path) -> None:
    out = str(tmp_path / "x.wav")
    cases: list[tuple[tuple[str, ...], int, str]] = [
        (("stream", f"ws://127.0.0.1:{free_port()}", str(GATO), "--out", out), 1,
         "connection refused"),
        (("stream", "ftp://127.0.0.1:1", str(GATO)), 2, "not a server address"),
        (("stream", "ws://127.0.0.1:99999", str(GATO)), 2, "not a server address"),
        (("stream", ws_url(live_server), str(tmp_path / "nope.wav")), 2, "no such file"),
        (("stream", ws_url(live_server)), 2, "FILE or --mic"),
        (("stream", ws_url(live_server), str(GATO), "--target-lang", "xx", "--out", out), 2,
         "(close 4003)"),
        (("listen", f"{page_url(live_server)}#room={'x' * 32}&role=listener"), 1,
         "(close 4014)"),
        (("listen", ws_url(live_server)), 2, "which room?"),
    ]
    for args, code, text in cases:
        got, _, err = await run_cli(*args)
        line = one_line(err)
        assert (got, text in line) == (code, True), (args, got, line)
    assert os.listdir(tmp_path) == []  # refused before speech: no output file, no .part


async def test_a_room_that_gave_no_right_to_speak_is_one_line(live_server: Any,
                                                              tmp_path: Path) -> None:
    room: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    hold = asyncio.Event()

    def seen(message: str | bytes) -> None:
        if isinstance(message, str) and not room.done():
            event = json.loads(message)
            if event.get("type") == "started":
                room.set_result(event["room"])

    opener = asyncio.create_task(stream_session(
        ws_url(live_server), np.zeros(1600, np.int16), start={"role": "speaker"},
        on_message=seen, begin=hold, tail_s=0.0))
    try:
        async with asyncio.timeout(30):
            room_id = await room
        link = f"{page_url(live_server)}#room={room_id}&role=participant"  # no invite
        code, _, err = await run_cli("stream", link, str(GATO), "--out",
                                     str(tmp_path / "x.wav"))
        assert code == 1 and "not_a_speaker" in one_line(err) and "4015" in err, err
    finally:
        hold.set()
        async with asyncio.timeout(30):
            await asyncio.gather(opener, return_exceptions=True)


async def test_mic_without_a_sound_library_is_one_line(live_server: Any) -> None:
    try:
        import sounddevice  # type: ignore[import-not-found]  # noqa: F401
    except (ImportError, OSError):
        pass
    else:
        pytest.skip("sounddevice is installed here: the missing-library line cannot show")
    code, _, err = await run_cli("stream", ws_url(live_server), "--mic")
    assert code == 2 and "pip install sounddevice" in one_line(err)
