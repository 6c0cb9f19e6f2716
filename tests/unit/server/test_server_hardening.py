"""Server hardening (issue 10): ``serve``'s bad ``--allow-origin`` or ``--allow-host`` is one
line and exit code 2."""

from __future__ import annotations

import pytest


def test_bad_allow_origin_or_host_is_one_line_rc_2(capsys: pytest.CaptureFixture[str]) -> None:
    from speechpipe.cli import main

    assert main(["serve", "--allow-origin", "example.com"]) == 2
    assert main(["serve", "--allow-host", "a/b"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "--allow-origin" in err[0] and "--allow-host" in err[1], err
