"""``speechpipe models list|add|convert`` and ``resolve_mt_model``, in a temp SPEECHPIPE_HOME."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from speechpipe.bench.tiny_mt import build_tiny_mt, make_whisper_like_folder
from speechpipe.errors import InputError, ModelError
from speechpipe.models.mt import registry as mt_registry
from tests.support.models_cli import assert_not_half_registered, joe_files, listing, run


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("sentencepiece")
    root = tmp_path_factory.mktemp("models")
    return {f: build_tiny_mt(root / f"tiny-{f}", f, spm_cache=root / "spm")
            for f in ("nllb", "marian")}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("SPEECHPIPE_HOME", str(home))
    return home


def test_add_list_resolve_round_trip(
    home: Path, tiny_models: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("models", "add", str(tiny_models["nllb"]), "--name", "tiny") == 0
    assert "--mt ct2:tiny" in capsys.readouterr().out
    registry = json.loads((home / "registry.json").read_text())
    entry = registry["mt"]["tiny"]
    assert entry["path"] == str(tiny_models["nllb"].resolve())
    assert entry["family"] == "nllb"
    assert entry["target_langs"] == ["de", "en", "es", "fr"]
    assert entry["size_bytes"] > 0

    listed = listing(capsys)
    assert [m["name"] for m in listed["mt"]] == ["tiny"]
    assert listed["mt"][0]["present"] is True
    assert listed["asr"][0]["name"] == "whisper-base"
    assert any(v["name"] == "en_US-joe-medium" for v in listed["voices"]) or not listed["voices"]

    assert mt_registry.resolve_mt_model("tiny") == tiny_models["nllb"].resolve()
    assert mt_registry.resolve_mt_model("ct2:tiny") == tiny_models["nllb"].resolve()
    assert mt_registry.resolve_mt_model(str(tiny_models["marian"])) == tiny_models["marian"]

    assert run("models", "list") == 0
    text = capsys.readouterr().out
    assert "tiny" in text and "nllb" in text and "Voices:" in text


def test_default_name_is_the_folder_name(home: Path, tiny_models: dict[str, Path]) -> None:
    assert run("models", "add", str(tiny_models["marian"])) == 0
    assert mt_registry.registered_mt_models()["tiny-marian"]["target_langs"] == ["fr"]


def test_name_clash_needs_replace(
    home: Path, tiny_models: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("models", "add", str(tiny_models["nllb"]), "--name", "m") == 0
    assert run("models", "add", str(tiny_models["marian"]), "--name", "m") == 2
    assert "already registered" in capsys.readouterr().err
    assert mt_registry.registered_mt_models()["m"]["family"] == "nllb"
    assert run("models", "add", str(tiny_models["marian"]), "--name", "m", "--replace") == 0
    assert mt_registry.registered_mt_models()["m"]["family"] == "marian"


@pytest.mark.parametrize("case", ["missing", "whisper", "mismatched", "bad-name", "file"])
def test_bad_mt_folders_register_nothing(
    home: Path, tmp_path: Path, tiny_models: dict[str, Path],
    capsys: pytest.CaptureFixture[str], case: str,
) -> None:
    args = []
    if case == "missing":
        path = tmp_path / "nope"
    elif case == "whisper":
        path = make_whisper_like_folder(tmp_path / "whisper")
    elif case == "mismatched":
        path = tmp_path / "mismatched"
        shutil.copytree(tiny_models["marian"], path)
        shutil.copy(tiny_models["nllb"] / "sentencepiece.bpe.model", path / "source.spm")
        vocab = json.loads((path / "shared_vocabulary.json").read_text())
        keep = [t for t in vocab if not t.startswith("\u2581")]
        keep += [f"x{i}" for i in range(len(vocab) - len(keep))]
        (path / "shared_vocabulary.json").write_text(json.dumps(keep))
    elif case == "file":
        path = tmp_path / "model.txt"
        path.write_text("hello")
    else:
        path, args = tiny_models["nllb"], ["--name", "../evil"]
    capsys.readouterr()
    code = run("models", "add", str(path), *args)
    err = capsys.readouterr().err
    assert code != 0
    assert err.startswith("speechpipe: error: ") and err.count("\n") == 1
    assert not (home / "registry.json").exists()


def test_whisper_folder_error_names_the_problem(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("models", "add", str(make_whisper_like_folder(tmp_path / "w"))) == 1
    assert "Whisper speech-recognition model" in capsys.readouterr().err


def test_resolve_unknown(home: Path) -> None:
    with pytest.raises(ModelError, match="no MT model named 'ghost'"):
        mt_registry.resolve_mt_model("ghost")
    with pytest.raises(InputError):
        mt_registry.resolve_mt_model("ct2:")


def test_resolve_registered_but_moved(
    home: Path, tmp_path: Path, tiny_models: dict[str, Path]
) -> None:
    moved = tmp_path / "moved"
    shutil.copytree(tiny_models["nllb"], moved)
    assert run("models", "add", str(moved), "--name", "gone") == 0
    shutil.rmtree(moved)
    with pytest.raises(ModelError, match="no longer exists"):
        mt_registry.resolve_mt_model("gone")


def test_corrupt_registry_is_reported(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home.mkdir(parents=True)
    (home / "registry.json").write_text("{not json")
    assert run("models", "list") == 1
    assert "registry" in capsys.readouterr().err


# --- voices ------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["no-sample-rate", "bad-json", "no-config"])  # not-onnx: slow
def test_broken_voice_is_not_half_registered(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    pytest.importorskip("piper")
    assert_not_half_registered(home, tmp_path, capsys, case)


# --- convert -----------------------------------------------------------------------------


def test_convert_without_converter_dependencies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import builtins

    real_import = builtins.__import__

    def no_transformers(name, *args, **kwargs):  # type: ignore[no-untyped-def]
        if name in ("transformers", "torch"):
            raise ImportError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_transformers)
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"model_type": "marian"}))
    assert run("models", "convert", str(hf), "--out", str(tmp_path / "out")) == 1
    err = capsys.readouterr().err
    assert "speechpipe[convert]" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_convert_checks_its_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("models", "convert", str(tmp_path / "missing"), "--out", str(tmp_path / "o")) == 2
    assert "no config.json" in capsys.readouterr().err
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    (tmp_path / "taken").mkdir()
    assert run("models", "convert", str(hf), "--out", str(tmp_path / "taken")) == 2
    assert "--force" in capsys.readouterr().err


class _FakeConverter:
    """Stands in for ctranslate2's TransformersConverter (no torch/transformers here): writes
    the tiny model's weights and copies the requested tokenizer files, as the real one does."""

    fail = False

    def __init__(self, model_name_or_path: str, copy_files: list[str] | None = None) -> None:
        self.src = Path(model_name_or_path)
        self.copy_files = copy_files or []

    def convert(self, output_dir: str, quantization: str | None = None, force: bool = False):  # type: ignore[no-untyped-def]
        out = Path(output_dir)
        build_tiny_mt(out, "marian")
        for name in ("source.spm", "target.spm", "tokenizer_config.json"):
            (out / name).unlink()
        if self.fail:
            raise ValueError("unsupported architecture\nmore details")
        for name in self.copy_files:
            shutil.copy(self.src / name, out / name)
        return output_dir


