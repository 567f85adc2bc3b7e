"""Meridian's Grafana dashboards, generated from the metric objects of ``shared.metrics``.

Every expression names its metrics through the objects (``total(metrics.RESULTS)`` is
``meridian_results_total``) or through the recording rules of ``infra/prometheus/rules/``, so a renamed
or removed metric breaks this module and its tests, not a dashboard in production. Writes
``infra/grafana/provisioning/dashboards/*.json`` and the provisioning file that loads them; a unit test
fails when the committed files differ from what this module generates.

Run: ``python -m services.observability.dashboards`` (write) or ``... --check`` (exit 1 on drift);
``make dashboards`` does the former.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path

from prometheus_client.metrics import MetricWrapperBase

from shared import metrics
from shared.settings import REPO_ROOT

OUT_DIR = REPO_ROOT / "infra" / "grafana" / "provisioning" / "dashboards"
#: where docker-compose.yml mounts infra/grafana/provisioning in the Grafana container
CONTAINER_DIR = "/etc/grafana/provisioning/dashboards"
#: the provisioned data source (infra/grafana/provisioning/datasources/prometheus.yml)
DATASOURCE = {"type": "prometheus", "uid": "prometheus"}
PROVISIONING_FILE = "meridian.yml"
#: the SLO objective of the burn-rate alerts (infra/prometheus/rules/meridian-alerts.yml): 99% -> budget 1%
ERROR_BUDGET = 0.01


# --- metric names, from the objects --------------------------------------------------------------------

def _of_type(metric: MetricWrapperBase, kind: str) -> str:
    if metric._type != kind:
        raise TypeError(f"`{metric._name}` is a {metric._type}, not a {kind}")
    return metric._name


def total(counter: MetricWrapperBase) -> str:
    """The sample name of a counter (``_total``)."""
    return _of_type(counter, "counter") + "_total"


def gauge(metric: MetricWrapperBase) -> str:
    return _of_type(metric, "gauge")


def bucket(histogram: MetricWrapperBase) -> str:
    return _of_type(histogram, "histogram") + "_bucket"


def hsum(histogram: MetricWrapperBase) -> str:
    return _of_type(histogram, "histogram") + "_sum"


def hcount(histogram: MetricWrapperBase) -> str:
    return _of_type(histogram, "histogram") + "_count"


class Rules:
    """Recording rules of infra/prometheus/rules/meridian-recording.yml the dashboards read."""

    RESULTS_BY_STATUS = "application_status:meridian_results:rate1m"
    RESULTS = "application:meridian_results:rate1m"
    GOODPUT = "application:meridian_goodput_queries:rate1m"
    SLO_ATTAINMENT = "application:meridian_slo_attainment:ratio_rate1m"
    SLO_ERRORS = {window: f"application:meridian_slo_errors:ratio_rate{window}" for window in ("5m", "1h", "6h")}
    LATENCY_P99 = "application:meridian_query_latency_seconds:p99_rate1m"
    LATENCY_P50 = "application:meridian_query_latency_seconds:p50_rate1m"
    HOP_P99 = "application_hop:meridian_hop_latency_seconds:p99_rate1m"
    CLIENT_P99 = "application:meridian_client_latency_seconds:p99_rate1m"
    UTILIZATION = "worker:meridian_worker_utilization:ratio_rate1m"
    WORKERS = "device_emulated:meridian_workers:count"
    RUNNING_COST = "meridian:fleet_running_cost_dollars_per_hour:sum"
    PLANNED_COST = "meridian:fleet_planned_cost_dollars_per_hour:sum"
    COST_PER_1K = "meridian:cost_per_1k_queries_dollars:rate5m"
    PLANNED_COST_PER_1K = "meridian:planned_cost_per_1k_queries_dollars:rate5m"
    EFFECTIVE_ACCURACY = "meridian:effective_accuracy:ratio_rate1m"
    LAG_BY_GROUP = "group:meridian_kafka_consumer_lag_messages:sum"
    LAG_GROWTH = "group_topic:meridian_kafka_consumer_lag_messages:deriv1m"

    @classmethod
    def names(cls) -> set[str]:
        names = set()
        for key, value in vars(cls).items():
            if key.isupper():
                names.update(value.values() if isinstance(value, dict) else [value])
        return names


APP = 'application="$application"'


def running_cost_by_device() -> str:
    return (f"sum by (device) (({gauge(metrics.WORKER_INFO)} == 1) * on (device) group_left () "
            f"max by (device) ({gauge(metrics.DEVICE_PRICE)}))")


# --- panels and layout ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    title: str
    targets: Sequence[Target]
    unit: str = "short"
    _: KW_ONLY
    kind: str = "timeseries"  # timeseries | stat | table | heatmap | bargauge
    description: str = ""
    width: int = 12
    height: int = 8
    min: float | None = None
    max: float | None = None


@dataclass(frozen=True)
class Row:
    title: str


@dataclass(frozen=True)
class Variable:
    name: str
    label: str
    query: str  # label_values(metric, label)


@dataclass
class Dashboard:
    uid: str
    title: str
    description: str
    items: Sequence[Panel | Row]
    variables: Sequence[Variable] = field(default_factory=tuple)

    def panels(self) -> Iterator[Panel]:
        return (item for item in self.items if isinstance(item, Panel))


def _panel_json(panel: Panel, panel_id: int, grid: dict) -> dict:
    instant = panel.kind in ("table", "bargauge")
    targets = []
    for index, target in enumerate(panel.targets):
        entry = {"datasource": DATASOURCE, "refId": chr(ord("A") + index), "expr": target.expr,
                 "legendFormat": target.legend or "__auto", "range": not instant, "instant": instant}
        if panel.kind == "table":
            entry["format"] = "table"
        if panel.kind == "heatmap":
            entry["format"] = "heatmap"
        targets.append(entry)
    defaults: dict = {"unit": panel.unit}
    if panel.min is not None:
        defaults["min"] = panel.min
    if panel.max is not None:
        defaults["max"] = panel.max
    if panel.kind == "timeseries":
        defaults["custom"] = {"lineWidth": 1, "fillOpacity": 10, "showPoints": "never", "spanNulls": False}
    options: dict
    if panel.kind == "timeseries":
        options = {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                   "tooltip": {"mode": "multi", "sort": "desc"}}
    elif panel.kind in ("stat", "bargauge"):
        options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                   "orientation": "horizontal" if panel.kind == "bargauge" else "auto"}
        if panel.kind == "stat":
            options.update(colorMode="value", graphMode="area", justifyMode="auto", textMode="auto")
        else:
            options.update(displayMode="gradient", showUnfilled=True)
    elif panel.kind == "table":
        options = {"showHeader": True, "cellHeight": "sm"}
    elif panel.kind == "heatmap":
        options = {"calculate": False, "cellGap": 1, "yAxis": {"unit": panel.unit},
                   "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64},
                   "tooltip": {"mode": "single", "yHistogram": True}}
    else:
        raise ValueError(f"unknown panel kind {panel.kind!r}")
    result = {"id": panel_id, "type": panel.kind, "title": panel.title, "description": panel.description,
              "datasource": DATASOURCE, "gridPos": grid, "targets": targets,
              "fieldConfig": {"defaults": defaults, "overrides": []}, "options": options}
    if panel.kind == "table":
        result["transformations"] = [{"id": "organize", "options": {"excludeByName": {"Time": True}}}]
    return result


def to_json(dashboard: Dashboard) -> dict:
    """The Grafana (11.x, schema 39) JSON model: panels flow left to right in a 24-column grid."""
    panels, x, y, row_height, panel_id = [], 0, 0, 0, 1
    for item in dashboard.items:
        if isinstance(item, Row):
            y, x, row_height = y + row_height, 0, 0
            panels.append({"id": panel_id, "type": "row", "title": item.title, "collapsed": False,
                           "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
            y += 1
        else:
            if x + item.width > 24:
                y, x, row_height = y + row_height, 0, 0
            panels.append(_panel_json(item, panel_id, {"h": item.height, "w": item.width, "x": x, "y": y}))
            x, row_height = x + item.width, max(row_height, item.height)
        panel_id += 1
    variables = [{
        "name": v.name, "label": v.label, "type": "query", "datasource": DATASOURCE,
        "query": {"query": v.query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "definition": v.query, "refresh": 2, "sort": 1, "includeAll": False, "multi": False,
        "current": {}, "options": [], "hide": 0, "regex": "", "skipUrlSync": False,
    } for v in dashboard.variables]
    return {
        "id": None, "uid": dashboard.uid, "title": dashboard.title, "description": dashboard.description,
        "tags": ["meridian"], "timezone": "browser", "editable": False, "graphTooltip": 1,
        "refresh": "10s", "schemaVersion": 39, "version": 1, "weekStart": "",
        "time": {"from": "now-30m", "to": "now"}, "timepicker": {}, "fiscalYearStartMonth": 0,
        "liveNow": False, "annotations": {"list": []},
        "links": [{"type": "dashboards", "title": "Meridian", "tags": ["meridian"], "asDropdown": True,
                   "includeVars": False, "keepTime": True, "icon": "external link", "targetBlank": False,
                   "tooltip": "", "url": ""}],
        "templating": {"list": variables}, "panels": panels,
    }


# --- the dashboards ------------------------------------------------------------------------------------

def by(labels: str) -> str:
    return f"sum by ({labels}) " if labels else "sum "


def rate(sample: str, labels: str = "", window: str = "1m", where: str = "") -> str:
    """``sum by (labels) (rate(sample{where}[window]))``."""
    selector = f"{sample}{{{where}}}" if where else sample
    return f"{by(labels)}(rate({selector}[{window}]))"


def increase(sample: str, labels: str, window: str, where: str = "") -> str:
    selector = f"{sample}{{{where}}}" if where else sample
    return f"{by(labels)}(increase({selector}[{window}]))"


def quantile(q: float, histogram: MetricWrapperBase, labels: str = "", window: str = "1m") -> str:
    """The ``q`` quantile of a histogram's observations over ``window``, per ``labels``."""
    return f"histogram_quantile({q}, {rate(bucket(histogram), ', '.join(filter(None, [labels, 'le'])), window)})"


