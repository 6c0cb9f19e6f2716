"""How outputs are written (issue 74), in process: by rename, never through the old file; a
bench report like every other output; ``--config`` read with a cap even when its size lies
(the refusals, as a user meets them: the cli tier)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def test_outputs_are_written_by_rename_not_through_the_old_file(tmp_path: Path) -> None:
    """The writers replace the path itself (a new inode), so a file hard-linked elsewhere
    (or a link raced in after the check) never has its contents rewritten in place."""
    from speechpipe.evaluation.trace import write_trace
    from speechpipe.transport.subtitle_files import write_subtitles

    for name, write in (("t.jsonl", lambda p: write_trace(p, [{"event": "x"}])),
                        ("s.vtt", lambda p: write_subtitles(p, []))):
        path = tmp_path / name
        path.write_text("old\n")
        os.chmod(path, 0o640)
        os.link(path, tmp_path / f"{name}.other")
        write(path)
        assert (tmp_path / f"{name}.other").read_text() == "old\n"
        assert path.read_text() != "old\n"
        assert path.stat().st_mode & 0o777 == 0o640  # the file's own mode is kept
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "s.vtt", "s.vtt.other", "t.jsonl", "t.jsonl.other"]  # no temporary left


def test_config_read_is_capped_even_when_its_size_lies(tmp_path: Path) -> None:
    """A file that grows after its size was taken (here: /proc, whose files say 0 bytes) is
    still read no further than the cap."""
    from speechpipe.config_file import MAX_CONFIG_BYTES
    from speechpipe.errors import InputError
    from speechpipe.output_paths import read_bounded

    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (MAX_CONFIG_BYTES + 10))
    with pytest.raises(InputError, match="over 1024 KiB"):
        read_bounded(big, MAX_CONFIG_BYTES, "--config")
    assert read_bounded("/proc/self/status", 1 << 16, "x").startswith(b"Name:")


def test_a_bench_report_is_written_like_every_other_output(tmp_path: Path):
    """Issue 74 review: ``bench load|soak|cost|cascade --report`` wrote with a plain
    ``write_text``, through a symbolic link and into a FIFO (which blocks)."""
    from speechpipe.errors import InputError
    from speechpipe.transport.file_output import write_text_file

    target = tmp_path / "precious.txt"
    target.write_text("keep")
    (tmp_path / "link.json").symlink_to(target)
    os.mkfifo(tmp_path / "fifo.json")
    for name, what in (("link.json", "symbolic link"), ("fifo.json", "FIFO")):
        with pytest.raises(InputError, match=what):
            write_text_file(tmp_path / name, "{}", "the report")
    assert target.read_text() == "keep"
    report = tmp_path / "report.json"
    alias = tmp_path / "alias.json"
    report.write_text("old")
    os.link(report, alias)
    write_text_file(report, '{"new": 1}', "the report")
    assert report.read_text() == '{"new": 1}' and alias.read_text() == "old"  # by rename