@pytest.fixture
def fake_converter(monkeypatch: pytest.MonkeyPatch) -> type[_FakeConverter]:
    import sys
    import types

    import ctranslate2.converters

    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    monkeypatch.setitem(sys.modules, "transformers", types.ModuleType("transformers"))
    monkeypatch.setattr(ctranslate2.converters, "TransformersConverter", _FakeConverter)
    monkeypatch.setattr(_FakeConverter, "fail", False)
    return _FakeConverter


def _hf_marian(tmp_path: Path, tiny: Path) -> Path:
    hf = tmp_path / "opus-mt-hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"model_type": "marian"}))
    (hf / "tokenizer_config.json").write_text(json.dumps({"source_lang": "en",
                                                          "target_lang": "fr"}))
    for name in ("source.spm", "target.spm"):
        shutil.copy(tiny / name, hf / name)
    return hf


def test_convert_copies_tokenizers_and_records_the_family(
    tmp_path: Path, tiny_models: dict[str, Path], fake_converter: type[_FakeConverter],
    capsys: pytest.CaptureFixture[str],
) -> None:
    hf = _hf_marian(tmp_path, tiny_models["marian"])
    out = tmp_path / "converted"
    assert run("models", "convert", str(hf), "--out", str(out)) == 0
    assert "speechpipe models add" in capsys.readouterr().out
    assert {"source.spm", "target.spm", "tokenizer_config.json", "model.bin"} <= {
        p.name for p in out.iterdir()
    }
    assert json.loads((out / "speechpipe.json").read_text()) == {
        "family": "marian", "source_lang": "en", "target_lang": "fr"
    }
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_failed_convert_leaves_nothing(
    tmp_path: Path, tiny_models: dict[str, Path], fake_converter: type[_FakeConverter],
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_converter.fail = True
    hf = _hf_marian(tmp_path, tiny_models["marian"])
    assert run("models", "convert", str(hf), "--out", str(tmp_path / "converted")) == 1
    err = capsys.readouterr().err
    assert "unsupported architecture" in err and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["opus-mt-hf"]


# --- issue 21, items 10 and 14: what ``models add`` refuses before installing anything ----


@pytest.mark.parametrize("case", ["huge", "deep", "non-ascii-name", "long-name"])
def test_voices_add_refuses_huge_deep_and_unusable_names(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    """A 300 MB config was accepted; 200,000 levels of nesting raised RecursionError; names
    that ``start.voice`` refuses were installed (and listed by ``GET /voices``)."""
    pytest.importorskip("piper")
    model, config = joe_files()
    folder = tmp_path / "voice"
    folder.mkdir()
    name = {"non-ascii-name": "en_US-jos\u00e9-medium", "long-name": "en_US-" + "x" * 70}.get(
        case, "en_US-odd-medium")
    onnx = folder / f"{name}.onnx"
    onnx.symlink_to(model)
    data = json.loads(config.read_text())
    if case == "huge":
        data["padding"] = "x" * (3 << 20)  # 3 MB is enough to show the bound (300 MB is slow)
        text = json.dumps(data)
    elif case == "deep":
        text = "[" * 200_000 + "]" * 200_000
    else:
        text = json.dumps(data)
    (folder / f"{name}.onnx.json").write_text(text)
    capsys.readouterr()
    assert run("models", "add", str(onnx)) in (1, 2)
    err = capsys.readouterr().err
    assert err.startswith("speechpipe: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "RecursionError" not in err
    assert {"huge": "over 1024 KiB", "deep": "nested too deeply"}.get(case, "voice name") in err
    voices = home / "voices"
    assert not voices.exists() or list(voices.iterdir()) == []


@pytest.mark.parametrize("code", ["..", "../x", "es\x00", "x" * 5000, "/etc"],
                         ids=["dots", "path", "nul", "long", "absolute"])
def test_mt_add_refuses_a_declared_language_that_is_no_code(
    home: Path, tmp_path: Path, tiny_models: dict[str, Path],
    capsys: pytest.CaptureFixture[str], code: str,
) -> None:
    """Issue 74, the folder twin of the Argos ``from_code`` hole: a ``speechpipe.json``
    declaring ``source_lang: ".."`` was read as a language group ("any -> es"), and
    ``--mt auto`` would then route every source language through it."""
    folder = tmp_path / "mt"
    shutil.copytree(tiny_models["marian"], folder)
    (folder / "speechpipe.json").write_text(json.dumps({"source_lang": code,
                                                        "target_lang": "es"}))
    capsys.readouterr()
    assert run("models", "add", str(folder)) == 2
    err = capsys.readouterr().err
    assert err.startswith("speechpipe: error: ") and err.count("\n") == 1, err
    assert "unusable language code" in err and len(err) < 300, err
    assert not (home / "registry.json").exists()


@pytest.mark.parametrize("where", ["config.json", "speechpipe.json"])
def test_mt_add_refuses_a_deeply_nested_config_in_one_line(
    home: Path, tmp_path: Path, tiny_models: dict[str, Path],
    capsys: pytest.CaptureFixture[str], where: str,
) -> None:
    """Item 14 for an MT folder: a Hugging Face ``config.json`` (read when there is no
    ``model.bin``) or speechpipe's own ``speechpipe.json`` nested 200,000 deep."""
    folder = tmp_path / "mt"
    shutil.copytree(tiny_models["nllb"], folder)
    if where == "config.json":
        (folder / "model.bin").unlink()
    (folder / where).write_text("{\"a\":" * 200_000 + "1" + "}" * 200_000)
    capsys.readouterr()
    assert run("models", "add", str(folder)) in (1, 2)
    err = capsys.readouterr().err
    assert err.startswith("speechpipe: error: ") and err.count("\n") == 1, err
    assert "nested too deeply" in err or "not valid JSON" in err, err
    assert not (home / "registry.json").exists()
