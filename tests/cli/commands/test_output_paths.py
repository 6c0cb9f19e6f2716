"""Outputs and inputs as an attacker would name them (issue 74): an output through a symbolic
link, onto a FIFO or a device, or onto one of the run's inputs (the manifest, a clip it
lists, ``--config``, the input audio); ``--config`` that is a FIFO or endless; a manifest
line of 512 MiB. Each is refused before any model loads: exit 2, one line on stderr,
nothing written, and within seconds (a hang is a failure: every run here has a timeout),
in bounded memory (runs under an address-space limit). Real processes."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import OWN_SAMPLES, assert_one_line_error, eval_manifest

CLIP = OWN_SAMPLES / "wav" / "es_gato.wav"
SECONDS = 30  # a refusal takes well under a second; a hang takes forever
MEMORY = 1 << 30  # address space a refused run may have (a 512 MiB read needs more)


def run(*args: str, cwd: Path, memory: int | None = None) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return subprocess.run([sys.executable, "-m", "speechpipe", *args], capture_output=True,
                          text=True, timeout=SECONDS, cwd=cwd, preexec_fn=limit)


def refused(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert_one_line_error(result, *needles)
    assert "translation:" not in result.stdout  # no model was loaded


def listing(folder: Path) -> dict[str, str]:
    """Each entry's kind and (files, links) content: what a refusal must leave as it was."""
    out = {}
    for p in sorted(folder.iterdir()):
        if p.is_symlink():
            out[p.name] = f"-> {os.readlink(p)}"
        elif p.is_fifo():
            out[p.name] = "fifo"
        else:
            out[p.name] = p.read_bytes().hex()[:64] if p.is_file() else "dir"
    return out


TRANSLATE_OUTPUTS = [("--out", "o.wav"), ("--trace", "t.jsonl"), ("--subtitles", "s.vtt"),
                     ("--source-subtitles", "s.srt")]


