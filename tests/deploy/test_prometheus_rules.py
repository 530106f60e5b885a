"""Checks of the Prometheus configuration, rules and rule unit tests in deploy/prometheus/."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PROM_DIR = REPO / "deploy" / "prometheus"
RULE_FILES = sorted((PROM_DIR / "rules").glob("*.yml"))
RULE_TESTS = sorted((PROM_DIR / "tests").glob("*.yml"))
CONFIGS = [PROM_DIR / "prometheus.yml", PROM_DIR / "prometheus-compose.yml"]


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.fail("promtool not found; install Debian's `prometheus` package")
    return subprocess.run(
        [exe, *args], cwd=PROM_DIR, capture_output=True, text=True, timeout=120, check=False
    )


def _rules() -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for path in RULE_FILES:
        doc = yaml.safe_load(path.read_text())
        for group in doc["groups"]:
            rules.extend(group["rules"])
    return rules


def _alert_names() -> list[str]:
    return [r["alert"] for r in _rules() if "alert" in r]


@pytest.mark.apt
@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_promtool_check_config_accepts_scrape_config(config: Path) -> None:
    """`promtool check config` accepts each scrape config, including the rule files it loads."""
    proc = _promtool("check", "config", str(config))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.apt
def test_promtool_check_rules_accepts_every_rule_file() -> None:
    """`promtool check rules` accepts the recording and alerting rule files."""
    assert RULE_FILES, "no rule files found"
    proc = _promtool("check", "rules", *map(str, RULE_FILES))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.apt
def test_promtool_rule_unit_tests_pass() -> None:
    """`promtool test rules` passes for every unit-test file in deploy/prometheus/tests/."""
    assert RULE_TESTS, "no rule test files found"
    proc = _promtool("test", "rules", *map(str, RULE_TESTS))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAILED" not in proc.stdout


def test_every_alert_has_firing_and_silent_unit_test_cases() -> None:
    """Each alert rule is unit-tested at least once expecting alerts and once expecting none."""
    firing: set[str] = set()
    silent: set[str] = set()
    for path in RULE_TESTS:
        doc = yaml.safe_load(path.read_text())
        for case in doc["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else silent).add(check["alertname"])
    alerts = set(_alert_names())
    assert alerts, "no alert rules found"
    assert alerts - firing == set(), "alerts without a firing test case"
    assert alerts - silent == set(), "alerts without a not-firing test case"


def test_every_recording_rule_is_exercised_by_a_unit_test() -> None:
    """Each recording rule appears in a promtool unit test or in another rule's expression."""
    records = [r["record"] for r in _rules() if "record" in r]
    tested = "\n".join(p.read_text() for p in RULE_TESTS)
    used = "\n".join(r["expr"] for r in _rules())
    missing = [name for name in records if name not in tested and name not in used]
    assert missing == []


def test_alerts_have_severity_summary_and_runbook_in_operations_doc() -> None:
    """Every alert has a severity, a summary and a runbook anchor present in docs/operations.md."""
    doc = (REPO / "docs" / "operations.md").read_text().lower()
    for rule in _rules():
        if "alert" not in rule:
            continue
        name = rule["alert"]
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}, name
        assert rule["annotations"]["summary"], name
        anchor = rule["annotations"]["runbook_url"].split("#", 1)[1]
        assert anchor == name.lower()
        assert f"### {name.lower()}" in doc, f"{name} missing from docs/operations.md"


def test_scrape_config_targets_exporter_default_port() -> None:
    """The default scrape config has job aaco-exporter with target localhost:9464."""
    cfg = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    targets = jobs["aaco-exporter"]["static_configs"][0]["targets"]
    assert targets == ["localhost:9464"]