def per_app(rule: str) -> str:
    return f"{rule}{{{APP}}}"


def overview() -> Dashboard:
    return Dashboard("meridian-overview", "Meridian / Overview",
                     "Service level, accuracy, cost and health of the whole system.", [
        Row("Service level"),
        Panel("SLO attainment (1m)", [Target(Rules.SLO_ATTAINMENT, "{{application}}")], "percentunit", kind="stat",
              description="Queries answered ok within their own SLO, over every final result.",
              width=6, min=0, max=1),
        Panel("Effective accuracy (1m)", [Target(Rules.EFFECTIVE_ACCURACY, "rows served")], "percentunit",
              kind="stat", width=6, min=0, max=1,
              description="Profiled accuracy of the variants that served the dispatched rows, weighted by rows."),
        Panel("Results by application and status", [Target(Rules.RESULTS_BY_STATUS, "{{application}} {{status}}")],
              "reqps", description="Final results per second: ok and error from workers, rejected and dropped "
                                   "from the scheduler."),
        Panel("Goodput (ok within SLO)", [Target(Rules.GOODPUT, "{{application}}")], "reqps"),
        Panel("End-to-end latency", [Target(Rules.LATENCY_P99, "p99 {{application}}"),
                                     Target(Rules.LATENCY_P50, "p50 {{application}}")], "s",
              description="Client send to result sent (workers' histogram)."),
        Panel("SLO error budget burn rate (1h)",
              [Target(f"{Rules.SLO_ERRORS['1h']} / {ERROR_BUDGET}", "{{application}}")], "x",
              description=f"How many times faster than sustainable the error budget ({ERROR_BUDGET:.0%}) burns; "
                          "the fast-burn alert pages above 14.4."),
        Row("Cost"),
        Panel("Fleet cost, running", [Target(Rules.RUNNING_COST, "running")], "currencyUSD", kind="stat", width=6,
              description="Live workers times their device's $/h."),
        Panel("Fleet cost, planned", [Target(Rules.PLANNED_COST, "planned")], "currencyUSD", kind="stat", width=6,
              description="The planner's latest plans, over every planned application."),
        Panel("Cost per 1,000 answered queries",
              [Target(Rules.COST_PER_1K, "running fleet"), Target(Rules.PLANNED_COST_PER_1K, "planned fleet")],
              "currencyUSD"),
        Row("System"),
        Panel("Live workers", [Target(f"max({gauge(metrics.WORKERS_KNOWN)})", "scheduler sees"),
                               Target(f"count({gauge(metrics.WORKER_INFO)} == 1)", "exporting metrics")],
              kind="stat", width=6),
        Panel("Scrape targets up", [Target("sum by (service) (up)", "{{service}}")], kind="stat", width=6,
              description="Up targets per service (file_sd entries of services/launcher.py)."),
        Panel("Queue depth", [Target(f"sum by (application) ({gauge(metrics.QUEUE_DEPTH)})", "{{application}}")],
              width=6),
        Panel("Consumer lag by group", [Target(Rules.LAG_BY_GROUP, "{{group}}")], width=6),
        Panel("Dead letters (5m)", [Target(increase(total(metrics.DEAD_LETTERS), "service", "5m"), "{{service}}")]),
        Panel("Queries sent by clients", [Target(rate(total(metrics.CLIENT_QUERIES_SENT), "application"),
                                                 "{{application}}")], "reqps",
              description="Queries/s the load generator sends."),
    ])


