"""``make bench-pipeline``: what the Kafka pipeline adds over model compute, goodput under overload, and
the scheduler's ceiling.

1. Added latency at 200 and at 1,000 queries/s with two real onnxruntime workers: per query, (result
   received by the client - client send) - (compute finished - compute started); p50 and p99; and the
   cores each process used meanwhile (as in 4). The simulator's hop model
   (`shared.sim.transport.fit_transport`) fitted on the 200 q/s answers. Then 10 s more of each load,
   sampled by py-spy (`bench.stage_profile`): the scheduler's CPU µs per query by stage.
2. Overload: three times one emulated worker's measured capacity for a minute (the ``overload`` fault
   drill): goodput (``ok`` within SLO per second, at the client) against that capacity, the late share
   of answers, drops, the scheduler's memory and consumer lag, per second; drawn into
   ``bench/results/pipeline.png``.
3. Kafka clients per hop (``bench/kafka_clients.py``): one produce -> consume hop per candidate library
   (kafka-python, aiokafka, confluent-kafka), side by side on the same broker, at 200 and 1,000
   messages/s: the table the per-query path's clients were chosen by.
4. Scheduler ceiling: offered rates rise step by step with workers that emulate the measured CPU profile
   (no payload), until the scheduler no longer keeps up: a rate is sustained when answers arrive at >= 95%
   of the rate actually sent and queries entering in the last quarter of the step waited in the scheduler
   no longer (p50) than 50 ms. ``scheduler_max_qps`` is the highest sustained rate. Per step, the cores
   each process used (the scheduler, the workers, the broker and this bench's own load and answers): the
   machine's cores are shared, and they say which of them a failed step ran out of.
"""
from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from bench.common import RESULTS_DIR, CoreShares, write_result
from bench.kafka_clients import CANDIDATES, format_table, measure_clients
from bench.stage_profile import StageProfile
from bench.stage_profile import format_table as format_stages
from schemas import Query, ResultStatus
from services.drills.load import DrillOutcome
from services.drills.scenarios import DRILLS, DrillConfig
from services.launcher import LocalLauncher, ManagedProcess
from services.stack import LocalStack
from shared.adapters.client import MeridianClient
from shared.profiles import ProfileSet
from shared.settings import Settings
from shared.sim.arrivals import poisson_arrivals
from shared.sim.transport import TransportModel, fit_transport, hop_records
from shared.tensors import encode_binary


#: seconds of each rate's load sampled by py-spy, after its measured run
PROFILE_S = 10.0


def send_poisson(client: MeridianClient, rate: float, duration_s: float, *, rows: np.ndarray | None,
                 rng: np.random.Generator, model: str) -> tuple[dict[str, float], float]:
    """Send at ``rate``; returns query id -> send time, and the send duration."""
    times = poisson_arrivals(rate, max(2, int(rate * duration_s)), rng)
    run = uuid.uuid4().hex[:6]
    sent: dict[str, float] = {}
    start = time.time()
    for index, offset in enumerate(times):
        delay = start + offset - time.time()
        if delay > 0:
            time.sleep(delay)
        inputs = encode_binary(rows[rng.integers(0, len(rows), size=1)]) if rows is not None else None
        query = Query(query_id=f"{run}-{index}", application="digits", model=model, slo_ms=1000.0,
                      batch_size=1, inputs=inputs and inputs.tensors, sent_at=time.time())
        sent[query.query_id] = client.send(query, inputs.binary if inputs else b"").sent_at
    client.flush()
    return sent, time.time() - start


def warm_up(client: MeridianClient, *, rows: np.ndarray | None, model: str) -> None:
    """Until every consumer group has joined, the first answers take seconds: not what is measured."""
    for attempt in range(10):
        sent, _ = send_poisson(client, 50.0, 2.0, rows=rows, rng=np.random.default_rng(100 + attempt), model=model)
        client.wait_for(sent, timeout_s=30)
        slowest = max(client.results[q][1] - sent[q] for q in sent if q in client.results)
        if slowest < 0.2:
            return


