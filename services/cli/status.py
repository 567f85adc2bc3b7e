"""``meridian status``: what is serving now: workers, plans and queue depth from Prometheus, consumer
groups and their lag from Kafka itself."""
from __future__ import annotations

import argparse
import json
import time
import urllib.parse
import urllib.request
from typing import Any

from kafka.errors import KafkaError

from services.cli.common import CommandError, require_broker, summary
from services.observability.lag_exporter import LagSnapshot, collect
from shared.adapters import topics
from shared.adapters.kafka_io import make_admin
from shared.settings import Settings

#: a series is live if Prometheus sampled it within this many seconds (two scrape intervals of the compose
#: stack, five of the local one). Older ones are an earlier run's: Prometheus answers with a series' last
#: sample for 5 minutes unless it marked the series stale, and it marks none when it stops, so after a
#: stack restart the earlier processes (other ports, the same worker names) still answer, `up` 1 included.
LIVE_S = 10


def live(selector: str) -> str:
    """PromQL: the series of ``selector`` sampled in the last `LIVE_S` seconds."""
    return f"({selector} and timestamp({selector}) > time() - {LIVE_S})"


#: a worker's consumer group: this and its id
WORKER_GROUP = topics.worker_group("")
#: the sample time of each live worker's series (`newest_per` keeps one a worker)
WORKERS = f"timestamp(meridian_worker_info) > time() - {LIVE_S}"
#: each worker's $/h, and each real worker's variants' latency at batch 1 as measured on its machine
PRICES = "meridian_worker_price_dollars_per_hour"
BATCH_1 = 'meridian_worker_measured_latency_ms{batch="1"}'
#: title -> (PromQL with one series per row, the label that names a row)
VIEWS = {
    "queued queries": (f"sum by (application) ({live('meridian_queue_depth')})", "application"),
    "answers/s (1m)": (
        f"sum by (application) (rate(meridian_results_total[1m]) and {live('meridian_results_total')})", "application"),
    "seconds since the last plan": (
        f"time() - max by (application) ({live('meridian_planner_last_plan_timestamp_seconds')})", "application"),
}


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("status", help="workers, plans, queue depth and consumer lag of the running stack",
                                 description=summary(__doc__))
    parser.add_argument("--prometheus", default=None, help="Prometheus URL (default: the local stack's)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = Settings()
    url = args.prometheus or f"http://127.0.0.1:{settings.prometheus_port}"
    print(f"from Prometheus {url}:")
    workers: dict[str, dict[str, str]] | None = None
    try:
        workers = {s["metric"]["worker"]: s["metric"] for s in newest_per(query(url, WORKERS), "worker")}
        prices = {s["metric"]["worker"]: float(s["value"][1]) for s in query(url, live(PRICES))}
        measured: dict[str, list[str]] = {}
        for series in query(url, live(BATCH_1)):
            labels = series["metric"]
            measured.setdefault(labels["worker"], []).append(f"{labels['variant']} {float(series['value'][1]):.3g} ms")
        texts = [worker_text(w, prices.get(name), sorted(measured.get(name, []))) for name, w in workers.items()]
        print(f"  workers: {', '.join(texts) or 'none'}")
        for title, (expr, label) in VIEWS.items():
            rows = [f"{s['metric'].get(label, 'all')} {float(s['value'][1]):.3g}" for s in query(url, expr)]
            print(f"  {title}: {', '.join(rows) or 'none'}")
    except OSError as exc:
        print(f"  Prometheus unreachable ({exc})")
    print(f"from Kafka {settings.kafka_bootstrap} (committed offsets):")
    require_broker(settings.kafka_bootstrap)
    try:
        admin = make_admin(settings)
        try:
            snapshot = collect(admin, group_prefix="meridian")
        finally:
            admin.close()
    except KafkaError as exc:
        raise CommandError(f"Kafka at {settings.kafka_bootstrap} is unreachable ({type(exc).__name__}); "
                           "is the stack up? (`meridian stack status`)") from None
    if not snapshot.members:
        print("  no consumer group yet")
    for group in sorted(snapshot.members):
        print(f"  {group_text(group, snapshot, None if workers is None else set(workers))}")
    return 0


def query(url: str, expr: str) -> list[dict[str, Any]]:
    """The series of an instant query now (``OSError``: Prometheus did not answer)."""
    address = f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": expr, "time": time.time()})
    with urllib.request.urlopen(address, timeout=5) as response:
        return json.load(response)["data"]["result"]


def newest_per(series: list[dict[str, Any]], label: str) -> list[dict[str, Any]]:
    """One series per value of ``label``, the one with the latest value (a sample time), sorted by ``label``:
    two live series of one worker (one process scraped as two targets, or two claiming one name) are one row.

    >>> s = [{"metric": {"worker": "a", "instance": i}, "value": [0, t]} for i, t in (("x", "5.1"), ("y", "7"))]
    >>> [r["metric"]["instance"] for r in newest_per(s, "worker")]
    ['y']
    """
    newest: dict[str, dict[str, Any]] = {}
    for s in series:
        name = s["metric"].get(label, "")
        if name not in newest or float(s["value"][1]) > float(newest[name]["value"][1]):
            newest[name] = s
    return [newest[name] for name in sorted(newest)]


def worker_text(labels: dict[str, str], price: float | None = None, batch_1: list[str] | None = None) -> str:
    """``w1 (cpu-2t, $0.085/h, measured at batch 1: digits-mlp-s 0.05 ms)``.

    >>> worker_text({"worker": "g1", "device": "g4dn-emu", "emulated": "true"}, 0.526)
    'g1 (g4dn-emu, emulated, $0.526/h)'
    """
    parts = [labels.get("device", "?")] + (["emulated"] if labels.get("emulated") == "true" else [])
    if price is not None:
        parts.append(f"${price:.3g}/h")
    if batch_1:
        parts.append(f"measured at batch 1: {'; '.join(batch_1)}")
    return f"{labels.get('worker')} ({', '.join(parts)})"


def group_text(group: str, snapshot: LagSnapshot, workers: set[str] | None) -> str:
    """A group's readers and lag. A worker's group never has members (the worker assigns itself its partition):
    whether that reader runs is Prometheus' to say (``workers``; None: Prometheus did not answer)."""
    lags = ", ".join(f"{topic} {lag}" for (g, topic), lag in sorted(snapshot.lag_messages.items()) if g == group)
    worker = group.removeprefix(WORKER_GROUP)
    if group not in snapshot.by_assignment:
        readers = f"{snapshot.members[group]} member(s)"
    elif workers is None or worker == group:
        readers = "no members, read by assignment"
    else:
        readers = f"no members, read by assignment by worker {worker} ({'' if worker in workers else 'not '}running)"
    return f"{group}: {readers}; lag {lags or 'none'}"
