"""docs/benchmarks.md's "Current figures" and the README's figures are generated from the
results file (issue 73): the committed documents say what the committed rows generate, and
the generator keeps the newest row per subject and machine. No model, no subprocess."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from speechpipe.bench.results import parse_rows
from speechpipe.bench.tables import (
    DOCUMENTS,
    RESULTS,
    current_rows,
    generate,
    main,
    render_readme,
    render_table,
    replace_blocks,
)
from tests.helpers import ROOT


def _anchors(markdown: str) -> set[str]:
    """A document's heading anchors as GitHub makes them (as tests/unit/house/test_doc_paths.py)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", re.sub(r"```.*?```", "", markdown, flags=re.S),
                              re.M):
        base = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def _rows() -> list[dict[str, Any]]:
    return parse_rows((ROOT / RESULTS).read_text(encoding="utf-8"), RESULTS)


def test_the_committed_documents_are_what_the_committed_rows_generate() -> None:
    stale = [name for name, (now, new) in generate(ROOT).items() if now != new]
    assert stale == [], (f"{stale} differ from {RESULTS}: run python -m speechpipe.bench.tables "
                         "(and edit rows, not the generated blocks)")


def test_every_row_has_a_subject_a_named_machine_and_its_sections_resolve() -> None:
    rows = _rows()
    assert len(rows) >= 20
    for row in rows:
        assert "/" in row["subject"], row["subject"]
        assert row["machine"]["name"] and row["machine"]["label"]
        assert re.fullmatch(r"\d{4}-\d\d-\d\d(T\d\d:\d\d:\d\dZ)?", str(row["date"])), row["date"]
        assert row["commit"] is None or len(row["commit"]) >= 7
    sections = {row["section"] for row in rows if row["section"]}
    docs = ROOT / "docs"
    for section in sections:  # relative to docs/benchmarks.md, where the table is
        path, _, anchor = section.partition("#")
        text = (docs / (path or "benchmarks.md")).read_text(encoding="utf-8")
        assert anchor in _anchors(text), section


