"""``speechpipe models add FILE.argosmodel``: Argos Translate packages become MT pairs."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from speechpipe.bench.tiny_mt import build_tiny_argos
from speechpipe.cli import main
from speechpipe.models.ct2_translator import Ct2TextTranslator, TextMtRequest
from speechpipe.models.mt_registry import registered_mt_models

pytest.importorskip("ctranslate2")
pytest.importorskip("sentencepiece")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("SPEECHPIPE_HOME", str(home))
    return home


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("argos")
    return build_tiny_argos(root / "translate-en_es-1_0.argosmodel", "en", "es",
                            spm_cache=root / "spm")


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    return err[0]


def test_a_package_installs_as_a_pair(home: Path, package: Path, capsys) -> None:
    assert main(["models", "add", str(package)]) == 0
    assert "argos-en-es" in capsys.readouterr().out
    entry = registered_mt_models()["argos-en-es"]
    folder = Path(entry["path"])
    assert folder == home / "mt" / "argos-en-es"
    assert (entry["source_langs"], entry["target_langs"]) == (["en"], ["es"])
    assert entry["origin"] == f"argos:{package.name}"
    meta = json.loads((folder / "speechpipe.json").read_text())
    assert meta["source_eos"] is False  # Argos (OpenNMT) models never saw a source </s>
    translator = Ct2TextTranslator(folder, intra_threads=1)
    result = translator.translate(TextMtRequest("the cat sees a dog", "en", "es"))
    assert result.generated_tokens > 0
    assert not list(home.glob("mt/.*")), "no temp folder left behind"
    # a second add of the same name needs --replace; with it, it works
    assert main(["models", "add", str(package)]) == 2
    assert "--replace" in _one_error_line(capsys)
    assert main(["models", "add", str(package), "--replace", "--name", "es1"]) == 0
    assert set(registered_mt_models()) == {"argos-en-es", "es1"}


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


@pytest.mark.parametrize(("members", "message"), [
    ({"x/model/model.bin": b"x"}, "no metadata.json"),
    ({"x/metadata.json": b"{not json"}, "not valid JSON"),
    ({"x/metadata.json": b'{"from_code": "en"}'}, "'to_code'"),
    ({"x/metadata.json": b'{"from_code": "en", "to_code": "es"}'}, "model/model.bin"),
    ({"../evil/metadata.json": b"{}"}, "outside its folder"),
])
def test_a_bad_package_is_one_line_and_leaves_nothing(
    home: Path, tmp_path: Path, capsys, members: dict[str, bytes], message: str
) -> None:
    bad = _zip(tmp_path / "bad.argosmodel", members)
    assert main(["models", "add", str(bad)]) != 0
    assert message in _one_error_line(capsys)
    assert registered_mt_models() == {}
    assert not (home / "mt").exists() or not any((home / "mt").iterdir())


def test_not_a_zip(home: Path, tmp_path: Path, capsys) -> None:
    bad = tmp_path / "x.argosmodel"
    bad.write_bytes(b"hello")
    assert main(["models", "add", str(bad)]) != 0
    assert "not a zip" in _one_error_line(capsys)


def test_a_broken_model_inside_is_refused_before_install(
    home: Path, tmp_path: Path, package: Path, capsys
) -> None:
    broken = tmp_path / "broken.argosmodel"
    with zipfile.ZipFile(package) as src, zipfile.ZipFile(broken, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info.filename, data[:100] if info.filename.endswith("model.bin")
                         else data)
    assert main(["models", "add", str(broken)]) != 0
    _one_error_line(capsys)
    assert registered_mt_models() == {}
    assert not (home / "mt" / "argos-en-es").exists()
