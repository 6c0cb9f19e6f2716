"""``speechpipe models add FILE.argosmodel``: Argos Translate packages become MT pairs."""

from __future__ import annotations

import json
import tracemalloc
import zipfile
from pathlib import Path

import pytest

from speechpipe.bench.tiny_mt import build_tiny_argos
from speechpipe.cli import main
from speechpipe.models.mt.ct2_translator import Ct2TextTranslator, TextMtRequest
from speechpipe.models.mt.registry import registered_mt_models

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


def _one_short_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """One line, no traceback, and short: a refusal repeats at most a capped value."""
    line = _one_error_line(capsys)
    assert len(line) < 400, line[:400]
    return line


# -- hardening round 5 (issue 74): what a package and a model name could do ---------------
# A 3 MB package whose ``metadata.json`` inflated to 2 GiB cost 4.1 GB before "too large"; a
# 2 GiB model member packed 700:1 was kept on disk; ``from_code`` ``..`` registered "any -> es"
# (``--mt auto`` then sent every language through it); ``--name`` ending in a newline made a
# folder and a registry key with one. Each is refused in one line with exit code 2, from the
# zip's own entries before inflating anything, and leaves nothing behind.


def _left_nothing(home: Path) -> None:
    assert registered_mt_models() == {}
    mt = home / "mt"
    assert not mt.exists() or not any(mt.iterdir()), list(mt.iterdir())


def _rebuilt(package: Path, out: Path, *, metadata: bytes | None = None,
             extra: dict[str, bytes] | None = None) -> Path:
    """``package``'s members into ``out``, with another ``metadata.json`` and/or more members."""
    with zipfile.ZipFile(package) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        top = src.infolist()[0].filename.split("/", 1)[0]
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("/metadata.json") and metadata is not None:
                data = metadata
            dst.writestr(info.filename, data)
        for name, data in (extra or {}).items():
            dst.writestr(f"{top}/{name}", data)
    return out


def _metadata(**fields: str) -> bytes:
    return json.dumps({"package_version": "1.0", "from_code": "en", "to_code": "es",
                       **fields}).encode()


@pytest.mark.parametrize("fields", [
    {"from_code": ".."}, {"from_code": "../x"}, {"from_code": "e\x00s"}, {"to_code": ".."},
    {"from_code": "xx"}, {"from_code": "en" * 50_000},
], ids=["dotdot", "dotdot-x", "nul", "to-dotdot", "unknown", "long"])
def test_language_codes_are_checked_against_the_code_table(
    home: Path, tmp_path: Path, package: Path, capsys: pytest.CaptureFixture[str],
    fields: dict[str, str],
) -> None:
    bad = _rebuilt(package, tmp_path / "bad.argosmodel", metadata=_metadata(**fields))
    assert main(["models", "add", str(bad)]) == 2
    line = _one_short_error_line(capsys)
    assert "language code" in line and "enen" * 30 not in line, line
    _left_nothing(home)


def test_metadata_sizes_come_from_the_entry_before_it_is_read(
    home: Path, tmp_path: Path, package: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """64 MiB of padding stands for the 2 GiB of the attack: refused from its header, so
    reading the package costs no more than a few MiB."""
    padded = _metadata()[:-1] + b" " * (64 << 20) + b"}"
    bad = _rebuilt(package, tmp_path / "bomb.argosmodel", metadata=padded)
    assert bad.stat().st_size < (2 << 20)
    tracemalloc.start()
    try:
        code = main(["models", "add", str(bad)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 2
    line = _one_short_error_line(capsys)
    assert "metadata.json" in line and ("too large" in line or ":1" in line), line
    assert peak < (16 << 20), f"{peak >> 20} MiB allocated"
    _left_nothing(home)


def test_a_member_packed_too_tightly_is_refused_before_unpacking(
    home: Path, tmp_path: Path, package: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """64 MiB of zeros beside the model (1000:1) stands for the 2 GiB member at 700:1,
    which a valid model beside it once kept on disk."""
    bad = _rebuilt(package, tmp_path / "bomb.argosmodel",
                   extra={"model/padding.bin": bytes(64 << 20)})
    assert main(["models", "add", str(bad)]) == 2
    line = _one_short_error_line(capsys)
    assert "padding.bin" in line and ":1" in line, line
    _left_nothing(home)


def test_member_bounds_come_from_the_entries() -> None:
    from speechpipe.errors import InputError
    from speechpipe.models.mt import argos_package

    huge = zipfile.ZipInfo("x/model/model.bin")
    huge.file_size, huge.compress_size = 3 << 30, 3 << 30  # stored, 1:1, but 3 GiB
    with pytest.raises(InputError, match="unpacks to"):
        argos_package._check_member(Path("p.argosmodel"), huge)
    fine = zipfile.ZipInfo("x/model/model.bin")
    fine.file_size, fine.compress_size = 300 << 20, 280 << 20
    argos_package._check_member(Path("p.argosmodel"), fine)


@pytest.mark.parametrize("name", ["tiny\n", "tiny\nx", "a" * 65, "../x", ".hidden", "x/y",
                                  "n" * 100_000],
                         ids=["newline", "inner-newline", "65", "dotdot", "hidden", "slash",
                              "100k"])
def test_a_name_must_be_a_safe_name(
    home: Path, tmp_path: Path, package: Path, capsys: pytest.CaptureFixture[str], name: str,
) -> None:
    assert main(["models", "add", str(package), "--name", name]) == 2
    line = _one_short_error_line(capsys)
    assert "name" in line
    _left_nothing(home)
