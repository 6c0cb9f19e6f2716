"""The alert rules in docs/ops/ through the real ``promtool`` (their unit tests included)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.helpers import ROOT

OPS = ROOT / "docs" / "ops"
ALERTS = OPS / "alerts.yml"
RULE_TESTS = OPS / "alerts_test.yml"

PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian: apt-get install "
                                             "prometheus)")
def test_alert_rules_pass_promtool_and_their_unit_tests() -> None:
    assert PROMTOOL is not None
    for args in (["check", "rules", str(ALERTS)], ["test", "rules", str(RULE_TESTS)],
                 ["check", "config", str(OPS / "prometheus.yml")]):
        done = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120,
                              check=False)
        assert done.returncode == 0, f"promtool {' '.join(args)}:\n{done.stdout}{done.stderr}"
        assert "SUCCESS" in done.stdout + done.stderr
