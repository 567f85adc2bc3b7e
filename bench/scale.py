"""Scale-out on Kafka: answered q/s with one and with two scheduler processes, and a partition leader
killed on a three-broker cluster.

Run ``python -m bench.scale`` (``make bench-scale``, ~5 min). Writes ``bench/results/scale.json`` and
``scale.png`` and prints them.

Throughput: four applications (one per partition of ``meridian.queries``), queries without inputs served
by two workers *emulating* cpu-1t ``digits-mlp-s`` from its measured profile (a few microseconds per
batch: the schedulers and Kafka are what is measured), offered ``OFFERED_QPS`` for ``DURATION_S``; the
number is the answers within their SLO per second of load. The CPU seconds every process used during the
run say where the machine's two cores went. Leader kill: `services.drills.scenarios.leader_kill`.
"""
from __future__ import annotations

import itertools
import json
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from bench.common import RESULTS_DIR, cpu_seconds, save_figure, write_result
from schemas import Query
from services.drills.load import run_drill
from services.drills.scenarios import DrillConfig, leader_kill
from services.launcher import LocalLauncher, read_metric, wait_until
from services.stack import LocalStack

#: one per partition of meridian.queries (murmur2 of the application, as the client keys them)
TENANTS = ("tenant-0", "tenant-1", "tenant-2", "tenant-3")
ENV = {"MERIDIAN_APPLICATIONS": json.dumps({tenant: ["digits"] for tenant in TENANTS})}
VARIANT, DEVICE = "digits-mlp-s", "cpu-1t"
OFFERED_QPS, DURATION_S, SLO_MS = 1200.0, 20.0, 1000.0
SCHEDULER_COUNTS = (1, 2)
LEADER_KILL = DrillConfig(rate_qps=40.0, duration_s=40.0, fault_at_s=10.0, outage_s=15.0, slo_ms=30_000.0,
                          settle_s=120.0)
PORT_BASE = 29950
FIGURE = RESULTS_DIR / "scale.png"


def tenant_queries() -> Callable[[], Query]:
    tenants = itertools.cycle(TENANTS)
    return lambda: Query(query_id=f"scale-{uuid.uuid4().hex}", application=next(tenants), slo_ms=SLO_MS,
                         batch_size=1, sent_at=time.time())


def throughput(stack: LocalStack, log_dir: Path, schedulers: int) -> dict:
    """Answers within SLO per second with ``schedulers`` scheduler processes, and where the CPU went."""
    settings = stack.settings().model_copy(update={"applications": json.loads(ENV["MERIDIAN_APPLICATIONS"])})
    with LocalLauncher(stack.env, log_dir) as launcher:
        started = [launcher.start_scheduler(name=f"scheduler-{k}", metrics_port=PORT_BASE + k, extra_env=ENV)
                   for k in range(1, schedulers + 1)]
        for index in (1, 2):
            launcher.start_worker(f"scale-w{index}", variants=[VARIANT], emulate=DEVICE,
                                  metrics_port=PORT_BASE + 10 + index, extra_env=ENV)
        for scheduler in started:
            launcher.wait_for_workers(scheduler, 2, timeout_s=120)
        wait_until(lambda: sum(read_metric(s.metrics_port, "meridian_scheduler_query_partitions") or 0
                               for s in started) == len(TENANTS) and
                   all((read_metric(s.metrics_port, "meridian_scheduler_query_partitions") or 0) > 0 for s in started),
                   60, "the schedulers to split the partitions", started)
        pids = {name: process.popen.pid for name, process in launcher.processes.items()}
        pids["kafka"] = stack.kafka_node_pid(1) or 0
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        client_before, wall_before = cpu_seconds(os.getpid()), time.monotonic()
        outcome = run_drill(settings, tenant_queries(), rate_qps=OFFERED_QPS, duration_s=DURATION_S,
                            fault_at_s=0.0, inject=lambda: None, settle_s=60.0)
        wall_s = time.monotonic() - wall_before
        cpu = {name: round(cpu_seconds(pid) - before[name], 1) for name, pid in pids.items()}
        cpu["client (this bench: load and answers)"] = round(cpu_seconds(os.getpid()) - client_before, 1)
    good = round(outcome.within_slo_fraction * outcome.sent, 0)
    return {"answered_within_slo_qps": round(good / DURATION_S, 1), "sent": outcome.sent,
            "answered": outcome.answered, "dropped": outcome.dropped, "lost": outcome.lost,
            "duplicates_seen_by_client": outcome.duplicates_seen_by_client,
            "cpu_seconds": cpu, "cpu_seconds_available": round(wall_s * (os.cpu_count() or 1), 1)}


