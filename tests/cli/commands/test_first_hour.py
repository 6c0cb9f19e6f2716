"""What a new user meets after the Quick start (issue 47), as a user runs it (a subprocess
each): one-line errors with exit 2 for bad arguments (``serve``'s port and host included),
models that are not there, a bad config file."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from speechpipe.cli import build_parser
from tests.helpers import ROOT

CLIP = str(ROOT / "samples" / "wav" / "es_gato.wav")


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
