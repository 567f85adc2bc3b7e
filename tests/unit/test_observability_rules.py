"""Prometheus rules: promtool accepts them, their unit tests pass, and every stack loads them."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from services.observability.promql import RULES_DIR, iter_rules, rule_files
from shared.settings import REPO_ROOT

PROMETHEUS_DIR = REPO_ROOT / "infra" / "prometheus"
RULE_TESTS = sorted((PROMETHEUS_DIR / "tests").glob("*.test.yml"))
promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")


def test_there_are_recording_and_alert_rules() -> None:
    rules = [rule for _, rule in iter_rules()]
    assert rule_files() and any("record" in r for r in rules) and any("alert" in r for r in rules)


@promtool
def test_promtool_checks_the_rules() -> None:
    result = subprocess.run(["promtool", "check", "rules", *map(str, rule_files())], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@promtool
def test_the_rules_unit_tests_pass() -> None:
    assert RULE_TESTS, "infra/prometheus/tests/*.test.yml is missing"
    result = subprocess.run(["promtool", "test", "rules", *map(str, RULE_TESTS)], capture_output=True, text=True,
                            timeout=120, cwd=PROMETHEUS_DIR)
    assert result.returncode == 0, result.stdout + result.stderr


def test_rule_names_are_unique_and_follow_the_conventions() -> None:
    records = [rule["record"] for _, rule in iter_rules() if "record" in rule]
    alerts = [rule["alert"] for _, rule in iter_rules() if "alert" in rule]
    assert len(records) == len(set(records)) and len(alerts) == len(set(alerts))
    for name in records:  # level:metric:operations
        assert re.fullmatch(r"[a-z_]+:[a-z0-9_]+:[a-z0-9_]+", name), name
    for name in alerts:
        assert re.fullmatch(r"Meridian[A-Za-z0-9]+", name), name


def test_every_alert_says_how_bad_and_what_happened() -> None:
    for path, rule in iter_rules():
        if "alert" in rule:
            assert rule.get("labels", {}).get("severity") in {"page", "ticket", "info"}, (path.name, rule["alert"])
            assert {"summary", "description"} <= set(rule.get("annotations", {})), (path.name, rule["alert"])


def test_the_brief_s_alerts_exist() -> None:
    alerts = {rule["alert"]: rule["expr"] for _, rule in iter_rules() if "alert" in rule}
    assert {"MeridianSLOBurnRateFast", "MeridianSLOBurnRateSlow", "MeridianConsumerLagGrowing",
            "MeridianWorkerDown", "MeridianNoLiveWorkers", "MeridianPlannerInfeasible"} <= set(alerts)
    assert "up{" in alerts["MeridianWorkerDown"] and "== 0" in alerts["MeridianWorkerDown"]
    assert "absent(meridian_worker_info" in alerts["MeridianNoLiveWorkers"]
    assert 'meridian_plans_total{status="infeasible"}' in alerts["MeridianPlannerInfeasible"]


def test_the_local_and_compose_prometheus_load_every_rule_file() -> None:
    template = (PROMETHEUS_DIR / "prometheus.local.yml.template").read_text()
    script = (PROMETHEUS_DIR / "prometheus.sh").read_text()
    assert '"@RULES_DIR@/*.yml"' in template and "RULES_DIR@|$here/rules" in script
    compose_config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.compose.yml").read_text())
    assert compose_config["rule_files"] == ["/etc/prometheus/rules/*.yml"]
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    assert "./infra/prometheus/rules:/etc/prometheus/rules:ro" in compose["services"]["prometheus"]["volumes"]
    assert all(path.parent == RULES_DIR and path.suffix == ".yml" for path in rule_files())


@promtool
def test_promtool_checks_the_compose_config_with_the_rules(tmp_path) -> None:
    """The compose config, with its rule path pointed at the repository's rules."""
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.compose.yml").read_text())
    config["rule_files"] = [str(RULES_DIR / "*.yml")]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    result = subprocess.run(["promtool", "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_runs_and_scrapes_the_lag_exporter_with_service_labels() -> None:
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())["services"]
    command = compose["lag-exporter"]["command"]
    assert command[:3] == ["python", "-m", "services.observability.lag_exporter"]
    port = int(command[command.index("--metrics-port") + 1])
    assert f"127.0.0.1:{port}:{port}" in compose["lag-exporter"]["ports"]
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.compose.yml").read_text())
    static = [sc for job in config["scrape_configs"] for sc in job["static_configs"]]
    assert any(f"lag-exporter:{port}" in sc["targets"] for sc in static)
    assert all(sc.get("labels", {}).get("service") for sc in static), "alerts select targets by `service`"
    assert {sc["labels"]["service"] for sc in static} >= {"scheduler", "worker", "lag_exporter"}
