"""The operations files in docs/ops/: every alert has a summary, a runbook section and rule
tests (``promtool`` runs them: the cli tier; the dashboard's queries: the slow tier)."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.helpers import ROOT

OPS = ROOT / "docs" / "ops"
ALERTS = OPS / "alerts.yml"
RULE_TESTS = OPS / "alerts_test.yml"

RUNBOOK = OPS / "runbook.md"


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_every_alert_has_a_summary_a_runbook_section_and_rule_tests() -> None:
    runbook = RUNBOOK.read_text()
    anchors = {re.sub(r"[^a-z0-9]", "", heading.lower())
               for heading in re.findall(r"^## (.+)$", runbook, re.M)}
    sections = re.split(r"^## ", runbook, flags=re.M)
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired: set[str] = set()
    quiet: set[str] = set()
    for group in tests:
        for case in group["alert_rule_test"]:
            (fired if case["exp_alerts"] else quiet).add(case["alertname"])
    names = [rule["alert"] for rule in alerts()]
    assert len(names) >= 9
    for rule in alerts():
        name = rule["alert"]
        annotations = rule["annotations"]
        assert annotations.get("summary"), name
        link = annotations["runbook"]
        assert link.startswith("docs/ops/runbook.md#"), name
        anchor = link.split("#", 1)[1]
        assert anchor in anchors, f"{name}: no runbook section for #{anchor}"
        section = next(s for s in sections if re.sub(r"[^a-z0-9]", "", s.split("\n", 1)[0]
                                                      .lower()) == anchor)
        for part in ("What it means", "What to look at", "What to do"):
            assert f"**{part}.**" in section, f"{name}: runbook section lacks '{part}'"
        assert name in fired, f"{name}: no rule test where it fires"
        assert name in quiet, f"{name}: no rule test where it stays quiet"