def application() -> Dashboard:
    return Dashboard("meridian-application", "Meridian / Application",
                     "One application: traffic, SLO, latency per hop, queue and its planned fleet.", [
        Row("Traffic and SLO"),
        Panel("Results by status", [Target(per_app(Rules.RESULTS_BY_STATUS), "{{status}}")], "reqps"),
        Panel("Throughput and goodput", [Target(per_app(Rules.RESULTS), "all final results"),
                                         Target(per_app(Rules.GOODPUT), "ok within SLO")], "reqps"),
        Panel("SLO attainment (1m)", [Target(per_app(Rules.SLO_ATTAINMENT), "attainment")], "percentunit",
              kind="stat", width=6, min=0, max=1),
        Panel("Error budget burn rate",
              [Target(f"{per_app(Rules.SLO_ERRORS[w])} / {ERROR_BUDGET}", w) for w in ("5m", "1h", "6h")], "x",
              description="Pages when the 1h and 5m burn rates both exceed 14.4; a ticket at 6 over 6h and 30m.",
              width=6),
        Panel("Results by status and reason (5m)",
              [Target(increase(total(metrics.RESULTS), "status, reason", "5m", APP), "{{status}} {{reason}}")]),
        Row("Latency"),
        Panel("End-to-end latency", [Target(per_app(Rules.LATENCY_P99), "p99"),
                                     Target(per_app(Rules.LATENCY_P50), "p50")], "s"),
        Panel("p99 by hop", [Target(per_app(Rules.HOP_P99), "{{hop}}")], "s",
              description="queue_wait in the scheduler, dispatch through Kafka, compute on the worker."),
        Panel("Latency distribution", [Target(increase(bucket(metrics.QUERY_LATENCY), "le", "1m", APP), "{{le}}")],
              "s", kind="heatmap"),
        Panel("Client-observed p99 (ok results)", [Target(per_app(Rules.CLIENT_P99), "p99")], "s", width=6,
              description="Send to result received, as the load generator saw it."),
        Panel("Queue depth", [Target(per_app(gauge(metrics.QUEUE_DEPTH)), "queued")], width=6),
        Row("Planned fleet"),
        Panel("Planned cost", [Target(per_app(gauge(metrics.FLEET_COST)), "$/h")], "currencyUSD", kind="stat",
              width=6, description="The planner's latest plan for this application."),
        Panel("Planned workers by device", [Target(per_app(gauge(metrics.PLANNED_WORKERS)), "{{device}}")],
              kind="bargauge", width=6),
    ], variables=[Variable("application", "Application", f"label_values({total(metrics.RESULTS)}, application)")])


