"""Benchmarks as data (issue 73): the results row, the decoder path printed with every figure,
and ``--record``'s append. No model, no subprocess: the row builder is pure, the writer is
given a path in a temporary folder and a fake bench."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from speechpipe.bench import record
from speechpipe.bench.results import (
    FIELDS,
    build_row,
    compact_figures,
    default_subject,
    dump_row,
    machine_name,
    parse_rows,
    summarize,
)
from speechpipe.decoder_path import (
    DecoderPath,
    asr_decoder_path,
    describe_decoders,
    mt_decoder_path,
    parse_decoder_line,
    whisper_decoder_path,
)
from speechpipe.errors import InputError
from speechpipe.machine import CpuInfo

AVX2 = CpuInfo(model="AMD EPYC 7B13", vendor="AuthenticAMD", cores=2, isa="AVX2", gemm="oneDNN")
AMX = CpuInfo(model="Intel(R) Xeon(R) Platinum 8488C", vendor="GenuineIntel", cores=2,
              isa="AMX", gemm="MKL")
VNNI = CpuInfo(model="AMD EPYC 9B14", vendor="AuthenticAMD", cores=4, isa="AVX-512 VNNI",
               gemm="oneDNN")


# -- the decoder path ---------------------------------------------------------------------------
def test_the_native_decoder_with_its_in_place_step_names_its_kernel() -> None:
    path = asr_decoder_path(native_verified=True, rows_step_refused="", cpu=AVX2)
    assert path == DecoderPath("asr", "native", "in-place int8 step (AVX2 kernel)")
    assert path.describe() == "ASR native, in-place int8 step (AVX2 kernel)"
    plain = CpuInfo(model="x", vendor="", cores=1, isa="SSE", gemm="oneDNN")
    assert asr_decoder_path(native_verified=True, rows_step_refused="",
                            cpu=plain).kernel == "in-place int8 step (plain C++)"


def test_the_native_decoder_without_the_step_steps_on_ctranslate2s_gemm() -> None:
    off = asr_decoder_path(native_verified=True, rows_step_refused=None, cpu=AMX)
    assert off.describe() == "ASR native, steps on CTranslate2 int8 GEMM (MKL, AMX)"
    aside = asr_decoder_path(native_verified=True, rows_step_refused="differs; really", cpu=AVX2)
    assert aside.path == "native" and "set aside: differs; really" in aside.note
    # a note never breaks the line's shape: ';' and '|' are the separators
    assert parse_decoder_line(aside.describe()) == [
        DecoderPath("asr", "native", aside.kernel, aside.note.replace(";", ","))]


@pytest.mark.parametrize(("verified", "refused", "note"), [
    (None, "", "the native decoder not built or not checked"),
    (False, "", "the native decoder set aside"),
    (False, "ids differ", "the native decoder set aside: ids differ"),
])
def test_generate_is_named_with_why_the_native_decoder_did_not_run(
        verified: bool | None, refused: str, note: str) -> None:
    path = asr_decoder_path(native_verified=verified, native_refused=refused, cpu=VNNI)
    assert (path.path, path.note) == ("ctranslate2", note)
    assert path.kernel == "generate, CTranslate2 int8 GEMM (oneDNN, AVX-512 VNNI)"


def test_an_engine_is_read_by_its_decoders_attributes() -> None:
    class Decoders:
        native_verified, native_refused, rows_step_refused = True, "", ""

    class Engine:
        decoders = Decoders()

    assert whisper_decoder_path(Engine(), AVX2).kernel == "in-place int8 step (AVX2 kernel)"


def test_text_mt_paths_and_the_line_round_trip() -> None:
    paths = [asr_decoder_path(native_verified=True, rows_step_refused="", cpu=AVX2),
             mt_decoder_path(native=True, cpu=AVX2), mt_decoder_path(native=False, cpu=AVX2)]
    line = describe_decoders(paths)
    assert line.split(" | ")[1] == ("MT native, prefix reader, steps on CTranslate2 int8 GEMM "
                                    "(oneDNN, AVX2)")
    assert parse_decoder_line(line) == paths
    log = f"speechpipe: ready\nspeechpipe: decoder {line}\nspeechpipe: CPU AMD EPYC\n"
    assert parse_decoder_line(log) == paths  # a server's log: its decoder line
    assert parse_decoder_line("speechpipe: ready\n") == []
    assert describe_decoders([]) == "no decoder ran"


# -- the row ------------------------------------------------------------------------------------
def test_machine_names_say_the_family_the_instructions_and_the_cores() -> None:
    assert machine_name(AVX2) == "epyc-avx2-2c"
    assert machine_name(AMX) == "xeon-amx-2c"
    assert machine_name(VNNI) == "epyc-avx512-vnni-4c"
    odd = CpuInfo(model="unknown CPU", vendor="", cores=8, isa="", gemm="")
    assert machine_name(odd) == "cpu-8c"


def test_a_row_holds_the_command_commit_machine_load_decoder_and_figures() -> None:
    decoder = asr_decoder_path(native_verified=True, rows_step_refused="", cpu=AVX2)
    row = build_row(argv=["bench", "load", "--starts", "--sessions", "8"],
                    date="2026-12-08T01:02:03Z", cpu=AVX2,
                    figures={"cases": [{"label": "solo", "end_p95": 3.8812345}],
                             "clips": [{"huge": 1}], "nan": float("nan")},
                    commit="abc1234", dirty=False, load_before=0.123, load_after=1.987,
                    decoder=[decoder.as_dict()])
    assert list(row) == list(FIELDS)
    assert row["command"] == "speechpipe bench load --starts --sessions 8"
    assert row["subject"] == "load/starts"
    assert row["machine"] == {"name": "epyc-avx2-2c", "label": "AMD EPYC 7B13, 2 cores, AVX2",
                              "cpu": "AMD EPYC 7B13", "isa": "AVX2", "gemm": "oneDNN",
                              "cores": 2}
    assert row["load"] == {"before": 0.12, "after": 1.99}
    assert row["decoder"] == [{"part": "asr", "path": "native",
                               "kernel": "in-place int8 step (AVX2 kernel)", "note": ""}]
    # per-clip detail left out, floats to 4 digits, NaN as null (JSON has none)
    assert row["figures"] == {"cases": [{"label": "solo", "end_p95": 3.881}], "nan": None}
    assert row["summary"] == "cases[solo].end_p95 3.881"
    assert row["what"] == "**2026-12-08, AMD EPYC 7B13, 2 cores, AVX2**: load/starts"
    line = dump_row(row)
    assert "\n" not in line and parse_rows(line + "\n") == [row]
    unknown = build_row(argv=["eval", "m.jsonl"], date="d", cpu=AVX2, figures={},
                        subject="quality/x-to-en-49", machine="my-box")
    assert (unknown["commit"], unknown["load"], unknown["decoder"]) == (None, None, None)
    assert (unknown["subject"], unknown["machine"]["name"]) == ("quality/x-to-en-49", "my-box")


@pytest.mark.parametrize(("argv", "subject"), [
    (["eval", "m.jsonl", "--pace", "realtime"], "quality/eval"),
    (["bench", "load", "--sessions", "8"], "load/load"),
    (["bench", "cost", "--file", "x.wav"], "cost/cost"),
    (["bench", "room", "--listeners", "20"], "rooms/room"),
    (["bench", "drill"], "faults/drill"),
])
def test_a_run_without_record_as_gets_its_benchs_subject(argv: list[str], subject: str) -> None:
    assert default_subject(argv) == subject


def test_summaries_and_compaction() -> None:
    assert summarize({"a": 1, "b": {"c": 2.5, "d": True, "e": None}, "f": "x" * 50}) == \
        "a 1, b.c 2.5"
    assert summarize({str(i): i for i in range(20)}, limit=3) == "0 0, 1 1, 2 2"
    # the headline figures first, wherever they sit
    assert summarize({"clips_seen": 49, "aggregate": {"rtf": 0.4, "bleu": 35.36},
                      "cases": [{"case": "solo", "end_p95": 3.88}]}) == \
        "aggregate.bleu 35.36, cases[solo].end_p95 3.88, clips_seen 49, aggregate.rtf 0.4"
    assert compact_figures({"t": (1, float("inf")), "p": Path("x")}) == {"t": [1, None], "p": "x"}


@pytest.mark.parametrize(("text", "error"), [
    ("{", "results:1: not JSON"),
    ('{"schema": 2}', "results:1: not a schema-1 row"),
    ('{"schema": 1}', "results:1: missing date"),
])
def test_a_broken_results_line_is_named(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_rows(text)


# -- --record -----------------------------------------------------------------------------------
def _args(tmp_path: Path, **extra: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    record.add_record_flags(parser)
    args = parser.parse_args(["--record-file", str(tmp_path / "results.jsonl")])
    args.argv = ["bench", "cost", "--file", "x.wav", "--record-file", "r.jsonl"]
    vars(args).update(extra)
    return args


def test_record_appends_one_row_after_a_run_that_noted_figures(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(record, "_git", lambda *words: "abc1234" if "rev-parse" in words else "")
    monkeypatch.setattr("speechpipe.machine.cpu_info", lambda: AVX2)
    path = tmp_path / "results.jsonl"
    path.write_text('{"old": 1}')  # no newline at the end: the new line still starts its own

    def bench(args: argparse.Namespace) -> int:
        record.print_decoder([asr_decoder_path(native_verified=True, rows_step_refused="",
                                               cpu=AVX2)])
        record.note({"cpu_per_audio_s": 0.25})
        record.note({"lag_p95": 0.33})
        return 0

    assert record.recorded(bench)(_args(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "decoder: ASR native, in-place int8 step (AVX2 kernel)" in out
    assert f"recorded: {path} (subject cost/cost, machine epyc-avx2-2c)" in out
    lines = path.read_text().splitlines()
    assert lines[0] == '{"old": 1}' and len(lines) == 2
    row = json.loads(lines[1])
    assert row["figures"] == {"cpu_per_audio_s": 0.25, "lag_p95": 0.33}
    assert (row["commit"], row["dirty"]) == ("abc1234", False)
    assert row["decoder"][0]["path"] == "native"
    assert row["command"].startswith("speechpipe bench cost --file x.wav")
    assert record.Recording.active is None


def test_nothing_is_recorded_without_the_flag_or_figures_a_failed_check_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(record, "_git", lambda *words: None)  # not a checkout: null fields
    path = tmp_path / "results.jsonl"
    ran = []

    def bench(args: argparse.Namespace) -> int:
        ran.append(1)
        record.note({"x": 1})  # not recording: nothing kept
        return 0

    plain = argparse.Namespace(record=False, record_file=None, record_as=None)
    assert record.recorded(bench)(plain) == 0 and ran == [1]
    assert record.recorded(lambda args: 3)(_args(tmp_path)) == 3
    assert "not recorded: the run reported no figures" in capsys.readouterr().err

    assert not path.exists()

    def failing(args: argparse.Namespace) -> int:  # measured, one of its checks failed
        record.note({"x": 1})
        return 1

    assert record.recorded(failing)(_args(tmp_path)) == 1
    row = json.loads(path.read_text())
    assert row["figures"] == {"x": 1, "exit_code": 1}
    assert (row["commit"], row["dirty"]) == (None, None)


def test_a_bad_record_path_or_subject_fails_before_the_run(tmp_path: Path) -> None:
    def bench(args: argparse.Namespace) -> int:
        raise AssertionError("the bench must not run")

    os.symlink(tmp_path / "elsewhere", tmp_path / "results.jsonl")
    with pytest.raises(InputError, match="symbolic link"):
        record.recorded(bench)(_args(tmp_path))
    (tmp_path / "results.jsonl").unlink()
    with pytest.raises(InputError, match="TOPIC/NAME"):
        record.recorded(bench)(_args(tmp_path, record_as="quality"))
