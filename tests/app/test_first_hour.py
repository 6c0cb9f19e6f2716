"""What a new user meets after the Quick start (issue 47): one-line errors with exit 2 for bad
arguments (``serve``'s port and host included), defaults in ``--help``, ``translate``'s
default pace and its summary, one line per utterance."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from speechpipe.cli import build_parser
from speechpipe.file_translation import utterance_lines
from speechpipe.server.serve import bind_error

CLIP = str(Path(__file__).resolve().parents[2] / "samples" / "wav" / "es_gato.wav")


def speechpipe(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-P", "-m", "speechpipe", *args],
                          capture_output=True, text=True, timeout=300, cwd=cwd)


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_serve_on_a_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = speechpipe("serve", "--port", str(port), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    line = one_line(result)
    assert f"127.0.0.1:{port}: address already in use" in line and "--port" in line


@pytest.mark.parametrize(("args", "needle"), [
    (("--port", "80000"), "a port is 0 (any free one) to 65535, got 80000"),
    (("--port", "http"), "not a port number: 'http'"),
    # TEST-NET-1 (RFC 5737) is nobody's own address: bind() fails without a packet sent;
    # --token keeps the no-auth warning off stderr
    (("--host", "192.0.2.1", "--token", "t"), "--host 192.0.2.1: not an address of this"),
])
def test_serve_bad_port_or_host_is_one_line_and_exit_2(
    tmp_path: Path, args: tuple[str, ...], needle: str,
) -> None:
    result = speechpipe("serve", *args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert needle in one_line(result)


@pytest.mark.parametrize(("value", "needle"), [
    ("ct2:nothing", "rooms.mt=ct2:nothing: no MT model named 'nothing' and no such folder"),
    ("opus-en-de", "rooms.mt=opus-en-de: name a text MT model as ct2:NAME_OR_PATH"),
])
def test_serve_refuses_a_room_mt_model_that_is_not_there(
    tmp_path: Path, value: str, needle: str,
) -> None:
    """``--set rooms.mt=`` is checked as ``translate --mt`` is: one line and exit 2 before the
    port opens or a model loads (the server never says it is listening)."""
    result = speechpipe("serve", "--port", "0", "--token", "t", "--set", f"rooms.mt={value}",
                        cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    line = one_line(result)
    assert line.startswith("speechpipe: error: ") and needle in line, line


def test_serve_accepts_a_room_mt_folder(tmp_path: Path) -> None:
    from speechpipe.server.serve import check_room_mt

    check_room_mt("")  # the default: rooms use --mt auto's routes
    check_room_mt(f"ct2:{tmp_path}")  # a folder (loaded, and checked, when a room needs it)


def test_a_host_that_does_not_resolve_says_so() -> None:
    """The resolver's own error (asking it would send a DNS query: built here instead)."""
    error = bind_error("999.1.1.1", 8765, socket.gaierror(-2, "Name or service not known"))
    assert str(error).startswith("--host 999.1.1.1: not an address or a name")
    assert "0.0.0.0" in str(error)


@pytest.mark.parametrize("args", [
    ("translate", CLIP, "--out", "o.wav", "--mt", "ct2:nothing"),
    ("translate", CLIP, "--out", "o.wav", "--asr-model", "whisper-large"),
    ("models", "add", "nope.onnx"),
    ("models", "add", "nope"),
    ("translate", CLIP, "--out", "o.wav", "--pace", "slow"),
])
def test_models_that_are_not_there_are_bad_input(tmp_path: Path, args: tuple[str, ...]) -> None:
    result = speechpipe(*args, cwd=tmp_path)
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert one_line(result).startswith("speechpipe")
    assert not (tmp_path / "o.wav").exists()


def test_help_shows_the_defaults() -> None:
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    help_text = " ".join(commands["translate"].format_help().split())
    assert "(default: fast)" in help_text  # --pace
    assert "(default: auto)" in help_text  # --source-lang
    assert "(default: 22050)" in help_text  # --output-rate
    assert "--mode {balanced,fast,quality} CPU against quality" in help_text
    serve_help = " ".join(commands["serve"].format_help().split())
    assert "(default True)" not in serve_help  # --no-degrade is a switch: no value to show


