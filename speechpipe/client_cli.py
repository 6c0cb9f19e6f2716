"""``speechpipe stream`` and ``speechpipe listen``: a terminal client of a running server.

``stream URL FILE|--mic`` sends a file (paced at real time, as the server requires) or the
microphone over the ``/ws`` protocol (``docs/protocol.md``); ``listen URL#room=ID`` hears a
room. Both print each committed caption line as it arrives and save (``--out``) or play what
comes back. Both are built on the one protocol client, ``transport/client.py``.

Every failure is one line and a non-zero exit: 2 for bad arguments (the URL, the file, a
request the server refuses with close 4000-4003), 1 otherwise (unreachable, refused, closed).
The first Ctrl-C or SIGTERM ends the session as ``stop`` does (the server sends what is left,
the output is kept); a second one quits at once, still keeping what arrived. Nothing is
written to logs: captions go to the user's own terminal and files.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import queue
import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import numpy as np
from numpy.typing import NDArray

from speechpipe.errors import InputError, SpeechpipeError

if TYPE_CHECKING:
    from speechpipe.transport.file_output import SpeechFileWriter

__all__ = ["register", "server_address", "ServerAddress"]

RATE = 16_000  # what the client sends: the server's own rate, no resampling there
OPEN_TIMEOUT_S = 10.0
DRAIN_TIMEOUT_S = 30.0  # after ``stop``: the server's last captions and speech
BAD_REQUEST_CLOSES = {4000, 4001, 4002, 4003}  # the request itself was wrong: exit 2


class ClientError(SpeechpipeError):
    """The server could not be reached, refused the session, or ended it (exit 1)."""

    code = "client_error"


@dataclass(frozen=True)
class ServerAddress:
    """Where to connect (``ws``/``wss`` URL of ``/ws``) and the link's fragment parameters
    (``room``, ``role``, ``invite``, ``token``, ``lang``: the page's room links)."""

    url: str
    params: dict[str, str] = field(default_factory=dict)


def server_address(text: str) -> ServerAddress:
    """``ws://host:port[/ws]``, ``http(s)://host:port/[#room=...]`` (the page's address or a
    room link) or ``host:port``; ``InputError`` with one line for anything else."""
    raw = text.strip()
    if "://" not in raw:
        raw = "ws://" + raw
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as exc:
        raise InputError(f"{text}: not a server address ({exc})") from None
    schemes = {"ws": "ws", "http": "ws", "wss": "wss", "https": "wss"}
    if parts.scheme not in schemes:
        raise InputError(f"{text}: not a server address (use ws://HOST:PORT or the page's "
                         "http://HOST:PORT/ address)")
    if not parts.hostname:
        raise InputError(f"{text}: the address has no host (e.g. ws://127.0.0.1:8765)")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    netloc = host if port is None else f"{host}:{port}"
    path = parts.path.rstrip("/")
    if not path.endswith("/ws"):  # the page's address (or a room link): its socket is /ws
        path = "/ws"
    params = dict(parse_qsl(parts.fragment, keep_blank_values=False))
    return ServerAddress(urlunsplit((schemes[parts.scheme], netloc, path, parts.query, "")),
                         params)


def register(commands: argparse._SubParsersAction) -> None:
    """Add ``stream`` and ``listen`` to the ``speechpipe`` command's subparsers."""
    stream = commands.add_parser(
        "stream", help="translate a file or the microphone on a running server",
        description="Send a file (at real time) or the microphone to a running `speechpipe "
                    "serve`; print the captions as they commit and save (--out) or play the "
                    "translated speech. Ctrl-C ends the session (what arrived is kept).")
    stream.add_argument("url", help="the server: ws://HOST:PORT, or the page's address")
    stream.add_argument("input", nargs="?", default=None,
                        help="audio file to send (anything soundfile reads)")
    stream.add_argument("--mic", action="store_true",
                        help="send the microphone instead of a file (needs sounddevice)")
    stream.add_argument("--source-lang", default="auto",
                        help="spoken language (Whisper code, e.g. es) or auto")
    stream.add_argument("--target-lang", default="en", help="language to speak")
    stream.add_argument("--voice", default=None,
                        help="a voice the server offers (GET /voices; default: by language)")
    stream.add_argument("--mode", choices=("balanced", "fast", "quality"), default="balanced",
                        help="the server's CPU-against-quality mode for this session")
    _add_common(stream)
    stream.set_defaults(handler=cmd_stream)

    listen = commands.add_parser(
        "listen", help="hear a room of a running server from a terminal",
        description="Join a room as a listener: print its captions as they commit and save "
                    "(--out) or play its speech. Ctrl-C (or SIGTERM) leaves; what arrived "
                    "is kept.")
    listen.add_argument("url", help="the room's link (http://HOST:PORT/#room=ID, as the page "
                                    "shows it) or ws://HOST:PORT with --room")
    listen.add_argument("--room", default=None, help="the room id (default: the link's)")
    listen.add_argument("--target-lang", default=None,
                        help="language to hear (default: the link's lang, else en)")
    _add_common(listen)
    listen.set_defaults(handler=cmd_listen)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default=None, metavar="OUT.wav",
                        help="save the speech that comes back here (default: play it, if "
                             "sounddevice can)")
    parser.add_argument("--output-rate", type=int, default=22_050,
                        help="sample rate of the saved or played speech (Hz)")
    parser.add_argument("--token", default=None,
                        help="session token for a server that requires one (default: the "
                             "link's #token=)")