def plot(runs: dict[str, dict], path: Path) -> None:
    """Answers within SLO per second beside the CPU seconds each kind of process used."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    labels = [f"{n} scheduler{'s' * (n != '1')}" for n in runs]
    left.bar(labels, [r["answered_within_slo_qps"] for r in runs.values()], color=["0.6", "#d62728"])
    left.axhline(OFFERED_QPS, color="black", ls="--", lw=0.8)
    left.set_title(f"answers within SLO, q/s ({OFFERED_QPS:g} offered)", fontsize=10)
    kinds = ("scheduler", "worker", "kafka", "client")
    bottom = [0.0] * len(runs)
    for kind, colour in zip(kinds, ("#d62728", "#1f77b4", "#2ca02c", "0.5")):
        values = [sum(v for name, v in r["cpu_seconds"].items() if name.startswith(kind)) for r in runs.values()]
        right.bar(labels, values, bottom=bottom, color=colour, label=kind)
        bottom = [b + v for b, v in zip(bottom, values)]
    right.plot(labels, [r["cpu_seconds_available"] for r in runs.values()], "k_", markersize=40,
               label="2 cores x the run")
    right.set_title("CPU seconds during the run", fontsize=10)
    right.legend(fontsize=8)
    save_figure(fig, path)


def main() -> None:
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="meridian-scale-"))
    with LocalStack(var_dir=root / "var", kafka_port=29892, redis_port=26679, components=("kafka", "redis")) as stack:
        runs = {}
        for count in SCHEDULER_COUNTS:
            runs[str(count)] = throughput(stack, root / f"schedulers-{count}", count)
            print(f"{count} scheduler(s): {json.dumps(runs[str(count)])}", flush=True)
    with LocalStack(var_dir=root / "cluster-var", kafka_port=29800, kafka_brokers=3, redis_port=26579,
                    components=("kafka", "redis")) as cluster:
        kill = leader_kill(cluster, root / "leader-kill", PORT_BASE + 20, LEADER_KILL)
    plot(runs, FIGURE)
    write_result("scale", {
        "schedulers": {n: r["answered_within_slo_qps"] for n, r in runs.items()},
        "ratio_2_over_1": round(runs["2"]["answered_within_slo_qps"] / max(runs["1"]["answered_within_slo_qps"], 1e-9),
                                2),
        "runs": runs,
        "leader_kill_recovery_s": kill.recovery_s,
        "lost": kill.lost,
        "duplicates_seen_by_client": kill.duplicates_seen_by_client,
        "leader_kill": kill.model_dump(exclude={"series"}),
        "setup": {"tenants": TENANTS, "workers": f"2 emulating {DEVICE} {VARIANT} (measured profile)",
                  "offered_qps": OFFERED_QPS, "duration_s": DURATION_S, "slo_ms": SLO_MS,
                  "leader_kill": {**LEADER_KILL.__dict__,
                                  "cluster": "3 KRaft nodes, 3 replicas, min.insync.replicas 2"},
                  "machine_cores": os.cpu_count()},
        "figure": str(FIGURE.relative_to(RESULTS_DIR.parent.parent)),
        "bench_seconds": round(time.perf_counter() - started, 1),
    })


if __name__ == "__main__":
    main()
