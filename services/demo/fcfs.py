"""``make demo-fcfs`` / ``meridian demo --fcfs``: the quick first smoke test. Start the local stack, a
scheduler and two real onnxruntime workers, serve ~30 s of Poisson queries of handwritten digits, print
the load generator's summary, and stop what it started.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request

from services.launcher import LocalLauncher
from services.stack import LocalStack
from shared.profiles import ProfileSet
from shared.settings import Settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="meridian demo --fcfs", description=__doc__)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=200.0)
    args = parser.parse_args(argv)
    settings = Settings()
    profiles = ProfileSet.load(settings.profiles_dir / "digits.json")
    variants = [p.variant for p in sorted(profiles.variants, key=lambda p: p.latency_ms(1))]
    with LocalStack.from_settings(settings) as stack:
        print(f"stack up: Kafka 127.0.0.1:{stack.kafka_port}, Redis 127.0.0.1:{stack.redis_port}", flush=True)
        with LocalLauncher(stack.env, settings.var_dir / "logs") as launcher:
            scheduler = launcher.start_scheduler(metrics_port=settings.scheduler_metrics_port)
            launcher.start_worker("cpu-a", variants=variants, metrics_port=settings.worker_metrics_port)
            launcher.start_worker("cpu-b", variants=variants, metrics_port=settings.worker_metrics_port + 1)
            launcher.wait_for_workers(scheduler, 2, timeout_s=120)
            print(f"scheduler (metrics :{scheduler.metrics_port}) and 2 onnxruntime workers serving "
                  f"{', '.join(variants)}; logs in {launcher.log_dir}", flush=True)
            subprocess.run([sys.executable, "-m", "services.loadgen", "--rate", str(args.rate),
                            "--duration", str(args.duration), "--application", "digits", "--model", "digits",
                            "--slo-ms", "50", "--batch-size", "1"], env=stack.env, check=True)
            time.sleep(5)  # two more scrapes, so the last seconds of load are in Prometheus
            print_prometheus_view(stack.prometheus_port)
    print("demo finished; everything it started is stopped", flush=True)


#: what an operator looks at first, as Prometheus computed it from the services' own metrics
DEMO_QUERIES = {
    "SLO attainment (last minute)":
        "sum by (application) (rate(meridian_goodput_queries_total[1m]))"
        " / sum by (application) (rate(meridian_results_total[1m]))",
    "p99 end-to-end latency, seconds":
        "histogram_quantile(0.99, sum by (application, le) (rate(meridian_query_latency_seconds_bucket[1m])))",
    "worker utilization": "sum by (worker) (rate(meridian_worker_busy_seconds_total[1m]))",
}


def print_prometheus_view(port: int) -> None:
    print(f"\nPrometheus at http://127.0.0.1:{port} (dashboards: infra/grafana/provisioning/dashboards):")
    for title, expr in DEMO_QUERIES.items():
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                series = json.load(response)["data"]["result"]
        except OSError as exc:
            print(f"  {title}: Prometheus unreachable ({exc})")
            continue
        values = ", ".join(f"{next(iter(s['metric'].values()), 'all')}={float(s['value'][1]):.4g}" for s in series)
        print(f"  {title}: {values or 'no data yet'}")
        print(f"    {expr}")


if __name__ == "__main__":
    main()
