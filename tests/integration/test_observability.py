"""Observability on the live stack: a real Prometheus scrapes every Meridian process under load, and
every recording rule, alert rule and dashboard expression works against what they really export.

Beside the module's pipeline (scheduler + two onnxruntime workers serving digits) this module starts the
registry, a Kairos planner and the fleet service for ``rm2`` (fed load statistics, so it plans and the fleet
starts an emulated worker), the consumer-lag exporter and a load generator.
"""
from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from kafka import TopicPartition

from schemas import AllocationPlan, LoadStatistics
from services.launcher import LocalLauncher, read_metric, wait_until
from services.observability import dashboards
from services.observability.lag_exporter import start_lag_exporter
from services.observability.promql import alert_names, recording_rule_names, rule_files
from services.stack import LocalStack
from shared.adapters import topics
from shared.adapters.client import MeridianClient
from shared.adapters.kafka_io import make_consumer, make_producer
from shared.sim.arrivals import deeprecsys_sizes
from tests.integration.helpers import digits_rows, make_query

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

PORTS = {"registry": 19341, "planner": 19342, "fleet": 19343, "lag_exporter": 19344, "loadgen": 19345}
KAIROS_ENV = {
    "MERIDIAN_PROFILE_SOURCES": json.dumps(["kairos"]),
    "MERIDIAN_APPLICATIONS": json.dumps({"rm2": ["rm2"]}),
    "MERIDIAN_PLANNER_MIN_QUERIES": "300",
    "MERIDIAN_PLANNER_BUDGET_PER_HOUR": "0.6",  # one g4dn.xlarge: a small emulated fleet on 2 cores
    "MERIDIAN_FLEET_METRICS_PORT_BASE": "19350",
}
#: the registry exports accuracy and prices of both catalogues (digits on cpu-1t, rm2 on EC2 types)
REGISTRY_ENV = {"MERIDIAN_PROFILE_SOURCES": json.dumps(["dir", "kairos"])}
APPLICATION = "digits"  # the value of the application dashboard's $application
NOT_PLANNED = ("digits has no planner: the Kairos planner places one variant per application and digits is a "
               "family of five, so the planner skips it (it plans rm2 here); see the planner dashboard for rm2")
#: dashboard panels whose metrics legitimately have no sample in this scenario, with the reason
NO_DATA = {
    ("meridian-application", "Planned cost"): NOT_PLANNED,
    ("meridian-application", "Planned workers by device"): NOT_PLANNED,
}
#: recording rules that legitimately have no sample in this scenario, with the reason
NO_DATA_RULES: dict[str, str] = {}
SCRAPE_WAIT_S = 60.0


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, path: str, **params: str) -> dict:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=10) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        return self.get("/api/v1/query", query=expr)["result"]


def has_values(result: list[dict]) -> bool:
    """Some sample is a number (a 0/0 NaN everywhere is no data)."""
    return any(not math.isnan(float(sample["value"][1])) for sample in result)


def eventually(check: Callable[[], list], timeout_s: float) -> list:
    """Call ``check`` (returns what is still wrong) until it returns nothing or time runs out."""
    deadline = time.monotonic() + timeout_s
    wrong = check()
    while wrong and time.monotonic() < deadline:
        time.sleep(1.0)
        wrong = check()
    return wrong


@pytest.fixture(scope="module")
def prometheus(stack: LocalStack) -> Prometheus:
    return Prometheus(f"http://127.0.0.1:{stack.prometheus_port}")


def send_digits(settings, count: int, rate: float) -> None:
    x, _ = digits_rows()
    rng = np.random.default_rng(11)
    with MeridianClient(settings) as client:
        sent = []
        for _ in range(count):
            query = make_query(x[rng.integers(0, len(x), size=int(rng.integers(1, 5)))])
            client.send(query)
            sent.append(query.query_id)
            time.sleep(1.0 / rate)
        client.flush()
        assert client.wait_for(sent, timeout_s=90), f"{len(set(sent) - set(client.results))} queries unanswered"