def _translate(flag: str, path: str, cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    outputs = [] if flag == "--out" else ["--out", "o.wav"]
    return run("translate", str(CLIP), "--source-lang", "es", *outputs, flag, path, *extra,
               cwd=cwd)


@pytest.mark.parametrize(("flag", "name"), TRANSLATE_OUTPUTS)
def test_an_output_through_a_symbolic_link_is_refused(tmp_path: Path, flag: str,
                                                      name: str) -> None:
    """Yesterday the run followed the link and replaced its target (as root, a link to
    /dev/null replaced /dev/null)."""
    (tmp_path / "elsewhere.txt").write_text("keep me\n")
    (tmp_path / name).symlink_to("elsewhere.txt")
    before = listing(tmp_path)
    refused(_translate(flag, name, tmp_path), name, "symbolic link")
    assert listing(tmp_path) == before


@pytest.mark.parametrize(("flag", "name"), TRANSLATE_OUTPUTS)
def test_an_output_that_is_a_fifo_is_refused_at_once(tmp_path: Path, flag: str,
                                                     name: str) -> None:
    """Yesterday --out and --trace on a FIFO hung, a subtitle FIFO was replaced."""
    os.mkfifo(tmp_path / name)
    refused(_translate(flag, name, tmp_path), name, "FIFO")
    assert listing(tmp_path) == {name: "fifo"}


def test_an_output_that_is_a_device_is_refused(tmp_path: Path) -> None:
    refused(_translate("--trace", "/dev/null", tmp_path), "/dev/null", "device")
    assert not any(tmp_path.iterdir())


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_a_subtitle_output_that_is_a_device_node_is_refused(tmp_path: Path) -> None:
    """As root, yesterday's subtitle writer replaced a device (a copy of /dev/null here)."""
    os.mknod(tmp_path / "null.vtt", 0o600 | 0o020000, os.makedev(1, 3))
    refused(_translate("--subtitles", "null.vtt", tmp_path), "null.vtt", "device")
    assert (tmp_path / "null.vtt").is_char_device()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null.vtt"]


# -- outputs onto inputs -------------------------------------------------------------------

def test_eval_report_onto_its_own_manifest_is_refused(tmp_path: Path) -> None:
    manifest = eval_manifest(tmp_path, {"file": "es_gato.wav", "lang": "es"})
    before = listing(tmp_path)
    refused(run("eval", "manifest.jsonl", "--pace", "fast", "--all", "--report", "manifest.jsonl",
                cwd=tmp_path), "--report manifest.jsonl", "the manifest")
    assert listing(tmp_path) == before and manifest.is_file()


@pytest.mark.parametrize("report", ["es_gato.wav", "./sub/../es_gato.wav", "hard.wav"])
def test_eval_report_onto_a_clip_of_the_manifest_is_refused(tmp_path: Path,
                                                            report: str) -> None:
    eval_manifest(tmp_path, {"file": "es_gato.wav", "lang": "es"})
    (tmp_path / "sub").mkdir()
    os.link(tmp_path / "es_gato.wav", tmp_path / "hard.wav")
    before = listing(tmp_path)
    refused(run("eval", "manifest.jsonl", "--pace", "fast", "--all", "--report", report,
                cwd=tmp_path), f"--report {report}", "a clip of the manifest")
    assert listing(tmp_path) == before


def test_eval_report_onto_its_config_is_refused(tmp_path: Path) -> None:
    eval_manifest(tmp_path, {"file": "es_gato.wav", "lang": "es"})
    (tmp_path / "c.toml").write_text("[pipeline.asr]\nstep_s = 1.0\n")
    before = listing(tmp_path)
    refused(run("eval", "manifest.jsonl", "--pace", "fast", "--all", "--config", "c.toml",
                "--report", "c.toml", cwd=tmp_path), "--report c.toml", "--config")
    assert listing(tmp_path) == before


def test_translate_trace_onto_its_config_is_refused(tmp_path: Path) -> None:
    (tmp_path / "c.jsonl").write_text("[pipeline.asr]\nstep_s = 1.0\n")
    before = listing(tmp_path)
    refused(_translate("--trace", "c.jsonl", tmp_path, "--config", "c.jsonl"),
            "--trace c.jsonl", "--config")
    assert listing(tmp_path) == before


# -- inputs that block or never end --------------------------------------------------------

def test_config_that_is_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "c.toml")
    refused(_translate("--trace", "t.jsonl", tmp_path, "--config", "c.toml"),
            "--config c.toml", "FIFO")
    assert listing(tmp_path) == {"c.toml": "fifo"}


def test_config_that_is_endless_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """/dev/zero reached 2 GB in 3.3 s; now its kind is refused before a byte is read."""
    result = run("translate", str(CLIP), "--out", "o.wav", "--config", "/dev/zero",
                 cwd=tmp_path, memory=MEMORY)
    refused(result, "--config /dev/zero", "device")
    assert not any(tmp_path.iterdir())


def test_a_huge_manifest_line_is_refused_before_it_is_read_whole(tmp_path: Path) -> None:
    """A 512 MiB line cost 1.1 GB before its 1 MiB check; now at most the cap is read. The
    file is sparse: no disk is spent."""
    eval_manifest(tmp_path, {"file": "es_gato.wav", "lang": "es"})
    with open(tmp_path / "manifest.jsonl", "ab") as fh:
        fh.truncate(fh.tell() + (512 << 20))  # a second line of 512 MiB of NUL bytes
    result = run("eval", "manifest.jsonl", "--pace", "fast", cwd=tmp_path,
                 memory=MEMORY)
    refused(result, "manifest.jsonl:2", "line over 1024 KiB")


def test_a_manifest_that_is_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "m.jsonl")
    refused(run("eval", "m.jsonl", "--pace", "fast", cwd=tmp_path), "m.jsonl", "FIFO")


def test_eval_subtitle_folder_through_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    eval_manifest(tmp_path, {"file": "es_gato.wav", "lang": "es"})
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "r-subtitles").symlink_to("elsewhere")
    refused(run("eval", "manifest.jsonl", "--pace", "fast", "--all", "--report", "r.json",
                cwd=tmp_path), "r-subtitles", "symbolic link")
    assert not any((tmp_path / "elsewhere").iterdir()) and not (tmp_path / "r.json").exists()
