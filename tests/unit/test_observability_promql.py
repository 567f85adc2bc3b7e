"""Every PromQL expression (rules, dashboards) reads only metrics Meridian exports or records."""
from __future__ import annotations

import pytest

from services.observability import dashboards
from services.observability.promql import (
    exported_sample_names,
    iter_rules,
    known_names,
    referenced_metric_names,
    unknown_metric_names,
)


@pytest.mark.parametrize("expr, names", [
    ('rate(meridian_results_total{status="ok", application=~"digits|rm2"}[5m])', {"meridian_results_total"}),
    ('sum without (instance) (a) / ignoring (le) group_right (x) b', {"a", "b"}),
    ('max_over_time(deriv(lag[5m])[30m:1m]) > bool 10', {"lag"}),
    ("up offset 5m unless on () absent(other == 1)", {"up", "other"}),
    ('label_replace(m, "dst", "$1", "src", "(.*)") * 1e3 + Inf', {"m"}),
    ('meridian:cost:rate5m{application="$application"} / ${budget}', {"meridian:cost:rate5m"}),
    ("label_values(meridian_results_total, application)", {"meridian_results_total"}),
    ("time() - meridian_planner_last_plan_timestamp_seconds", {"meridian_planner_last_plan_timestamp_seconds"}),
])
def test_referenced_names(expr: str, names: set[str]) -> None:
    assert referenced_metric_names(expr) == names


def test_exported_names_cover_every_sample_suffix() -> None:
    names = exported_sample_names()
    assert {"meridian_results_total", "meridian_query_latency_seconds_bucket", "meridian_query_latency_seconds_sum",
            "meridian_query_latency_seconds_count", "meridian_queue_depth", "meridian_kafka_consumer_lag_messages",
            "meridian_fleet_cost_dollars_per_hour"} <= names
    assert "meridian_results" not in names and "meridian_queue_depth_total" not in names


def test_an_unknown_name_is_reported() -> None:
    assert unknown_metric_names("rate(meridian_no_such_thing_total[1m]) + up + process_cpu_seconds_total",
                                known_names()) == {"meridian_no_such_thing_total"}


def test_every_rule_reads_only_known_metrics() -> None:
    known = known_names()
    bad = {(path.name, rule.get("record") or rule.get("alert")): unknown_metric_names(rule["expr"], known)
           for path, rule in iter_rules()}
    assert not {k: v for k, v in bad.items() if v}


def test_every_dashboard_expression_reads_only_known_metrics() -> None:
    known = known_names()
    bad = {(uid, title, expr): unknown_metric_names(expr, known) for uid, title, expr in dashboards.expressions()}
    assert not {k: v for k, v in bad.items() if v}
    assert sum(1 for _ in dashboards.expressions()) > 40