def test_translate_goes_at_fast_pace_unless_asked_and_eval_stays_realtime() -> None:
    parser = build_parser()
    assert parser.parse_args(["translate", "in.wav", "--out", "o.wav"]).pace == "fast"
    assert parser.parse_args(["translate", "in.wav", "--out", "o.wav",
                              "--pace", "realtime"]).pace == "realtime"
    assert parser.parse_args(["eval", "m.jsonl"]).pace == "realtime"


def test_the_summary_is_one_line_per_utterance_with_its_time() -> None:
    records = [
        {"event": "vad.start", "stream_t": 0.6, "audio_t": 0.48, "utterance": 0},
        {"event": "utterance.end", "stream_t": 4.1, "utterance": 0,
         "source_text": "El gato duerme.", "text": "The cat sleeps."},
        {"event": "vad.start", "stream_t": 75.3, "audio_t": 75.04, "utterance": 1},
        {"event": "utterance.end", "stream_t": 80.0, "utterance": 1,
         "source_text": "Hola.", "text": ""},
        {"event": "vad.start", "stream_t": 90.0, "audio_t": 90.0, "utterance": 2},
        {"event": "utterance.end", "stream_t": 91.0, "utterance": 2,
         "source_text": "", "text": ""},  # nothing said: no line
        {"event": "vad.start", "stream_t": 3725.0, "audio_t": 3723.25, "utterance": 3},
        {"event": "utterance.end", "stream_t": 3726.0, "utterance": 3,
         "source_text": "Adiós.", "text": "Goodbye."},
    ]
    assert utterance_lines(records) == [
        "0:00.5  El gato duerme.  ->  The cat sleeps.",
        "1:15.0  Hola.  ->  (no translation)",
        "1:02:03.2  Adiós.  ->  Goodbye.",
    ]