def test_the_benchmarks_file_is_short_and_its_headings_name_subjects() -> None:
    text = (ROOT / "docs/benchmarks.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 600, "move round-by-round notes to benchmarks-history.md"
    headings = re.findall(r"^#{2,4} (.+)$", re.sub(r"```.*?```", "", text, flags=re.S), re.M)
    rounds = [h for h in headings if re.search(r"\bissues? \d|\bround\b|\b20\d\d-\d\d-\d\d", h)]
    assert rounds == [], "headings name subjects, not rounds, issues or dates"
    assert "benchmarks-history.md" in text


def _row(subject: str, date: str, machine: str = "m-1c", **extra: Any) -> dict[str, Any]:
    return {"schema": 1, "date": date, "command": "speechpipe eval m.jsonl", "subject": subject,
            "commit": None, "dirty": None, "machine": {"name": machine, "label": f"Box {machine}"},
            "load": None, "decoder": None, "figures": {}, "summary": f"{subject} {date}",
            "what": subject, "section": None, "readme": None, **extra}


def test_the_newest_row_per_subject_and_machine_is_current() -> None:
    rows = [_row("quality/a", "2026-12-01"), _row("quality/a", "2026-12-03"),
            _row("quality/a", "2026-12-02", machine="other-2c"),
            _row("tests/suite", "2026-12-09"), _row("load/b", "2026-12-03"),
            _row("quality/a", "2026-12-03T01:00:00Z")]  # the same day with a time: newer
    assert [(r["subject"], r["date"], r["machine"]["name"]) for r in current_rows(rows)] == [
        ("quality/a", "2026-12-03T01:00:00Z", "m-1c"), ("load/b", "2026-12-03", "m-1c"),
        ("quality/a", "2026-12-02", "other-2c"), ("tests/suite", "2026-12-09", "m-1c")]
    # two rows of one day without a time: the later line is the newer (rows are appended)
    same_day = [_row("quality/a", "2026-12-03"), _row("quality/a", "2026-12-03")]
    same_day[1]["summary"] = "second"
    assert [r["summary"] for r in current_rows(same_day)] == ["second"]


def test_table_cells_carry_commit_load_and_decoder_and_escape_pipes() -> None:
    row = _row("load/starts", "2026-12-08T10:00:00Z", commit="abc1234", dirty=True,
               load={"before": 0.2, "after": 1.5}, summary="a | b", section="#x",
               command="speechpipe bench load --variant a|b",
               decoder=[{"part": "asr", "path": "native", "kernel": "in-place int8 step "
                         "(AVX2 kernel)", "note": ""}])
    table = render_table([row]).splitlines()
    assert table[:2] == ["| what | command | figure |", "|---|---|---|"]
    assert table[2] == (
        "| load/starts ([section](#x)) | `speechpipe bench load --variant a\\|b` | a \\| b "
        "(commit abc1234 (dirty), load 0.2 before, 1.5 after, decoder ASR native, in-place "
        "int8 step (AVX2 kernel)) |")
    converted = _row("x/y", "2026-12-01", command="`a`; `b` (notes)")
    assert "| `a`; `b` (notes) |" in render_table([converted])


def test_the_readme_block_quotes_the_named_machine_first_and_keeps_its_subjects() -> None:
    rows = [_row("load/starts", "2026-12-05", readme=["**Eight sessions**: 3.5 s."]),
            _row("rooms/1000", "2026-12-05", readme=["1000 listeners: 37 ms."]),
            _row("quality/x", "2026-12-06", readme=["**Quality**: BLEU 35."]),
            _row("quality/x", "2026-12-04", machine="avx2-2c", readme=["**AVX2**: 0.58."]),
            _row("quality/y", "2026-12-06")]  # quoted nowhere
    block = render_readme(rows, "m-1c", width=60).splitlines()
    assert block == [
        "Current figures: a **Box m-1c**, 2026-12-05/06",
        "([docs/benchmarks.md](docs/benchmarks.md#current-figures):",
        "commands, commits, other machines).",
        "- **Quality**: BLEU 35.",
        "- **Eight sessions**: 3.5 s. 1000 listeners: 37 ms.",  # a bullet without ** goes on
        "- **AVX2**: 0.58."]
    # a newer row of a quoted subject replaces its bullet, by its summary if it has none
    newer = [*rows, _row("quality/x", "2026-12-07")]
    assert "- **quality/x** (2026-12-07, Box m-1c): quality/x 2026-12-07" in \
        render_readme(newer, "m-1c", width=200)
    with pytest.raises(ValueError, match="no current row of machine 'nobody'"):
        render_readme(rows, "nobody")


def test_blocks_are_replaced_between_their_markers_only() -> None:
    rows = [_row("quality/x", "2026-12-06", readme=["**Quality**: BLEU 35."])]
    text = ("# Doc\n\nbefore\n<!-- generated: readme-figures, machine m-1c, note -->\nold\n"
            "lines\n<!-- end generated -->\nafter\n")
    new = replace_blocks(text, rows, "doc")
    assert new.startswith("# Doc\n\nbefore\n<!-- generated: readme-figures, machine m-1c, "
                          "note -->\nCurrent figures: a **Box m-1c**, 2026-12-06")
    assert new.endswith("- **Quality**: BLEU 35.\n<!-- end generated -->\nafter\n")
    assert replace_blocks(new, rows, "doc") == new
    with pytest.raises(ValueError, match="no <!-- generated"):
        replace_blocks("# nothing\n", rows, "doc")
    with pytest.raises(ValueError, match="unknown generated block 'other'"):
        replace_blocks("<!-- generated: other -->\n<!-- end generated -->\n", rows, "doc")
    with pytest.raises(ValueError, match="names no machine"):
        replace_blocks("<!-- generated: readme-figures -->\n<!-- end generated -->\n", rows,
                       "doc")


def test_check_and_write_on_a_copy_of_the_checkout(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    for name in (RESULTS, *DOCUMENTS):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((ROOT / name).read_text(encoding="utf-8"),
                                     encoding="utf-8")
    assert main(["--check", "--root", str(tmp_path)]) == 0
    rows = _rows()
    newest = copy.deepcopy(next(r for r in rows if r["readme"] and
                                r["machine"]["name"] == "epyc-avx512-vnni-2c"))
    newest.update(date="2026-12-31", summary="a newer figure", readme=None)
    from speechpipe.bench.results import dump_row

    with (tmp_path / RESULTS).open("a", encoding="utf-8") as fh:
        fh.write(dump_row(newest) + "\n")
    assert main(["--check", "--root", str(tmp_path)]) == 1
    assert "docs/benchmarks.md: differs" in capsys.readouterr().out
    assert main(["--root", str(tmp_path)]) == 0
    assert main(["--check", "--root", str(tmp_path)]) == 0
    assert "a newer figure" in (tmp_path / "docs/benchmarks.md").read_text(encoding="utf-8")
    assert "2026-12-31" in (tmp_path / "README.md").read_text(encoding="utf-8")
