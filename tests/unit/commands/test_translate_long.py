"""``speechpipe translate`` on long inputs: a progress bar only on a terminal and only for
long inputs, showing tenths (issue 16.5; the real long run: the slow tier)."""

from __future__ import annotations

from speechpipe.file_translation import PROGRESS_FORMAT, progress_bar_options


def test_progress_bar_only_on_a_terminal_and_only_for_long_inputs():
    assert progress_bar_options(120.5, is_tty=False) is None
    assert progress_bar_options(10.0, is_tty=True) is None
    options = progress_bar_options(120.54, is_tty=True)
    assert options is not None and options["total"] == 120.5


def test_progress_bar_shows_tenths_not_float_noise():
    from tqdm import tqdm

    options = progress_bar_options(120.5, is_tty=True)
    assert options is not None
    line = tqdm.format_meter(n=0.12000000000000001, total=options["total"], elapsed=1.0,
                             bar_format=PROGRESS_FORMAT, prefix="replaying", ncols=100)
    assert "0.1/120.5 s" in line
    assert "0.12000000000000001" not in line