def test_the_bench_server_ignores_a_speechpipe_folder_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Run from the folder that holds the clone, ``python -m`` imported the clone's folder
    (a namespace package without ``__version__``) instead of the installed speechpipe."""
    from speechpipe.bench.server_process import SPEECHPIPE, ServerProcess
    from tests.scripted_serve import SCRIPTED_SPEECHPIPE

    (tmp_path / "speechpipe").mkdir()  # what the clone's folder looks like from its parent
    monkeypatch.chdir(tmp_path)
    done = subprocess.run([*SPEECHPIPE, "--version"], capture_output=True, text=True,
                          timeout=120)  # the command the bench serves with, models aside
    assert done.returncode == 0 and done.stdout.startswith("speechpipe "), done.stderr
    with ServerProcess(["--capacity", "1"], command=SCRIPTED_SPEECHPIPE) as server:
        assert server.port > 0


@pytest.mark.parametrize("flags", [("--out", "in.wav"), ("--out", "./link.wav"),
                                   ("--out", "o.wav", "--trace", "in.wav"),
                                   ("--out", "o.wav", "--trace", "o.wav")])
def test_outputs_that_would_replace_the_input_are_refused(
    tmp_path: Path, flags: tuple[str, ...],
) -> None:
    source = tmp_path / "in.wav"
    source.write_bytes(Path(CLIP).read_bytes())
    (tmp_path / "link.wav").symlink_to(source)
    result = speechpipe("translate", "in.wav", *flags, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    line = one_line(result)
    assert "is the input file" in line or "name the same file" in line, line
    assert source.read_bytes() == Path(CLIP).read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.wav", "link.wav"]


@pytest.mark.slow
def test_sigterm_mid_translation_leaves_no_partial_file(tmp_path: Path) -> None:
    """``timeout`` and container stops send SIGTERM: the run ends as Ctrl-C ends it (exit
    143, one line) and the temporary ``.o.wav.*.part`` is removed."""
    import signal
    import threading
    import time

    clip = Path(CLIP).with_name("es_hermano.wav")
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "speechpipe", "-v", "translate", str(clip), "--out",
         "o.wav", "--pace", "realtime"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    lines: list[str] = []
    replaying = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "replaying" in line:
                replaying.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert replaying.wait(240), lines
        time.sleep(1.0)  # into the speech: the .part file is being written
        assert any(p.name.endswith(".part") for p in tmp_path.iterdir())
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    assert proc.returncode == 128 + signal.SIGTERM, (proc.returncode, lines)
    assert "Traceback" not in "".join(lines)
    assert lines[-1].strip() == "speechpipe: terminated", lines
    assert not any(tmp_path.iterdir()), list(tmp_path.iterdir())  # no output, no .part


def test_a_folder_or_an_empty_file_as_input_says_what_it_is(tmp_path: Path) -> None:
    (tmp_path / "clips").mkdir()
    (tmp_path / "empty.wav").write_bytes(b"")
    folder = speechpipe("translate", "clips", "--out", "o.wav", cwd=tmp_path)
    assert folder.returncode == 2
    assert one_line(folder).endswith("clips: is a folder, not an audio file")
    empty = speechpipe("translate", "empty.wav", "--out", "o.wav", cwd=tmp_path)
    assert empty.returncode == 2
    assert one_line(empty).endswith("empty.wav: is empty (0 bytes)")


@pytest.mark.parametrize(("flag", "given", "hint"), [
    ("--source-lang", "spanish", "use es (spanish)"),
    ("--source-lang", "Deutsch", "use de (german)"),
    ("--source-lang", "frnch", "did you mean fr (french)?"),
    ("--target-lang", "german", "use de (german)"),
])
def test_a_language_name_gets_its_code_suggested(
    tmp_path: Path, flag: str, given: str, hint: str,
) -> None:
    result = speechpipe("translate", CLIP, "--out", "o.wav", flag, given, cwd=tmp_path)
    assert result.returncode == 2
    line = one_line(result)
    assert hint in line and len(line) < 200, line  # the hint, not the list of 99 codes


def test_every_whisper_language_has_a_name() -> None:
    from speechpipe.models.mt.ct2_folder import WHISPER_LANGUAGES
    from speechpipe.stages.language_names import LANGUAGE_NAMES

    assert set(LANGUAGE_NAMES) == set(WHISPER_LANGUAGES)


def test_reading_an_mp3_prints_no_decoder_warnings(tmp_path: Path) -> None:
    """libmpg123 writes its own warnings on fd 2 while decoding (a 30 s file of noise gives
    several); reading goes through ``stream_audio`` in a fresh process, so stderr is its own."""
    import numpy as np
    import soundfile as sf

    if "MP3" not in sf.available_formats():
        pytest.skip("this libsndfile cannot write MP3")
    rng = np.random.default_rng(7)
    sf.write(tmp_path / "noise.mp3", rng.uniform(-0.9, 0.9, 16_000 * 30), 16_000,
             format="MP3")
    code = ("import sys; from speechpipe.transport.file_replay import stream_audio; "
            "n = sum(len(b) for b in stream_audio(sys.argv[1])); "
            "print('kept', file=sys.stderr); print(n)")
    result = subprocess.run([sys.executable, "-P", "-c", code, str(tmp_path / "noise.mp3")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > 16_000 * 29
    assert result.stderr == "kept\n", result.stderr  # other writes to stderr still get out


def test_the_bench_server_listens_on_the_port_asked_for(tmp_path: Path) -> None:
    """``bench room --port N``: the server the bench starts listens there (0: any)."""
    from speechpipe.bench.server_process import ServerProcess
    from tests.scripted_serve import SCRIPTED_SPEECHPIPE

    with socket.socket() as probe:  # a port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with ServerProcess(["--capacity", "1"], port=port, command=SCRIPTED_SPEECHPIPE) as server:
        assert server.port == port
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    bench = commands["bench"]._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert bench["room"].parse_args(["--port", str(port)]).port == port


def test_config_describes_every_option_in_one_line() -> None:
    import re

    from speechpipe.config import Config
    from speechpipe.config_file import render_config

    text = render_config(Config())
    leaves = [line for line in text.splitlines() if re.match(r"^(# )?[a-z_0-9]+ = ", line)]
    assert len(leaves) > 150
    bare = [line for line in leaves if "  # " not in line]
    assert not bare, bare  # every option has its description on its own line
    assert "aggressiveness = 2  # webrtcvad 0 (lenient) .. 3 (strict)" in text
    assert all(len(line.split("  # ", 1)[1]) <= 120 for line in leaves)


def test_config_file_reads_back_what_config_prints(tmp_path: Path) -> None:
    """``speechpipe config ... > FILE`` then ``--config FILE``: the same tree, for serve's
    command line and translate's (which reads the pipeline groups of the same file)."""
    import tomllib

    from speechpipe.cli import _options
    from speechpipe.config import Config
    from speechpipe.config_file import render_config
    from speechpipe.server.serve import serve_config

    parser = build_parser()
    printed = render_config(serve_config(parser.parse_args(
        ["config", "--set", "asr.step_s=0.7", "--capacity", "3", "--set", "vad.hush_ms=0",
         "--set", "catch_up.speeds=1.1,1.2", "--no-degrade"])))
    (tmp_path / "mine.toml").write_text(printed)
    again = serve_config(parser.parse_args(["config", "--config", str(tmp_path / "mine.toml")]))
    assert render_config(again) == printed
    assert again.server.load.admission.capacity == 3 and not again.server.load.degrade_enabled
    assert tomllib.loads(printed) != tomllib.loads(render_config(Config()))
    options = _options(parser.parse_args(["translate", "in.wav", "--out", "o.wav", "--config",
                                          str(tmp_path / "mine.toml"), "--set", "asr.step_s=2"]))
    assert options.asr.step_s == 2.0  # --set wins over the file
    assert options.catch_up.speeds == (1.1, 1.2)  # the file over the defaults


