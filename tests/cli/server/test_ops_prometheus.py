"""The alert rules in docs/ops/ through the real ``promtool`` (their unit tests included)."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest
import yaml

from tests.helpers import ROOT

OPS = ROOT / "docs" / "ops"
ALERTS = OPS / "alerts.yml"
RULE_TESTS = OPS / "alerts_test.yml"

PROMTOOL = shutil.which("promtool")


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


# -- alert rules -------------------------------------------------------------------------------
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