def fleet() -> Dashboard:
    return Dashboard("meridian-fleet", "Meridian / Fleet",
                     "Workers (device type, emulation, utilization, variants), the fleet service, Kafka lag.", [
        Row("Workers"),
        Panel("Workers by device", [Target(Rules.WORKERS, "{{device}} emulated={{emulated}}")]),
        Panel("Worker utilization (1m)", [Target(Rules.UTILIZATION, "{{worker}} ({{device}})")], "percentunit",
              description="Fraction of wall time spent computing batches.", min=0, max=1),
        Panel("Workers", [Target(f"{gauge(metrics.WORKER_INFO)} == 1")], kind="table",
              description="Every live worker with its device type and whether it is emulated."),
        Panel("Loaded variants per worker", [Target(gauge(metrics.WORKER_LOADED_VARIANTS), "{{worker}}")]),
        Panel("Rows per batch by variant", [
            Target(quantile(0.5, metrics.DISPATCHED_BATCH_ROWS, "variant"), "p50 {{variant}}"),
            Target(quantile(0.99, metrics.DISPATCHED_BATCH_ROWS, "variant"), "p99 {{variant}}")]),
        Panel("Dispatched rows by variant", [Target(rate(hsum(metrics.DISPATCHED_BATCH_ROWS), "variant"),
                                                    "{{variant}}")],
              description="Rows/s the scheduler dispatched to each variant."),
        Row("Fleet service and cost"),
        Panel("Workers the fleet service runs", [
            Target(f"sum by (device, emulated) ({gauge(metrics.FLEET_WORKERS)})", "{{device}} emulated={{emulated}}")]),
        Panel("Scaling actions (15m)", [Target(increase(total(metrics.SCALING_ACTIONS), "action, device", "15m"),
                                               "{{action}} {{device}}")],
              description="Workers started and stopped to apply plans."),
        Panel("Running cost by device", [Target(running_cost_by_device(), "{{device}}")], "currencyUSD"),
        Panel("Fleet cost: running and planned", [Target(Rules.RUNNING_COST, "running"),
                                                  Target(Rules.PLANNED_COST, "planned")], "currencyUSD"),
        Row("Kafka"),
        Panel("Consumer lag", [Target(gauge(metrics.CONSUMER_LAG), "{{group}} {{topic}}")],
              description="Messages behind the log end, from services.observability.lag_exporter."),
        Panel("Lag growth", [Target(Rules.LAG_GROWTH, "{{group}} {{topic}}")],
              description="Messages/s the lag grows (> 0) or shrinks (< 0)."),
        Panel("Consumer group members", [Target(gauge(metrics.CONSUMER_GROUP_MEMBERS), "{{group}}")]),
        Panel("Lag collections", [Target(rate(total(metrics.LAG_COLLECTIONS), "status"), "{{status}}/s"),
                                  Target(quantile(0.99, metrics.LAG_COLLECT_DURATION, window="5m"), "p99 seconds")]),
        Row("Processes"),
        Panel("CPU by process", [Target(rate("process_cpu_seconds_total", "process"), "{{process}}")], "percentunit",
              description="CPU seconds per second of each Meridian process (1 = one core)."),
        Panel("Resident memory by process", [Target("sum by (process) (process_resident_memory_bytes)",
                                                    "{{process}}")], "bytes"),
    ])