@pytest.mark.parametrize(("text", "needle"), [
    ("[pipeline.asr]\nstep_s = -1\n", "step_s must be > 0"),
    ("[pipeline.asrx]\nstep_s = 1\n", "no option group [pipeline.asrx]"),
    ("[pipeline.asr]\nnope = 1\n", "asr has no option 'nope'"),
    ("step_s = 1\n", "step_s is not an option"),
    ("x = [", "not valid TOML"),
])
def test_a_bad_config_file_is_one_line_and_exit_2(tmp_path: Path, text: str,
                                                  needle: str) -> None:
    (tmp_path / "bad.toml").write_text(text)
    result = speechpipe("translate", CLIP, "--out", "o.wav", "--config", "bad.toml",
                        cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    line = one_line(result)
    assert line.startswith("speechpipe: error: --config bad.toml: ") and needle in line, line


@pytest.mark.slow
def test_a_seeded_voice_speaks_the_same_way_each_time() -> None:
    """Piper draws random noise (phoneme lengths, timbre): two loads of the voice, each
    asked the same things in the same order, give the same samples (piper.seed)."""
    from speechpipe.voices.piper_engine import PiperOptions, PiperSynthesizer
    from speechpipe.voices.registry import resolve_voice

    voice = resolve_voice(None, "en", ())
    runs = []
    for _ in range(2):
        synthesizer = PiperSynthesizer(voice, PiperOptions(seed=3))
        runs.append([synthesizer.synthesize("My brother works in a hospital.").tobytes()
                     for _ in range(2)])
    assert runs[0] == runs[1]
    assert runs[0][0] != runs[0][1]  # still noise: the second call draws new values


@pytest.mark.slow
def test_the_same_file_gives_the_same_output_at_fast_pace(tmp_path: Path) -> None:
    """translate's default (--pace fast): the decode schedule follows the audio, not the
    wall clock, and the voice is seeded, so two runs write the same bytes and summary."""
    runs = []
    for name in ("one.wav", "two.wav"):
        result = speechpipe("translate", str(Path(CLIP).with_name("es_cafe.wav")), "--out",
                            name, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        runs.append(([line for line in result.stdout.splitlines()
                      if not line.startswith(("StartOffset", "audio:", "wrote"))],
                     (tmp_path / name).read_bytes()))
    assert runs[0][0] == runs[1][0]
    assert runs[0][1] == runs[1][1]


@pytest.mark.parametrize("args", [
    ("serve", "--cluster", "127.0.0.1:6379", "--capacity", "1"),  # no --public-url
    ("serve", "--cluster", "h:1", "--public-url", "http://a/ws", "--capacity", "1"),
    ("cluster", "status"),  # no --cluster and no RAY_ADDRESS
])
def test_bad_cluster_arguments_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      args: tuple[str, ...]) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    result = speechpipe(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert one_line(result).startswith("speechpipe: error: ")


def test_the_unsure_language_hint_names_the_languages_of_this_vote() -> None:
    """An unsure detection's hint offers the vote's own likeliest languages (and those the
    captions came out in), not a fixed example, as the command to run; each language's
    confidence is the one the ``language:`` line prints, the other candidates are named
    only (one confidence per language per file)."""
    from speechpipe.cli import unsure_language_hint

    hint = unsure_language_hint({"es": 0.17}, [("es", 0.21), ("ja", 0.102), ("fr", 0.098)])
    assert hint == ("unsure (the vote's share: es 0.17; also heard: ja, fr): if you know the "
                    "language, pass --source-lang with its code (e.g. --source-lang es); or "
                    "--set asr.detect_among=es,ja,fr to choose among these")
    mixed = unsure_language_hint({"th": 0.4, "de": 0.9}, [("th", 0.5), ("la", 0.2)])
    assert mixed.startswith("unsure (the vote's share: th 0.40; also heard: la, de)"), mixed
    assert mixed.endswith("--set asr.detect_among=th,la,de to choose among these"), mixed
    lone = unsure_language_hint({"es": 0.3}, [])  # no votes kept: the captions' language
    assert lone == ("unsure (the vote's share: es 0.30): if you know the language, pass "
                    "--source-lang with its code (e.g. --source-lang es)")


def test_the_unsure_language_hint_stays_quiet_on_a_vote_its_leader_holds() -> None:
    """A leader holding most of its vote is no reason for a hint, however low one Whisper
    probability was (a right answer locked at asr.language_lock_s with 0.6 printed
    "unsure"); a given language (None) never is."""
    from speechpipe.cli import unsure_language_hint

    assert unsure_language_hint({"de": 0.93}, [("de", 0.93), ("en", 0.02)]) == ""
    assert unsure_language_hint({"es": 0.6}, [("es", 0.45), ("pt", 0.3)]) == ""
    assert unsure_language_hint({"es": None}, []) == ""
    assert unsure_language_hint({"es": 0.49}, [("es", 0.49), ("pt", 0.4)]).startswith("unsure")


def test_a_session_counts_every_detection_for_the_hint() -> None:
    """``PipelineSession.language_candidates``: the detections (requests without a language)
    of the session, each worth its audio's seconds; a request in a given language is not a
    detection and does not count."""
    import asyncio

    import numpy as np

    from speechpipe.session import _CountedDetections
    from speechpipe.stages.language_vote import LanguageVote
    from speechpipe.stages.model_api import WhisperRequest, WhisperResult

    class Client:
        def __init__(self) -> None:
            self.answers = {1.0: (("fr", 0.4), ("es", 0.5)), 3.0: (("fr", 0.6), ("es", 0.2)),
                            2.0: (("de", 1.0),)}

        def __call__(self, request: WhisperRequest):  # type: ignore[no-untyped-def]
            future = asyncio.get_running_loop().create_future()
            probs = self.answers[len(request.audio) / 16_000]
            future.set_result(WhisperResult(language=probs[0][0], language_prob=probs[0][1],
                                            decodes=(), encode_s=0.0, decode_s=0.0,
                                            language_probs=probs))
            return future

        def replace(self, old, new):  # type: ignore[no-untyped-def]
            return None

        def withdraw(self, old) -> bool:  # type: ignore[no-untyped-def]
            return False

    def request(seconds: float, language: str | None = None) -> WhisperRequest:
        return WhisperRequest(np.zeros(int(seconds * 16_000), np.float32), language, ())

    async def run() -> LanguageVote:
        vote = LanguageVote()
        counted = _CountedDetections(Client(), vote)  # type: ignore[arg-type]
        for asked in (request(1.0), request(3.0), request(2.0, language="de")):
            await counted(asked)
        assert counted.replace(request(1.0), request(3.0)) is None
        return vote

    vote = asyncio.run(run())
    ranking = vote.ranking(3)
    assert [language for language, _ in ranking] == ["fr", "es"]  # de was given, not detected
    assert ranking[0][1] == pytest.approx((0.4 * 1 + 0.6 * 3) / 4)
    assert ranking[1][1] == pytest.approx((0.5 * 1 + 0.2 * 3) / 4)


def test_config_help_says_what_each_format_is() -> None:
    """The newcomer run: `config --format` had no help text."""
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    config = commands.choices["config"]
    action = next(a for a in config._actions if "--format" in a.option_strings)
    assert action.help and "toml" in action.help and "json" in action.help
    assert "%(default)s" in action.help and action.default == "toml"
