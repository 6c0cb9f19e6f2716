"""``GET /models``: the languages ``--mt auto`` reaches on this server and the pairs installed
(names and languages only, never paths)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from websockets.datastructures import Headers
from websockets.http11 import Request

from speechpipe.bench.tiny_mt import build_tiny_pair
from speechpipe.cli import main

pytest.importorskip("ctranslate2")


def test_models_lists_reachable_targets_and_pairs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from speechpipe.server.serve import ServerApp

    monkeypatch.setenv("SPEECHPIPE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SPEECHPIPE_APERTIUM_MODES", str(tmp_path / "no-apertium"))
    app = ServerApp("127.0.0.1", 0)
    assert app.models() == {"targets": {"en": {"sources": ["*"], "route": "whisper"}},
                            "pairs": []}
    assert main(["models", "add", str(build_tiny_pair(tmp_path / "en-es", "en", "es")),
                 "--name", "en-es"]) == 0
    assert main(["models", "add", str(build_tiny_pair(tmp_path / "de-fr", "de", "fr")),
                 "--name", "de-fr"]) == 0
    capsys.readouterr()
    app._models = None  # the cached scan (VOICES_TTL_S) is dropped, as time would
    request = Request("/models", Headers({"Host": "127.0.0.1:8765"}))
    response = app.server.routes(None, request)  # type: ignore[arg-type]
    assert response is not None and response.status_code == 200
    body = json.loads(response.body)
    assert body["targets"] == {
        "en": {"sources": ["*"], "route": "whisper"},
        "es": {"sources": ["*"], "route": "pivot"},  # Whisper's English, then en->es
        "fr": {"sources": ["de"], "route": "text"},
    }
    assert [p["name"] for p in body["pairs"]] == ["de-fr", "en-es"]
    assert str(tmp_path) not in response.body.decode()


def test_models_lists_apertium_pairs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed Apertium pairs (mode files) are reachable targets: es from any language
    through Whisper's English (en->es is there), pt from es only."""
    from speechpipe.server.serve import ServerApp

    modes = tmp_path / "modes"
    modes.mkdir()
    for name in ("eng-spa", "spa-eng", "es-pt", "fr-es"):
        (modes / f"{name}.mode").write_text("lt-proc x\n")
    monkeypatch.setenv("SPEECHPIPE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SPEECHPIPE_APERTIUM_MODES", str(modes))
    monkeypatch.setattr("shutil.which", lambda name: "/usr/bin/" + name)
    body = ServerApp("127.0.0.1", 0).models()
    assert body["targets"] == {
        "en": {"sources": ["*"], "route": "whisper"},
        "es": {"sources": ["*"], "route": "pivot"},
        "pt": {"sources": ["es"], "route": "text"},
    }
    assert {p["name"]: p["family"] for p in body["pairs"]} == {
        "apertium:eng-spa": "apertium", "apertium:es-pt": "apertium",
        "apertium:fr-es": "apertium", "apertium:spa-eng": "apertium"}
    assert str(modes) not in json.dumps(body)