def planner() -> Dashboard:
    return Dashboard("meridian-planner", "Meridian / Planner and registry",
                     "Plans (status, solve time, chosen fleet, cost), how the fleet applied them, and the model "
                     "registry's catalogue.", [
        Row("Plans"),
        Panel("Plans by status (1h)", [Target(increase(total(metrics.PLANS), "status", "1h"), "{{status}}")],
              kind="bargauge", width=8,
              description="Plans published; infeasible ones keep the previous fleet (and alert)."),
        Panel("Solve time", [
            Target(quantile(0.99, metrics.PLANNER_SOLVE, "planner", "1h"), "p99 {{planner}}"),
            Target(f"sum by (planner) ({hsum(metrics.PLANNER_SOLVE)}) / sum by (planner) "
                   f"({hcount(metrics.PLANNER_SOLVE)} > 0)", "mean since start {{planner}}")], "s", width=8),
        Panel("Time since the last plan", [Target(f"time() - {gauge(metrics.PLAN_TIMESTAMP)}", "{{application}}")],
              "s", kind="stat", width=8),
        Panel("Planned workers by device", [
            Target(f"sum by (application, device) ({gauge(metrics.PLANNED_WORKERS)})", "{{application}} {{device}}")]),
        Panel("Planned cost by application", [Target(gauge(metrics.FLEET_COST), "{{application}}")], "currencyUSD"),
        Panel("Plans the fleet received (1h)", [Target(increase(total(metrics.FLEET_PLANS_RECEIVED), "outcome", "1h"),
                                                       "{{outcome}}")],
              kind="bargauge", description="applied, or skipped (infeasible)."),
        Panel("Scaling actions (1h)", [Target(increase(total(metrics.SCALING_ACTIONS), "service, action", "1h"),
                                              "{{service}} {{action}}")], kind="bargauge"),
        Row("Model registry (INFaaS)"),
        Panel("Registrations by status (1h)", [Target(increase(total(metrics.REGISTRATIONS), "status", "1h"),
                                                      "{{status}}")], kind="bargauge", width=8),
        Panel("Registration time (p99, 1h)", [Target(quantile(0.99, metrics.REGISTRATION_DURATION, "status", "1h"),
                                                     "{{status}}")], "s", width=8),
        Panel("Registry ready", [Target(f"max({gauge(metrics.REGISTRY_READY)})", "ready")], kind="stat", width=8),
        Panel("Profiled accuracy by variant", [Target(f"max by (variant) ({gauge(metrics.VARIANT_ACCURACY)})",
                                                      "{{variant}}")], "percentunit", kind="bargauge", min=0, max=1),
        Panel("Device prices", [Target(f"max by (device) ({gauge(metrics.DEVICE_PRICE)})", "{{device}}")],
              "currencyUSD", kind="bargauge"),
    ])