# -- what comes back ----------------------------------------------------------------------


class SpeechPlayer:
    """The speech played on the default output device, chunks back to back (a thread
    writes to a blocking sounddevice stream, so the event loop never waits for the device)."""

    def __init__(self, rate: int) -> None:
        sd = _sounddevice("play the speech (or save it with --out OUT.wav)")
        try:
            self._stream = sd.RawOutputStream(samplerate=rate, channels=1, dtype="int16")
            self._stream.start()
        except Exception as exc:  # PortAudioError: no device, a busy device
            raise ClientError(f"cannot play on the sound device ({exc}); save the speech "
                              "with --out OUT.wav") from None
        self._chunks: queue.Queue[bytes | None] = queue.Queue()
        self._thread = threading.Thread(target=self._play, name="speech-player", daemon=True)
        self._thread.start()

    def play(self, samples: NDArray[np.int16]) -> None:
        self._chunks.put(samples.astype("<i2").tobytes())

    def close(self) -> None:
        """Let what is queued play out (at most a few seconds), then release the device."""
        self._chunks.put(None)
        self._thread.join(timeout=30)
        with contextlib.suppress(Exception):
            self._stream.stop()
            self._stream.close()

    def _play(self) -> None:
        while (chunk := self._chunks.get()) is not None:
            with contextlib.suppress(Exception):
                self._stream.write(chunk)


def _sounddevice(purpose: str) -> Any:
    """The sounddevice module, or ``InputError``: one line saying what to install."""
    try:
        import sounddevice  # type: ignore[import-not-found, unused-ignore]
    except (ImportError, OSError) as exc:  # OSError: the PortAudio library is missing
        why = "PortAudio is missing" if isinstance(exc, OSError) else "it is not installed"
        raise InputError(f"the sound device library is needed to {purpose}, and {why} "
                         "(pip install sounddevice; apt-get install libportaudio2)") from None
    return sounddevice


