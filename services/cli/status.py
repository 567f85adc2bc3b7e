"""``meridian status``: what is serving now: workers, plans and queue depth from Prometheus, consumer
groups and their lag from Kafka itself."""
from __future__ import annotations

import argparse
import json
import time
import urllib.parse
import urllib.request

from kafka.errors import KafkaError

from services.cli.common import CommandError, require_broker, summary
from services.observability.lag_exporter import collect
from shared.adapters.kafka_io import make_admin
from shared.settings import Settings

#: title -> (PromQL, the label that names a row)
VIEWS = {
    "workers": ("meridian_worker_info", "worker"),
    "queued queries": ("sum by (application) (meridian_queue_depth)", "application"),
    "answers/s (1m)": ("sum by (application) (rate(meridian_results_total[1m]))", "application"),
    "seconds since the last plan": ("time() - meridian_planner_last_plan_timestamp_seconds", "application"),
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
    for title, (expr, label) in VIEWS.items():
        print(f"  {title}: {prometheus_view(url, expr, label)}")
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
    for group, members in sorted(snapshot.members.items()):
        lags = ", ".join(f"{topic} {lag}" for (g, topic), lag in sorted(snapshot.lag_messages.items()) if g == group)
        print(f"  {group}: {members} member(s); lag {lags or 'none'}")
    return 0


def prometheus_view(url: str, expr: str, label: str) -> str:
    query = f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": expr, "time": time.time()})
    try:
        with urllib.request.urlopen(query, timeout=5) as response:
            series = json.load(response)["data"]["result"]
    except OSError as exc:
        return f"Prometheus unreachable ({exc})"
    if not series:
        return "none"
    if expr == VIEWS["workers"][0]:
        return ", ".join(f"{s['metric'].get('worker')} ({s['metric'].get('device')}"
                         f"{', emulated' if s['metric'].get('emulated') == 'true' else ''})" for s in series)
    return ", ".join(f"{s['metric'].get(label, 'all')} {float(s['value'][1]):.3g}" for s in series)