DASHBOARDS = {"meridian-overview.json": overview, "meridian-application.json": application,
              "meridian-fleet.json": fleet, "meridian-planner.json": planner}


def provisioning_yaml() -> str:
    return (
        "# Generated by `python -m services.observability.dashboards` (make dashboards); do not edit.\n"
        "# Grafana loads the dashboards next to this file (docker-compose.yml mounts infra/grafana/provisioning\n"
        f"# at {CONTAINER_DIR.rsplit('/', 1)[0]}).\n"
        "apiVersion: 1\n"
        "providers:\n"
        "  - name: meridian\n"
        "    folder: Meridian\n"
        "    type: file\n"
        "    disableDeletion: true\n"
        "    allowUiUpdates: false\n"
        "    updateIntervalSeconds: 30\n"
        "    options:\n"
        f"      path: {CONTAINER_DIR}\n"
    )


def dashboards() -> dict[str, Dashboard]:
    return {name: build() for name, build in DASHBOARDS.items()}


def render() -> dict[str, str]:
    """File name -> exact file content, for every generated file."""
    files = {name: json.dumps(to_json(board), indent=2) + "\n" for name, board in dashboards().items()}
    files[PROVISIONING_FILE] = provisioning_yaml()
    return files


def expressions() -> Iterator[tuple[str, str, str]]:
    """``(dashboard uid, panel or variable title, expression)`` for every PromQL query of every dashboard."""
    for board in dashboards().values():
        for variable in board.variables:
            yield board.uid, f"${variable.name}", variable.query
        for panel in board.panels():
            for target in panel.targets:
                yield board.uid, panel.title, target.expr


def drift(out_dir: Path = OUT_DIR) -> list[str]:
    """Generated files whose committed copy is missing or different, and stray committed dashboards."""
    files = render()
    changed = [name for name, text in files.items()
               if not (out_dir / name).exists() or (out_dir / name).read_text() != text]
    stray = [p.name for p in sorted(out_dir.glob("*.json")) if p.name not in files] if out_dir.exists() else []
    return changed + stray


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.observability.dashboards",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the files differ")
    args = parser.parse_args(argv)
    if args.check:
        stale = drift(args.out)
        if stale:
            print(f"out of date in {args.out}: {', '.join(stale)}; run `make dashboards`", file=sys.stderr)
            return 1
        print(f"{args.out}: up to date")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (args.out / name).write_text(text)
    print(f"wrote {len(render())} files to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
