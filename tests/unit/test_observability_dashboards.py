"""Grafana dashboards: generated from shared/metrics.py, committed as generated, well formed."""
from __future__ import annotations

import json

import pytest
import yaml

from services.observability import dashboards
from services.observability.promql import recording_rule_names
from shared import metrics
from shared.settings import REPO_ROOT

GRAFANA = REPO_ROOT / "infra" / "grafana" / "provisioning"


def committed() -> dict[str, dict]:
    return {name: json.loads((dashboards.OUT_DIR / name).read_text()) for name in dashboards.DASHBOARDS}


def test_committed_files_are_what_the_generator_writes() -> None:
    stale = dashboards.drift()
    assert not stale, f"out of date: {stale}; run `make dashboards` (python -m services.observability.dashboards)"


def test_the_four_dashboards_exist_with_stable_uids() -> None:
    boards = committed()
    assert {b["uid"] for b in boards.values()} == {"meridian-overview", "meridian-application", "meridian-fleet",
                                                   "meridian-planner"}
    assert len({b["title"] for b in boards.values()}) == 4


def test_a_renamed_metric_changes_the_generated_dashboards(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics.RESULTS, "_name", "meridian_renamed_results")
    text = "".join(dashboards.render().values())
    assert "meridian_renamed_results_total" in text and "meridian_results_total" not in text
    assert dashboards.drift(), "a rename must make the committed JSON stale"


def test_names_are_taken_by_metric_type() -> None:
    assert dashboards.total(metrics.RESULTS) == "meridian_results_total"
    assert dashboards.bucket(metrics.QUERY_LATENCY) == "meridian_query_latency_seconds_bucket"
    with pytest.raises(TypeError, match="gauge, not a counter"):
        dashboards.total(metrics.QUEUE_DEPTH)


def test_the_recording_rules_the_dashboards_read_exist() -> None:
    missing = dashboards.Rules.names() - recording_rule_names()
    assert not missing, f"dashboards read recording rules that infra/prometheus/rules does not define: {missing}"


def test_panels_are_well_formed() -> None:
    datasource = yaml.safe_load((GRAFANA / "datasources" / "prometheus.yml").read_text())["datasources"][0]
    for name, board in committed().items():
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)), name
        for panel in board["panels"]:
            grid = panel["gridPos"]
            assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, (name, panel["title"])
            if panel["type"] == "row":
                continue
            assert panel["datasource"]["uid"] == datasource["uid"], (name, panel["title"])
            assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), (name, panel["title"])
            assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"])


def test_the_application_dashboard_is_filtered_by_its_variable() -> None:
    board = committed()["meridian-application.json"]
    assert [v["name"] for v in board["templating"]["list"]] == ["application"]
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            assert 'application="$application"' in target["expr"], panel["title"]


def test_grafana_provisions_the_dashboards_where_compose_mounts_them() -> None:
    provider = yaml.safe_load((dashboards.OUT_DIR / dashboards.PROVISIONING_FILE).read_text())["providers"][0]
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    mount = next(v for v in compose["services"]["grafana"]["volumes"] if v.startswith("./infra/grafana/provisioning:"))
    container_root = mount.split(":")[1]
    assert provider["options"]["path"] == f"{container_root}/dashboards"
    assert provider["type"] == "file"
