"""The alert rules: promtool's own checker and rule unit tests, and one runbook per alert.

promtool is built from the Go module proxy by `tests/monitoring/build-promtool.sh` (`make promtool`,
which `make e2e` runs; a cold build takes many minutes). `make test` runs these tests once promtool
is cached and skips them, saying so, before. The unit tests in prometheus-rules.test.yaml
feed each alert a series that must fire it next to a healthy one that must not.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.monitoring.promtool import BUILD_PROMTOOL, RULE_TESTS, RULES, promtool_path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


@pytest.fixture(scope="session")
def promtool() -> Path:
    path = promtool_path()
    if path is None:
        pytest.skip(f"promtool is not built; run {BUILD_PROMTOOL} (Go module proxy) or `make promtool`")
    return path


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_promtool_accepts_the_rules(promtool: Path) -> None:
    result = subprocess.run([str(promtool), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in result.stdout + result.stderr


def test_every_alert_fires_on_a_broken_series_and_not_on_a_healthy_one(promtool: Path) -> None:
    result = subprocess.run(
        [str(promtool), "test", "rules", str(RULE_TESTS)],
        capture_output=True,
        text=True,
        cwd=RULE_TESTS.parent,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_fails_a_rule_that_does_not_fire(promtool: Path, tmp_path: Path) -> None:
    """The unit tests can fail: with one alert's expression made impossible, promtool reports it."""
    rules = yaml.safe_load(RULES.read_text())
    rule = rules["groups"][0]["rules"][0]
    rule["expr"] = f"({rule['expr']}) and on () vector(0) > 1"
    broken = tmp_path / "rules.yaml"
    broken.write_text(yaml.safe_dump(rules))
    tests = yaml.safe_load(RULE_TESTS.read_text())
    tests["rule_files"] = [str(broken)]
    spec = tmp_path / "tests.yaml"
    spec.write_text(yaml.safe_dump(tests))
    result = subprocess.run([str(promtool), "test", "rules", str(spec)], capture_output=True, text=True)
    assert result.returncode != 0
    assert rule["alert"] in result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_silent_case() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    firing: set[str] = set()
    silent: set[str] = set()
    for group in tests:
        for case in group["alert_rule_test"]:
            (firing if case["exp_alerts"] else silent).add(case["alertname"])
    names = {rule["alert"] for rule in alerts()}
    assert names - firing == set(), "alerts without a firing test"
    assert names - silent == set(), "alerts without a silent test"


def test_every_alert_has_a_runbook_section() -> None:
    headings = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in DOCS.read_text().splitlines()
        if line.startswith("### ")
    }
    for rule in alerts():
        url = rule["annotations"]["runbook_url"]
        assert url == f"docs/operations.md#{rule['alert'].lower()}"
        assert rule["alert"].lower() in headings, f"no runbook section for {rule['alert']}"
        assert rule["labels"]["severity"] in {"warning", "critical"}