def added_latency(stack: LocalStack, launcher: LocalLauncher, variants: list[str], rows: np.ndarray,
                  duration_s: float, rates: tuple[float, ...]
                  ) -> tuple[dict[float, dict[str, float]], TransportModel, dict[str, dict[str, float]]]:
    """Per rate, the added latency and the scheduler's CPU per query by stage; and the simulator's hop
    model fitted at the lowest rate."""
    scheduler = launcher.start_scheduler(metrics_port=29301)
    for index in range(2):
        launcher.start_worker(f"bench-real-{index}", variants=variants[:1], metrics_port=29302 + index)
    launcher.wait_for_workers(scheduler, 2, timeout_s=120)
    per_rate, cpu = {}, {}
    pids, workers = watched(stack, launcher, scheduler)
    with MeridianClient(stack.settings()) as client:
        warm_up(client, rows=rows, model=variants[0])
        for index, rate in enumerate(rates):
            shares = CoreShares({**pids, **workers})
            sent, _ = send_poisson(client, rate, duration_s, rows=rows, rng=np.random.default_rng(2 + index),
                                   model=variants[0])
            cores, _ = shares.cores()
            client.wait_for(sent, timeout_s=60)
            added = []
            for query_id in sent:
                if query_id not in client.results:
                    continue
                result, received = client.results[query_id]
                stamps = result.timestamps
                if result.status is ResultStatus.OK:
                    added.append((received - stamps.client_sent) - (stamps.compute_finished - stamps.compute_started))
            added_ms = np.array(added) * 1000.0
            if index == 0:
                transport = fit_transport(hop_records({q: client.results[q] for q in sent if q in client.results}))
            per_rate[rate] = {"p50_ms": round(float(np.percentile(added_ms, 50)), 3),
                              "p99_ms": round(float(np.percentile(added_ms, 99)), 3),
                              "answered_ok": len(added), "sent": len(sent), "cores": by_role(cores, workers)}
            print(f"added latency at {rate:g} q/s: {per_rate[rate]}", flush=True)
            # sampled apart from the measured run: py-spy pauses the scheduler for each sample
            profile = StageProfile(scheduler.popen.pid, launcher.log_dir / f"scheduler-{rate:g}qps.txt")
            profiled, _ = send_poisson(client, rate, PROFILE_S, rows=rows, rng=np.random.default_rng(20 + index),
                                       model=variants[0])
            cpu[f"{rate:g}_qps"] = profile.cpu_us_per_query(len(profiled))
            client.wait_for(profiled, timeout_s=60)
    launcher.stop_all()
    print(f"transport fitted at {rates[0]:g} q/s (ms): {transport.summary_ms()}", flush=True)
    print(f"the scheduler's CPU per query (µs) by stage, sampled by py-spy:\n{format_stages(cpu)}", flush=True)
    return per_rate, transport, cpu


def overload(stack: LocalStack, log_dir: Path, duration_s: float) -> DrillOutcome:
    outcome = DRILLS["overload"](stack, log_dir, 29321, DrillConfig(duration_s=duration_s, slo_ms=1000.0,
                                                                     settle_s=120.0))
    notes = outcome.notes
    print(f"overload: capacity {notes['capacity_qps']} q/s, goodput {notes['goodput_qps']} q/s "
          f"(ratio {notes['goodput_ratio']}), late {notes['late_ratio']}, dropped {outcome.dropped}", flush=True)
    for k, t in enumerate(outcome.series["t_s"]):
        print(f"  t={t:4.0f}s sent {outcome.series['sent'][k]:4.0f} good {outcome.series['goodput'][k]:4.0f} "
              f"late {outcome.series['late'][k]:3.0f} dropped {outcome.series['dropped'][k]:4.0f}", flush=True)
    return outcome