class Receiver:
    """Reads every message of a session: prints committed caption lines (stdout) and
    statuses/notices (stderr), lays speech back to back on the session's clock into the
    output file and/or the player, and keeps the first fatal error."""

    def __init__(self, rate: int, writer: SpeechFileWriter | None,
                 player: SpeechPlayer | None) -> None:
        self.rate = rate
        self.writer = writer
        self.player = player
        self.started: dict[str, Any] | None = None
        self.fatal: dict[str, Any] | None = None
        self.samples = 0  # speech received, at ``rate``
        self.lines = 0
        self._t0 = 0.0
        self._header: dict[str, Any] | None = None
        self._end_s = 0.0  # where the last chunk ends on the output timeline
        self._speakers: dict[str, int] = {}

    def __call__(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            header, self._header = self._header, None
            if header is not None:
                self._speech(header, np.frombuffer(message, "<i2"))
            return
        event = json.loads(message)
        kind = event.get("type")
        if kind == "started":
            self.started = event
            self._t0 = time.monotonic()
            if event.get("role") == "listener":
                _note(f"listening to the room in {event.get('target_lang', '?')} "
                      "(Ctrl-C leaves)")
            else:
                _note(f"session started: {event.get('source_lang', '?')} to "
                      f"{event.get('target_lang', '?')} (Ctrl-C stops)")
            if self.writer is None and self.player is None:
                _note("the speech is not played: no sound device library (pip install "
                      "sounddevice); --out OUT.wav saves it")
        elif kind == "audio":
            if event.get("via") != "webrtc":
                self._header = event
        elif kind in ("source", "target") and event.get("final") and event.get("committed"):
            self._line(event)
        elif kind == "status":
            _note(event.get("message") or event.get("status", ""))
        elif kind == "error":
            if event.get("fatal"):
                self.fatal = self.fatal or event
            else:
                _note(f"notice: {event.get('code')}: {event.get('message', '')}")

    def waiting(self, _refused: object, delay: float) -> None:
        """A refusal that names a retry is followed (``transport.client.follow_retries``):
        "waiting to join", not an error."""
        self.fatal = None
        _note(f"waiting to join: the server asked to try again; trying in {delay:.1f} s")

    def _line(self, event: dict[str, Any]) -> None:
        who = ""
        if event.get("speaker"):  # rooms: number the speakers in order of appearance
            number = self._speakers.setdefault(event["speaker"], len(self._speakers) + 1)
            who = f"#{number} "
        start = float(event.get("audio_start") or 0.0)
        print(f"[{start:7.1f} s] {who}{event.get('language', '??')}: {event['committed']}",
              flush=True)
        self.lines += 1

    def _speech(self, header: dict[str, Any], samples: NDArray[np.int16]) -> None:
        rate = int(header.get("sample_rate") or self.rate)
        if rate != self.rate and len(samples):
            import soxr

            resampled = soxr.resample(samples.astype(np.float32) / 32768.0, rate, self.rate)
            samples = np.clip(resampled * 32768.0, -32768, 32767).astype(np.int16)
        start = max(time.monotonic() - self._t0, self._end_s)  # back to back, as it arrived
        self._end_s = start + len(samples) / self.rate
        if self.writer is not None:
            self.writer.write_at(start, samples)
        if self.player is not None:
            self.player.play(samples)
        self.samples += len(samples)


def _note(text: str) -> None:
    print(f"speechpipe: {text}", file=sys.stderr, flush=True)


# -- running a session --------------------------------------------------------------------


@dataclass
class Outcome:
    close_code: int | None = None
    error: str = ""  # a refusal's code before ``started``
    signal: int | None = None  # the first signal that ended the run
    quit_now: bool = False  # a second signal (or one before ``started``) cancelled it


class Interrupts:
    """SIGINT/SIGTERM during a run: the first sets ``stop`` (once the session has started),
    a later one (or one before it started) cancels the run."""

    def __init__(self, receiver: Receiver, outcome: Outcome) -> None:
        self.stop = asyncio.Event()
        self._receiver = receiver
        self._outcome = outcome
        self._task = asyncio.current_task()
        self._loop = asyncio.get_running_loop()
        self.cancelled = False

    def __enter__(self) -> Interrupts:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._loop.add_signal_handler(signum, self._on_signal, signum)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._loop.remove_signal_handler(signum)

    def _on_signal(self, signum: int) -> None:
        if self._outcome.signal is None:
            self._outcome.signal = signum
        if self.stop.is_set() or self._receiver.started is None:
            self._outcome.quit_now = True
            if self._task is not None and not self.cancelled:
                self.cancelled = True
                self._task.cancel()
            return
        self.stop.set()
        _note("stopping: the server sends what is left (press Ctrl-C again to quit now)")


async def _guarded(run: Any, interrupts: Interrupts) -> Any:
    """Await ``run``; a cancellation our own signal handler asked for returns ``None``."""
    try:
        return await run
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if interrupts.cancelled and task is not None and task.uncancel() == 0:
            return None
        raise


def _connection_error(url: str, exc: BaseException) -> SpeechpipeError:
    """One line for what ``connect`` raised."""
    from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI

    if isinstance(exc, InvalidURI):
        return InputError(f"{url}: not a WebSocket address ({exc})")
    if isinstance(exc, InvalidStatus):
        status = exc.response.status_code
        body = exc.response.body.decode(errors="replace").strip().splitlines()
        hint = {401: " (a token is required: --token)", 503: " (the server is still loading, "
                "or a worker is down: try again)"}.get(status, "")
        detail = f": {body[0][:200]}" if body else ""
        return ClientError(f"{url}: the server refused the connection: HTTP {status}"
                           f"{detail}{hint}")
    if isinstance(exc, TimeoutError):
        return ClientError(f"{url}: no answer within {OPEN_TIMEOUT_S:.0f} s")
    if isinstance(exc, InvalidHandshake):
        return ClientError(f"{url}: not a speechpipe server ({exc})")
    if isinstance(exc, ConnectionRefusedError):
        return ClientError(f"{url}: cannot connect: nothing listens there (connection refused)")
    if isinstance(exc, socket.gaierror):
        return ClientError(f"{url}: cannot connect: unknown host ({exc.strerror})")
    if isinstance(exc, OSError):
        return ClientError(f"{url}: cannot connect ({exc.strerror or exc})")
    return ClientError(f"{url}: the connection failed ({exc})")


def _unexpected(url: str, exc: Exception) -> Exception:
    """What the connection raised besides ``OSError``: the handshake's refusals, a server
    that breaks the protocol (one line each); anything else goes on as it is."""
    if type(exc).__module__.startswith("websockets"):
        return _connection_error(url, exc)
    if isinstance(exc, ValueError):  # bad JSON, PCM without its header
        return ClientError(f"{url}: the server broke the protocol ({exc})")
    return exc


def _ended(outcome: Outcome, receiver: Receiver) -> SpeechpipeError | None:
    """The session's end as one error line, or ``None`` for a normal end."""
    from speechpipe.transport.codes import CloseCode

    code = outcome.close_code
    fatal = receiver.fatal
    if fatal is None and code in (None, 1000):
        return None
    if outcome.signal is not None and fatal is None:
        return None  # our own stop or cancel ended it
    meanings = {int(member): member.meaning for member in CloseCode}
    meaning = meanings.get(code, "") if code is not None else ""
    what = (f"{fatal.get('code')}: {fatal.get('message', '')}" if fatal
            else meaning or "the connection closed")
    close = f" (close {code})" if code is not None else ""
    started = "ended the session" if receiver.started is not None else "refused the session"
    text = f"the server {started}: {what}{close}"
    return InputError(text) if code in BAD_REQUEST_CLOSES else ClientError(text)


def _open_outputs(args: argparse.Namespace) -> tuple[SpeechFileWriter | None,
                                                     SpeechPlayer | None]:
    from speechpipe.session import check_output_rate

    check_output_rate(args.output_rate)
    if args.out:
        from speechpipe.transport.file_output import SpeechFileWriter

        return SpeechFileWriter(Path(args.out), args.output_rate), None
    try:
        return None, SpeechPlayer(args.output_rate)
    except InputError:  # said once the session starts: a refusal stays one line
        return None, None


def _finish(args: argparse.Namespace, receiver: Receiver, writer: SpeechFileWriter | None,
            player: SpeechPlayer | None) -> str:
    """Close the outputs: a session that started keeps its file (what arrived), one that
    never started leaves none. Returns what was kept, for the last line."""
    if player is not None:
        player.close()
    seconds = receiver.samples / args.output_rate
    if writer is None:
        return f"{seconds:.1f} s of speech"
    if receiver.started is None:
        writer.discard()
        return ""
    try:
        writer.commit(writer.samples_written)
    finally:
        writer.discard()  # a no-op once committed
    return f"{seconds:.1f} s of speech in {args.out}"


def _exit(outcome: Outcome, kept: str, *, signal_ends: bool) -> int:
    """The exit code and last line of a run that ended without an error: a signal is the
    normal end of a microphone or a listener (0), an interruption of a file (130/143)."""
    if outcome.signal is None:
        _note(f"done: {kept}" if kept else "done")
        return 0
    if signal_ends:
        _note(f"stopped: {kept}" if kept else "stopped")
        return 0
    _note(f"interrupted: kept {kept}" if kept else "interrupted")
    return 128 + outcome.signal


async def _microphone(stop: asyncio.Event) -> AsyncIterator[NDArray[np.int16]]:
    """20 ms blocks of the default input device at 16 kHz mono until ``stop`` is set."""
    sd = _sounddevice("send the microphone")
    loop = asyncio.get_running_loop()
    blocks: asyncio.Queue[NDArray[np.int16]] = asyncio.Queue(maxsize=500)

    def captured(data: Any, frames: int, timing: Any, status: Any) -> None:
        block = np.frombuffer(bytes(data), "<i2").copy()
        loop.call_soon_threadsafe(_put_nowait, blocks, block)

    try:
        stream = sd.RawInputStream(samplerate=RATE, channels=1, dtype="int16",
                                   blocksize=RATE // 50, callback=captured)
        stream.start()
    except Exception as exc:  # PortAudioError: no input device
        raise ClientError(f"cannot open the microphone ({exc})") from None
    try:
        while not stop.is_set():
            try:  # never yield inside the timeout: it would fire in the consumer's code
                async with asyncio.timeout(0.2):
                    block = await blocks.get()
            except TimeoutError:
                continue
            yield block
    finally:
        with contextlib.suppress(Exception):
            stream.stop()
            stream.close()


def _put_nowait(blocks: asyncio.Queue[NDArray[np.int16]], block: NDArray[np.int16]) -> None:
    with contextlib.suppress(asyncio.QueueFull):  # the loop stalled: drop, never block
        blocks.put_nowait(block)


async def _stream(args: argparse.Namespace, address: ServerAddress,
                  audio: NDArray[np.int16] | None) -> int:
    from speechpipe.transport.client import (
        RETRIES,
        follow_retries,
        retry_start,
        stream_session,
    )

    writer, player = _open_outputs(args)
    receiver = Receiver(args.output_rate, writer, player)
    outcome = Outcome()
    start: dict[str, Any] = {"source_lang": args.source_lang, "target_lang": args.target_lang,
                             "output_sample_rate": args.output_rate, "mode": args.mode}
    if args.voice:
        start["voice"] = args.voice
    token = args.token or address.params.get("token")
    if token:
        start["token"] = token
    role = address.params.get("role")
    if address.params.get("room"):  # a conversation link: speak in that room
        start.update(room=address.params["room"], role=role or "participant")
        if address.params.get("invite"):
            start["invite"] = address.params["invite"]
    try:
        with Interrupts(receiver, outcome) as interrupts:
            live = _microphone(interrupts.stop) if audio is None else None
            session = follow_retries(
                lambda refused: stream_session(
                    address.url, audio if audio is not None else np.zeros(0, np.int16),
                    start=retry_start(start, refused), rate=RATE,
                    tail_s=0.0 if audio is None else 2.0, on_message=receiver,
                    open_timeout_s=OPEN_TIMEOUT_S, drain_timeout_s=None, stop=interrupts.stop,
                    live=live),
                lambda run: run.refused_with_retry(), retries=RETRIES,
                on_wait=receiver.waiting, stop=interrupts.stop)
            try:
                run = await _guarded(_bounded_drain(session, interrupts.stop), interrupts)
            except (OSError, TimeoutError) as exc:
                raise _connection_error(address.url, exc) from None
            except Exception as exc:
                raise _unexpected(address.url, exc) from None
            if run is not None:
                outcome.close_code, outcome.error = run.close_code, run.error
    finally:
        kept = _finish(args, receiver, writer, player)
    failure = _ended(outcome, receiver)
    if failure is not None:
        raise failure
    return _exit(outcome, kept, signal_ends=audio is None)


async def _bounded_drain(session: Any, stop: asyncio.Event) -> Any:
    """Run ``session``; once ``stop`` is set, give the server ``DRAIN_TIMEOUT_S`` to finish."""
    task = asyncio.ensure_future(session)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            await asyncio.wait({task}, timeout=DRAIN_TIMEOUT_S)
        if not task.done():
            task.cancel()
            _note(f"the server did not finish within {DRAIN_TIMEOUT_S:.0f} s")
            with contextlib.suppress(asyncio.CancelledError):
                await task
            return None
        return task.result()
    finally:
        stopper.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _listen(args: argparse.Namespace, address: ServerAddress, room: str) -> int:
    from speechpipe.transport.client import RETRIES, follow_retries, listen_room, retry_start

    writer, player = _open_outputs(args)
    receiver = Receiver(args.output_rate, writer, player)
    outcome = Outcome()
    start: dict[str, Any] = {"target_lang": (args.target_lang or address.params.get("lang")
                                             or "en"),
                             "output_sample_rate": args.output_rate}
    token = args.token or address.params.get("token")
    if token:
        start["token"] = token
    try:
        with Interrupts(receiver, outcome) as interrupts:
            session = follow_retries(
                lambda refused: listen_room(address.url, room, start=retry_start(start, refused),
                                            stop=interrupts.stop, open_timeout_s=OPEN_TIMEOUT_S,
                                            on_message=receiver),
                lambda run: run.refused_with_retry(), retries=RETRIES,
                on_wait=receiver.waiting, stop=interrupts.stop)
            try:
                run = await _guarded(_bounded_drain(session, interrupts.stop), interrupts)
            except (OSError, TimeoutError) as exc:
                raise _connection_error(address.url, exc) from None
            except Exception as exc:
                raise _unexpected(address.url, exc) from None
            if run is not None:
                outcome.close_code, outcome.error = run.close_code, run.error
    finally:
        kept = _finish(args, receiver, writer, player)
    failure = _ended(outcome, receiver)
    if failure is not None:
        raise failure
    return _exit(outcome, kept, signal_ends=True)


def cmd_stream(args: argparse.Namespace) -> int:
    """``speechpipe stream URL FILE|--mic``."""
    address = server_address(args.url)
    if (args.input is None) == (not args.mic):
        raise InputError("give an audio FILE or --mic (one of them)")
    if address.params.get("room") and address.params.get("role") in (None, "listener"):
        raise InputError(f"{args.url}: a listener's room link: hear it with `speechpipe "
                         "listen`; stream needs a conversation link (#room=...&role=participant)")
    audio: NDArray[np.int16] | None = None
    if args.mic:
        _sounddevice("send the microphone")
    else:
        from speechpipe.transport.file_replay import probe_audio, read_audio

        probe_audio(args.input)  # one line for a missing, empty or unreadable file
        audio = read_audio(args.input)
        if args.out:
            from speechpipe.output_paths import check_outputs_spare_the_input

            check_outputs_spare_the_input(args.input, [("--out", args.out)])
    return asyncio.run(_stream(args, address, audio))


def cmd_listen(args: argparse.Namespace) -> int:
    """``speechpipe listen URL#room=ID``."""
    address = server_address(args.url)
    room = args.room or address.params.get("room")
    if not room:
        raise InputError(f"{args.url}: which room? Give the room's link (…/#room=ID, as the "
                         "page shows it) or --room ID")
    return asyncio.run(_listen(args, address, room))