def plan_rm2(settings) -> AllocationPlan:
    """Feed the planner rm2 load statistics until it publishes a plan."""
    plans = make_consumer(settings, group_id=None, fetch_max_wait_ms=100)
    partition = TopicPartition(topics.PLANS, 0)
    plans.assign([partition])
    plans.seek_to_end(partition)
    plans.position(partition)
    producer = make_producer(settings)
    rng = np.random.default_rng(5)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            stats = LoadStatistics(application="rm2", window_s=2.0, arrival_rate_qps=100.0, queue_depth=0,
                                   batch_sizes=[int(s) for s in deeprecsys_sizes(200, rng)], at=time.time())
            producer.send(topics.LOAD_STATS, key=b"rm2", value=stats.model_dump_json().encode())
            producer.flush()
            for records in plans.poll(timeout_ms=500).values():
                return AllocationPlan.model_validate_json(records[-1].value)
        raise AssertionError("the planner published no plan for rm2 within 60 s")
    finally:
        plans.close()
        producer.close(timeout=5)


@pytest.fixture(scope="module")
def observed(pipeline: LocalLauncher, stack: LocalStack, settings, prometheus: Prometheus,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Every Meridian process running, scraped, under load; returns the plan the fleet applied."""
    with LocalLauncher(stack.env, tmp_path_factory.mktemp("observability-logs")) as launcher:
        started = [
            launcher.start_registry(metrics_port=PORTS["registry"], extra_env=REGISTRY_ENV),
            launcher.start_planner(metrics_port=PORTS["planner"], extra_env=KAIROS_ENV),
            launcher.start_fleet(metrics_port=PORTS["fleet"], extra_env=KAIROS_ENV),
            start_lag_exporter(launcher, metrics_port=PORTS["lag_exporter"], interval_s=1.0),
            launcher.start_service("loadgen", "services.loadgen", "--rate", "10", "--duration", "900",
                                   "--slo-ms", "1000", "--drain-s", "1", metrics_port=PORTS["loadgen"],
                                   extra_env={"MERIDIAN_LOADGEN_METRICS_PORT": str(PORTS["loadgen"])}),
        ]
        for process in started:
            wait_until(lambda p=process: read_metric(p.metrics_port, "python_info") is not None, 90,
                       f"{process.name} metrics", [process])
        wait_until(lambda: (read_metric(PORTS["registry"], "meridian_registry_ready") or 0) >= 1, 90,
                   "the registry to be ready", started)
        send_digits(settings, count=400, rate=40.0)
        plan = plan_rm2(settings)
        # a registration that cannot be read: rejected, replied and dead-lettered by the registry
        producer = make_producer(settings)
        producer.send(topics.REGISTRATIONS, value=b'{"request_id": "obs-bad", "model_name": 7}')
        producer.flush()
        producer.close(timeout=5)
        devices = [p.device for p in plan.placements]
        wait_until(lambda: (read_metric(PORTS["fleet"], "meridian_fleet_workers") or 0) >= len(devices), 90,
                   "the fleet to start the plan's workers", started)
        wait_until(lambda: (read_metric(PORTS["registry"], "meridian_registry_registrations_total") or 0) >= 1, 60,
                   "the registry to reject the bad registration", started)
        yield {"plan": plan, "launcher": launcher}


def test_every_scrape_target_is_up(observed, prometheus: Prometheus) -> None:
    expected = {"scheduler", "worker-it-w1", "worker-it-w2", "registry", "planner", "fleet", "lag_exporter", "loadgen"}
    emulated = len(observed["plan"].placements)

    def wrong() -> list:
        targets = prometheus.get("/api/v1/targets")["activeTargets"]
        processes = {t["labels"].get("process") for t in targets}
        down = [(t["labels"].get("process"), t["lastError"]) for t in targets if t["health"] != "up"]
        fleet_workers = {p for p in processes if p and p.startswith("worker-") and p not in expected}
        return down + [f"not scraped: {p}" for p in expected - processes] + (
            [f"fleet workers scraped: {sorted(fleet_workers)}"] if len(fleet_workers) < emulated else [])

    assert not eventually(wrong, SCRAPE_WAIT_S)


def test_every_recording_rule_returns_data(observed, prometheus: Prometheus) -> None:
    names = sorted(recording_rule_names())
    assert set(NO_DATA_RULES) <= set(names), "NO_DATA_RULES names a rule that does not exist"
    wanted = [name for name in names if name not in NO_DATA_RULES]
    assert not eventually(lambda: [n for n in wanted if not has_values(prometheus.query(n))], SCRAPE_WAIT_S)


def test_every_dashboard_expression_returns_data(observed, prometheus: Prometheus) -> None:
    expressions = list(dashboards.expressions())
    panels = {(uid, title) for uid, title, _ in expressions}
    assert set(NO_DATA) <= panels, f"NO_DATA names panels that do not exist: {set(NO_DATA) - panels}"
    wanted = [(uid, title, expr.replace("$application", APPLICATION)) for uid, title, expr in expressions
              if (uid, title) not in NO_DATA and not title.startswith("$")]

    def empty() -> list:
        return [(uid, title, expr) for uid, title, expr in wanted if not has_values(prometheus.query(expr))]

    assert not eventually(empty, SCRAPE_WAIT_S)
    # the template variable lists the application
    for uid, title, query in expressions:
        if title.startswith("$"):
            metric = query.split("(", 1)[1].split(",", 1)[0].strip()
            label = query.rsplit(",", 1)[1].strip(" )")
            assert APPLICATION in prometheus.get(f"/api/v1/label/{label}/values", **{"match[]": metric}), uid


def test_alert_rules_load_and_evaluate(observed, prometheus: Prometheus) -> None:
    def wrong() -> list:
        groups = prometheus.get("/api/v1/rules")["groups"]
        loaded = {rule["name"]: rule for group in groups for rule in group["rules"]}
        missing = (alert_names() | recording_rule_names()) - set(loaded)
        unhealthy = [(name, rule.get("health"), rule.get("lastError")) for name, rule in loaded.items()
                     if rule.get("health") != "ok"]
        return [f"not loaded: {sorted(missing)}"] * bool(missing) + unhealthy

    assert not eventually(wrong, SCRAPE_WAIT_S)
    if shutil.which("promtool"):
        result = subprocess.run(["promtool", "check", "rules", *map(str, rule_files())], capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr


def test_no_fleet_or_kafka_alert_fires_on_the_healthy_pipeline(observed, prometheus: Prometheus) -> None:
    """Every process is up, lag is collected and the plan was feasible. (SLO and dead-letter alerts are left
    out: earlier modules of the session deliberately send bad input through this Prometheus's targets.)"""
    watched = {"MeridianWorkerDown", "MeridianNoLiveWorkers", "MeridianTargetDown", "MeridianConsumerLagGrowing",
               "MeridianLagExporterFailing", "MeridianPlannerInfeasible"}

    def firing() -> list:
        return [a["labels"] for a in prometheus.get("/api/v1/alerts")["alerts"]
                if a["labels"]["alertname"] in watched and a["state"] in ("firing", "pending")]

    assert not eventually(firing, SCRAPE_WAIT_S)


def test_the_numbers_are_plausible(observed, prometheus: Prometheus) -> None:
    plan = observed["plan"]
    real_workers_cost = 2 * 0.0425  # two real cpu-1t workers at the profiled $0.0425/h
    checks = {  # expression -> what its (first) value must satisfy
        "meridian:effective_accuracy:ratio_rate1m": lambda v: 0.97 <= v <= 1.0,  # the digits variants' accuracies
        "meridian:fleet_planned_cost_dollars_per_hour:sum": lambda v: v == pytest.approx(plan.cost_per_hour),
        "meridian:fleet_running_cost_dollars_per_hour:sum":
            lambda v: v == pytest.approx(real_workers_cost + plan.cost_per_hour),
        "meridian:cost_per_1k_queries_dollars:rate5m": lambda v: 0 < v < 1,
        f'application:meridian_slo_attainment:ratio_rate1m{{application="{APPLICATION}"}}': lambda v: v > 0.9,
        'count(meridian_worker_info{emulated="true"} == 1)': lambda v: v == len(plan.placements),
        'sum(meridian_kafka_consumer_lag_messages{group="meridian.worker.it-w1"})': lambda v: v >= 0,
        'meridian_kafka_consumer_group_members{group="meridian-scheduler"}': lambda v: v >= 1,
    }

    def wrong() -> list:
        values = {expr: [float(s["value"][1]) for s in prometheus.query(expr)] for expr in checks}
        return [(expr, got) for expr, got in values.items() if not got or not checks[expr](got[0])]

    assert not eventually(wrong, SCRAPE_WAIT_S)