def plot_overload(outcome: DrillOutcome, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series, notes = outcome.series, outcome.notes
    fig, (rates, state) = plt.subplots(2, 1, figsize=(7, 5.5), sharex=True)
    for name, style in (("sent", ":"), ("goodput", "-"), ("late", "--"), ("dropped", "-.")):
        rates.plot(series["t_s"], series[name], style, label=name)
    rates.axhline(notes["capacity_qps"], color="grey", lw=0.8, label="one worker's capacity")
    rates.set_ylabel("queries per second")
    rates.set_title(f"3x overload of one worker emulating {notes['emulated_device']}, SLO 1 s")
    rates.legend(fontsize=8, ncol=3)
    state.plot(series["sample_t_s"], series["queue_depth"], label="scheduler queue depth")
    state.plot(series["sample_t_s"], series["lag_messages"], label="scheduler consumer lag (messages)")
    state.set_ylabel("queries")
    memory = state.twinx()
    memory.plot(series["sample_t_s"], series["rss_mb"], color="black", lw=0.8, label="scheduler RSS (MB)")
    memory.set_ylabel("MB")
    state.set_xlabel("seconds since the first send")
    state.legend(fontsize=8, loc="upper left")
    memory.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def scheduler_ceiling(stack: LocalStack, launcher: LocalLauncher, variant: str, rates: list[float],
                      step_s: float) -> tuple[float, list[dict[str, float]]]:
    scheduler = launcher.start_scheduler(metrics_port=29311)
    for index in range(2):
        launcher.start_worker(f"bench-emu-{index}", variants=[variant], metrics_port=29312 + index,
                              emulate="cpu-1t")
    launcher.wait_for_workers(scheduler, 2, timeout_s=120)
    steps, best = [], 0.0
    pids, workers = watched(stack, launcher, scheduler)
    with MeridianClient(stack.settings()) as client:
        for index, rate in enumerate(rates):
            if index == 0:
                warm_up(client, rows=None, model=variant)
            shares = CoreShares({**pids, **workers})
            sent, duration = send_poisson(client, rate, step_s, rows=None, rng=np.random.default_rng(10 + index),
                                          model=variant)
            cores, wall_s = shares.cores()
            client.wait_for(sent, timeout_s=30)
            answered = [client.results[q][0] for q in sent if q in client.results]
            ok = [r for r in answered if r.status is ResultStatus.OK]
            cutoff = min(sent.values()) + 0.75 * duration
            late_waits = [r.timestamps.dispatched - r.timestamps.scheduler_received for r in ok
                          if r.timestamps.client_sent >= cutoff]
            step = {"offered_qps": rate, "sent_qps": round(len(sent) / duration, 1),
                    "answered_ok_qps": round(len(ok) / duration, 1),
                    "late_queue_wait_ms_p50": round(float(np.median(late_waits)) * 1000.0, 2) if late_waits else None,
                    "scheduler_cpu_us_per_query": round(cores["scheduler"] * wall_s / len(sent) * 1e6, 1),
                    "cores": by_role(cores, workers)}
            sustained = (len(ok) >= 0.95 * len(sent) and late_waits and step["late_queue_wait_ms_p50"] <= 50.0)
            step["sustained"] = bool(sustained)
            steps.append(step)
            print(step, flush=True)
            if not sustained:
                break
            best = step["sent_qps"]
    launcher.stop_all()
    return best, steps


def watched(stack: LocalStack, launcher: LocalLauncher, scheduler: ManagedProcess
            ) -> tuple[dict[str, int], dict[str, int]]:
    """Process ids for `CoreShares`: the scheduler's and the broker's, and the workers' by name."""
    workers = {name: process.popen.pid for name, process in launcher.processes.items() if name != scheduler.name}
    return {"scheduler": scheduler.popen.pid, "kafka": stack.kafka_node_pid(1)}, workers


def by_role(cores: dict[str, float], workers: dict[str, int]) -> dict[str, float]:
    """`CoreShares.cores` with the workers summed."""
    return {**{name: used for name, used in cores.items() if name not in workers},
            "workers": round(sum(cores[name] for name in workers), 3)}


def floor_hop_ms_p50(clients: list[dict]) -> dict[str, float]:
    """Kafka's floor in this run: one librdkafka produce -> consume hop's median, per rate (its lowest over
    the fetch waits tried)."""
    hops = [row for row in clients if row["client"] == "confluent-kafka"]
    return {f"{rate:g}_qps": min(row["p50_ms"] for row in hops if row["rate_qps"] == rate)
            for rate in sorted({row["rate_qps"] for row in hops})}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of the 200 q/s run")
    parser.add_argument("--step", type=float, default=8.0, help="seconds per rate step")
    parser.add_argument("--overload", type=float, default=60.0, help="seconds of the 3x overload")
    parser.add_argument("--client-hop", type=float, default=6.0, help="seconds per client candidate and rate")
    parser.add_argument("--rates", default="500,1000,1500,2000,3000,4000,5000,6000")
    args = parser.parse_args(argv)
    settings = Settings()
    profiles = ProfileSet.load(settings.profiles_dir / "digits.json")
    variants = [p.variant for p in sorted(profiles.variants, key=lambda p: p.latency_ms(1))]
    rows = np.load(settings.models_dir / "digits-test.npz")["x"].astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="meridian-bench-") as tmp:
        with LocalStack(var_dir=Path(tmp), kafka_port=29092, redis_port=26379, prometheus_port=29090) as stack:
            with LocalLauncher(stack.env, Path(tmp) / "logs") as launcher:
                latency, transport, cpu = added_latency(stack, launcher, variants, rows, args.duration, (200.0, 1000.0))
                best, steps = scheduler_ceiling(stack, launcher, variants[0],
                                                [float(r) for r in args.rates.split(",")], args.step)
            overloaded = overload(stack, Path(tmp) / "overload", args.overload)
            clients = measure_clients(stack.settings(), duration_s=args.client_hop, candidates=tuple(
                c for c in CANDIDATES if c.fetch_wait_ms in (5, 100)))
            print(format_table(clients), flush=True)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    plot_overload(overloaded, RESULTS_DIR / "pipeline.png")
    notes = overloaded.notes
    floor = floor_hop_ms_p50(clients)
    write_result("pipeline", {
        "added_latency_ms_p50": latency[200.0]["p50_ms"], "added_latency_ms_p99": latency[200.0]["p99_ms"],
        "added_latency_ms_p99_1000qps": latency[1000.0]["p99_ms"],
        "scheduler_max_qps": best,
        "scheduler_cpu_us_per_query": cpu,
        "floor_hop_ms_p50": floor,
        "over_floor": {"added_latency_p50_over_3_hops": round(latency[200.0]["p50_ms"] / (3 * floor["200_qps"]), 1),
                       "added_latency_p99_over_3_hops": round(latency[200.0]["p99_ms"] / (3 * floor["200_qps"]), 1),
                       "p99_1000qps_over_1_hop": round(latency[1000.0]["p99_ms"] / floor["1000_qps"], 1)},
        "overload_capacity_qps": notes["capacity_qps"], "overload_goodput_qps": notes["goodput_qps"],
        "overload_goodput_ratio": notes["goodput_ratio"], "overload_late_ratio": notes["late_ratio"],
        "clients": clients,
        "transport_ms": transport.summary_ms(),
        "targets": {"added_latency_p50_over_3_hops": 2.0, "added_latency_p99_over_3_hops": 5.0,
                    "p99_1000qps_over_1_hop": 20.0,
                    "scheduler_max_qps": 3000, "scheduler_cpu_us_per_query_total": 150, "overload_goodput_ratio": 0.9, "overload_late_ratio": 0.01},
        "details": {"added_latency": {f"{rate:g}_qps": row for rate, row in latency.items()}, "ceiling_steps": steps,
                    "variant": variants[0], "overload": overloaded.model_dump(exclude={"series"}),
                    "overload_per_second": overloaded.series, "figure": "bench/results/pipeline.png",
                    "workers": "2 real onnxruntime (latency); 2 emulating cpu-1t from its measured profile (ceiling); "
                               "1 emulating cpu-1t efficientnet-lite0, max batch 1 (overload)"},
    })


if __name__ == "__main__":
    main()
