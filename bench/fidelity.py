"""``make bench-fidelity``: how much of each policy's simulated result a user gets live, through Kafka.

The workload of ``make demo`` (`services.demo.workload`), two applications: ``vision``
(EfficientNet-Lite0/1/2, 300 ms SLO) on three workers that emulate ``cpu-1t``, ``cpu-2t`` and ``g4dn-emu``
from their measured profiles, and ``digits`` (100 ms SLO) on a real onnxruntime worker. Arrivals follow
the Azure LLM ``conv`` trace (vision) and ``code`` trace (digits), one second per 20 s of trace, a 120 s
stretch scaled so vision's peak is 1.2x what the fleet serves with EfficientNet-Lite2 alone.

1. Calibration: FCFS serves ``--calibration`` seconds of the workload live, twice over: the first pass
   warms a fresh broker (its hops are twice as slow), the second is measured. The simulator's Kafka
   hops are fitted from its answers' per-hop timestamps (`shared.sim.transport.fit_transport`, the
   same fit ``make bench-pipeline`` prints), and the pipeline's p99 overhead (answer received - sent -
   compute) is measured on it.
2. Per policy: the local stack, a scheduler with that policy, the four workers (and the Proteus planner
   for ``proteus``: its plans route, the fleet stays; RAMSIS's policy set generated offline into Redis
   for vision on the ``g4dn-emu`` worker, since its MDP models one worker type, digits served first
   come first served beside it), the client library sending the trace. Then the
   simulator serves exactly the arrivals read back from the queries topic, on the fleet read back from
   the worker events, with the same settings: once as an ideal machine, once with the fitted hops,
   each pooling `SIM_DRAWS` seeds (one draw of service times and hops is not a prediction: on 30 s of
   overload, seeds alone differ by several points).
3. One table: live and simulated SLO attainment, effective accuracy, p50/p99, drops and fleet cost per
   policy, the gaps, and where the time went per hop (live timestamps against the simulator's split at
   the worker's start). ``bench/results/fidelity.png``: attainment and accuracy over time, live against
   simulated. ``bench/results/fidelity.json``: the numbers.

``--quick``: FCFS only, 30 s, 10 s calibration, the peak at `QUICK_PEAK_OVER_CAPACITY` (what ``make
test`` runs, loosely bounded: past capacity, two live runs of the same 30 s differ by up to 4 points).
"""
from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.common import RESULTS_DIR, write_result
from services.demo.workload import APPLICATIONS, SERVED, SLO_MS, Sender, schedule, top_capacity_qps
from services.launcher import LocalLauncher, wait_until
from services.serve_config import settings_env, start_services
from services.replay.comparison import SIM_DRAWS, Served, judge, judge_draws, simulate_draws
from services.replay.figure import plot_over_time
from services.replay.table import format_table
from services.stack import LocalStack
from shared.adapters.client import MeridianClient
from shared.adapters.recording import record
from shared.catalogue import Catalogue
from shared.settings import REPO_ROOT, Settings
from shared.sim.replay import fleet_from_events, live_outcomes
from shared.sim.scorecard import accuracies, score
from shared.sim.transport import HopRecord, TransportModel, fit_transport, hop_records

POLICIES = ("fcfs", "kairos", "infaas", "proteus", "ramsis")
#: seconds of trace per second of the run, as ``bench-proteus`` speeds the trace up
BIN_S = 20.0
#: the stretch of the run (seconds from the trace's start) whose peak is scaled to `PEAK_OVER_CAPACITY`
STRETCH_S = 120
PEAK_OVER_CAPACITY = 1.2
QUICK_PEAK_OVER_CAPACITY = 0.9
RAMSIS_SET, RAMSIS_DEVICE = "fidelity-vision", "g4dn-emu"
TARGET = {"slo_attainment_points": 2.0, "effective_accuracy_points": 0.5}
#: below the kernel's ephemeral range (32768-60999): a port there may be taken by any outgoing connection
PORTS = {"kafka": 31092, "redis": 31379, "metrics": 31301}


#: a policy with other settings, served and simulated under its own label: the papers' designs where Meridian
#: extends them by default (Kairos dispatching one query at a time; Proteus' wait, which leaves a batch no
#: slack), and the INFaaS artifact's blacklist of workers over 80% busy
VARIANTS: dict[str, tuple[str, dict[str, object]]] = {
    "kairos-paper": ("kairos", {"kairos_batch_queries": False}),
    "proteus-paper": ("proteus", {"proteus_batching": "proteus", "proteus_headroom": 1.05}),
    "infaas-artifact": ("infaas", {"infaas_max_dispatch_utilization": 0.8}),
}


#: Proteus as Meridian serves it: its planner re-planning every 5 s for 1.3x the measured demand on the vision
#: fleet, work-conserving batching (Meridian's extension; the paper's is `VARIANTS`' ``proteus-paper``), digits
#: first come first served on its own worker
PROTEUS_SERVING: dict[str, object] = {
    "planner": "proteus", "planner_fleet": {"cpu-1t": 1, "cpu-2t": 1, "g4dn-emu": 1}, "replan_period_s": 5,
    "proteus_batching": "nexus", "proteus_headroom": 1.3, "application_policies": {"digits": "fcfs"}}


def policy_settings(label: str) -> dict[str, object]:
    """The settings every process of a run starts with (the simulator reads the same values); ``label`` is a
    policy or one of `VARIANTS`."""
    policy, extra = VARIANTS.get(label, (label, {}))
    fields: dict[str, object] = {"applications": APPLICATIONS, "application_slo_ms": SLO_MS,
                                 "scheduler_policy": policy, "load_stats_interval_s": 1.0}
    if policy == "proteus":
        fields |= PROTEUS_SERVING
    if policy == "infaas":  # Meridian's one queue: an idle worker takes a batch however busy it was
        fields |= {"infaas_max_dispatch_utilization": 1.0}
    if policy == "ramsis":  # RAMSIS models one worker type: vision on the GPU, digits first come first served
        fields |= {"application_policies": {"digits": "fcfs"}, "ramsis_policy_set": RAMSIS_SET}
    return fields | extra


def service_env(policy: str) -> dict[str, str]:
    return settings_env(policy_settings(policy))


def run_settings(stack: LocalStack, policy: str) -> Settings:
    return stack.settings().model_copy(update=policy_settings(policy))


def generate_ramsis_set(settings: Settings, peak_qps: float) -> None:
    """RAMSIS's offline step: its policies for vision on one ``g4dn-emu`` worker, up to past the peak."""
    subprocess.run([sys.executable, "-m", "services.ramsis_generate", "--profiles",
                    str(REPO_ROOT / "profiles/proteus-fleet.json"), "--family", "efficientnet-lite",
                    "--device", RAMSIS_DEVICE, "--slo-ms", str(SLO_MS["vision"]), "--workers", "1",
                    "--min-rate", "10", "--max-rate", str(round(1.5 * peak_qps)), "--num-rates", "6",
                    "--name", RAMSIS_SET, "--redis-url", settings.redis_url],
                   check=True, capture_output=True, cwd=REPO_ROOT, timeout=600)


# -- one live run --------------------------------------------------------------------------------
@dataclasses.dataclass
class LiveRun:
    policy: str
    start_s: float
    end_s: float
    sent: list[str]
    answers: dict[str, tuple[object, float]]


def live_run(stack: LocalStack, policy: str, plan: Sequence[tuple[float, str]], logs: Path,
             rows: np.ndarray) -> LiveRun:
    settings = run_settings(stack, policy)
    with LocalLauncher({**stack.env, **service_env(policy)}, logs) as launcher:
        start_services(launcher, SERVED, metrics_port=PORTS["metrics"], planner=settings.scheduler_policy == "proteus")
        with MeridianClient(settings, applications=list(APPLICATIONS)) as client:
            sender = Sender(client, rows, prefix="fid")
            sender.warm_up()
            start = time.time()
            thread = threading.Thread(target=sender.send, args=(plan,), daemon=True)
            thread.start()
            wait_until(lambda: not thread.is_alive(), plan[-1][0] + 60, f"{policy}: sending the trace",
                       list(launcher.processes.values()))
            end = time.time()
            sent = [q.query_id for q in sender.sent]
            client.wait_for(sent, timeout_s=60)
            answers = {q: client.results[q] for q in sent if q in client.results}
    return LiveRun(policy, start, end, sent, answers)


# -- live against simulated ------------------------------------------------------------------------
def pipeline_overhead_ms(records: Sequence[HopRecord], q: float) -> float:
    """What Kafka adds to a query: its three hops (to the scheduler, to the worker, back to the client)."""
    added = [(r.scheduler_received - r.client_sent) + (r.worker_received - r.dispatched)
             + (r.client_received - r.compute_finished) for r in records]
    return round(float(np.quantile(added, q)) * 1000.0, 3)


def live_hops_ms(records: Sequence[HopRecord]) -> dict[str, dict[str, float]]:
    """Where live time went: to the worker's compute start, compute, and from compute end to the client."""
    parts = {"sent_to_compute_start": [r.compute_started - r.client_sent for r in records],
             "compute_start_to_client": [r.client_received - r.compute_started for r in records],
             "compute": [r.compute_finished - r.compute_started for r in records],
             "compute_end_to_client": [r.client_received - r.compute_finished for r in records],
             "scheduler_queue": [r.dispatched - r.scheduler_received for r in records],
             "to_scheduler": [r.scheduler_received - r.client_sent for r in records],
             "to_worker": [r.worker_received - r.dispatched for r in records],
             "worker_wait": [r.compute_started - r.worker_received for r in records]}
    return {name: quantiles_ms(values) for name, values in parts.items()}


def sim_hops_ms(results) -> dict[str, dict[str, float]]:
    def over_draws(part) -> np.ndarray:
        return np.concatenate([part(r)[r.served] for r in results])
    return {"sent_to_compute_start": quantiles_ms(over_draws(lambda r: r.start_s - r.arrival_s)),
            "compute_start_to_client": quantiles_ms(over_draws(lambda r: r.finish_s - r.start_s))}


def live_batches(answers: dict[str, tuple[object, float]]) -> dict[str, dict[str, float]]:
    """Rows per batch by device, live: the computed answers of one batch share its id (a row a worker
    dropped unstarted names its batch but no device)."""
    batches: dict[str, tuple[str, int]] = {}
    for result, _ in answers.values():
        if result.batch_id is not None and result.device is not None:
            device, rows = batches.get(result.batch_id, (result.device, 0))
            batches[result.batch_id] = (device, rows + 1)
    return rows_by_device(batches.values())


def sim_batches(results, workers: Sequence) -> dict[str, dict[str, float]]:
    """Rows per batch by device, simulated: the queries of one batch started together on one worker."""
    batches = []
    for result in results:
        served = np.flatnonzero(result.served)
        keys, rows = np.unique(np.stack([result.worker[served], result.start_s[served]]), axis=1, return_counts=True)
        batches += [(workers[int(w)].device, int(n)) for w, n in zip(keys[0], rows)]
    return rows_by_device(batches)


def rows_by_device(batches) -> dict[str, dict[str, float]]:
    by_device: dict[str, list[int]] = {}
    for device, rows in batches:
        by_device.setdefault(device, []).append(rows)
    return {device: {"batches": len(rows), "mean": round(float(np.mean(rows)), 2),
                     "p99": float(np.quantile(rows, 0.99))}
            for device, rows in sorted(by_device.items())}


def quantiles_ms(values) -> dict[str, float]:
    values = np.asarray(values, dtype=float)
    if not len(values):
        return {"p50": None, "p99": None}
    return {"p50": round(float(np.quantile(values, 0.5)) * 1000.0, 3),
            "p99": round(float(np.quantile(values, 0.99)) * 1000.0, 3)}


def compare(stack: LocalStack, run: LiveRun, transport: TransportModel) -> dict[str, object]:
    """Read the run back from Kafka, simulate it twice (ideal, with the fitted hops), score all three."""
    settings = run_settings(stack, run.policy)
    catalogue = Catalogue.from_settings(settings)
    recording = record(settings, run.start_s, run.end_s)
    queries = [q for _, q in recording.queries]
    fleet = fleet_from_events(recording.events)
    workers = [w.sim_worker() for w in fleet]
    live = judge(live_outcomes(queries, run.answers), [w.tenure() for w in fleet], catalogue,
                 start_s=run.start_s, end_s=run.end_s)
    sims: dict[str, Served] = {}
    hops = {"live": live_hops_ms(hop_records({q.query_id: run.answers[q.query_id] for q in queries
                                              if q.query_id in run.answers}))}
    batches = {"live": live_batches(run.answers)}
    for label, model in (("sim_ideal", None), ("sim", transport)):
        results = simulate_draws(settings.scheduler_policy, queries, workers, settings, catalogue, start_s=run.start_s,
                                 transport=model)
        sims[label] = judge_draws(results, [w.tenure() for w in fleet], catalogue, start_s=run.start_s,
                                  end_s=run.end_s)
        hops[label] = sim_hops_ms(results)
        batches[label] = sim_batches(results, workers)
    by_application = {app: {side: score(served.outcomes.only(served.outcomes.application == app),
                                        accuracies(catalogue.profiles), 0.0, draws=served.draws
                                        ).model_dump(exclude={"cost_dollars"})
                            for side, served in (("live", live), *sims.items())}
                      for app in APPLICATIONS}
    return {"live": live, "sim": sims["sim"], "sim_ideal": sims["sim_ideal"], "hops_ms": hops,
            "by_application": by_application, "batch_rows": batches,
            "fleet": sorted(f"{w.worker_id} ({w.device}{', emulated' if w.emulated else ''})" for w in fleet),
            "queries_read_back": len(queries), "queries_sent": len(run.sent), "answered": len(run.answers)}


def gaps(entry: dict[str, object], overhead_p99_ms: float) -> dict[str, object]:
    live, sim = entry["live"].card, entry["sim"].card
    accuracy_gap = (None if live.effective_accuracy is None or sim.effective_accuracy is None
                    else round(live.effective_accuracy - sim.effective_accuracy, 3))
    slo_gap = round(100.0 * (live.slo_attainment - sim.slo_attainment), 3)
    p99_bound = None if sim.p99_ms is None else round(sim.p99_ms + overhead_p99_ms, 3)
    return {"slo_attainment_points": slo_gap, "effective_accuracy_points": accuracy_gap,
            "live_p99_within_sim_plus_overhead": None if p99_bound is None or live.p99_ms is None
            else live.p99_ms <= p99_bound, "sim_p99_plus_overhead_ms": p99_bound,
            "met": abs(slo_gap) <= TARGET["slo_attainment_points"]
            and (accuracy_gap is None or abs(accuracy_gap) <= TARGET["effective_accuracy_points"])
            and (p99_bound is None or live.p99_ms is None or live.p99_ms <= p99_bound)}


def run_bench(stack: LocalStack, policies: Sequence[str], duration_s: float, calibration_s: float,
              logs: Path, *, peak_over_capacity: float = PEAK_OVER_CAPACITY) -> dict[str, object]:
    settings = run_settings(stack, "fcfs")
    catalogue = Catalogue.from_settings(settings)
    rows = np.load(settings.models_dir / "digits-test.npz")["x"].astype(np.float32)
    scale = {"bin_s": BIN_S, "peak_over_capacity": peak_over_capacity, "scaled_on_s": STRETCH_S}
    stretch = schedule(settings, catalogue, calibration_s, skip_s=duration_s, **scale)
    calibration = live_run(stack, "fcfs", stretch + [(calibration_s + t, app) for t, app in stretch],
                           logs / "calibration", rows)
    records = [r for r in hop_records(calibration.answers) if r.client_sent >= calibration.start_s + calibration_s]
    transport = fit_transport(records)
    overhead_p99 = pipeline_overhead_ms(records, 0.99)
    print(f"calibration: {len(records)} answers; hops {transport.summary_ms()}; pipeline overhead p99 "
          f"{overhead_p99} ms", flush=True)
    plan = schedule(settings, catalogue, duration_s, **scale)
    peak_qps = round(peak_over_capacity * top_capacity_qps(catalogue), 1)
    if "ramsis" in policies:
        generate_ramsis_set(settings, peak_qps)
    results: dict[str, dict[str, object]] = {}
    for policy in policies:
        started = time.monotonic()
        run = live_run(stack, policy, plan, logs / policy, rows)
        entry = compare(stack, run, transport)
        entry["gaps"] = gaps(entry, overhead_p99)
        results[policy] = entry
        rows_printed = {f"{policy} live": entry["live"].card, f"{policy} sim": entry["sim"].card,
                        f"{policy} sim (ideal)": entry["sim_ideal"].card}
        print(format_table(rows_printed), flush=True)
        print(f"  gaps {entry['gaps']}; {time.monotonic() - started:.0f} s", flush=True)
        hops = entry["hops_ms"]
        print("  where the time went, p50/p99 ms: " + "; ".join(
            f"{part} live {hops['live'][part]['p50']}/{hops['live'][part]['p99']}, sim {hops['sim'][part]['p50']}/"
            f"{hops['sim'][part]['p99']}" for part in ("sent_to_compute_start", "compute_start_to_client")), flush=True)
        print("  rows per batch by device (live | sim): " + "; ".join(
            f"{device} {rows['mean']} / p99 {rows['p99']:g} | {entry['batch_rows']['sim'].get(device, {}).get('mean')}"
            f" / p99 {entry['batch_rows']['sim'].get(device, {}).get('p99')}"
            for device, rows in entry["batch_rows"]["live"].items()), flush=True)
        for app, sides in entry["by_application"].items():
            print(f"  {app}: " + "; ".join(f"{side} {card['slo_attainment']:.4f} attained, p99 {card['p99_ms']} ms, "
                                           f"{card['dropped']} dropped" for side, card in sides.items()), flush=True)
    return {"transport": transport, "pipeline_p99_overhead_ms": overhead_p99, "policies": results,
            "queries": len(plan), "peak_vision_qps": peak_qps}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fidelity", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="FCFS only, 30 s, 10 s calibration, peak below capacity")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--duration", type=float, default=float(STRETCH_S))
    parser.add_argument("--calibration", type=float, default=30.0)
    args = parser.parse_args(argv)
    policies = ["fcfs"] if args.quick else args.policies.split(",")
    duration, calibration = (30.0, 10.0) if args.quick else (args.duration, args.calibration)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="meridian-fidelity-") as tmp:
        with LocalStack(var_dir=Path(tmp), kafka_port=PORTS["kafka"], redis_port=PORTS["redis"],
                        components=("kafka", "redis")) as stack:
            outcome = run_bench(stack, policies, duration, calibration, Path(tmp) / "logs",
                                peak_over_capacity=QUICK_PEAK_OVER_CAPACITY if args.quick else PEAK_OVER_CAPACITY)
    figure = plot_over_time({p: {"live": e["live"].series, "simulated": e["sim"].series}
                             for p, e in outcome["policies"].items()}, RESULTS_DIR / "fidelity.png",
                            title="SLO attainment and accuracy per 5 s: live (solid) against simulated with the "
                                  "fitted Kafka hops (dashed)")
    print(format_table({f"{p} {side}": e[side].card for p, e in outcome["policies"].items()
                        for side in ("live", "sim", "sim_ideal")}))
    write_result("fidelity", {
        "policies": {p: {"live": e["live"].card.model_dump(), "sim": e["sim"].card.model_dump(),
                         "sim_ideal": e["sim_ideal"].card.model_dump(), "gaps": e["gaps"], "hops_ms": e["hops_ms"],
                         "by_application": e["by_application"], "batch_rows": e["batch_rows"], "fleet": e["fleet"],
                         "queries_sent": e["queries_sent"], "queries_read_back": e["queries_read_back"],
                         "answered": e["answered"]}
                     for p, e in outcome["policies"].items()},
        "pipeline_p99_overhead_ms": outcome["pipeline_p99_overhead_ms"],
        "transport_ms": outcome["transport"].summary_ms(), "transport": outcome["transport"].model_dump(),
        "targets": TARGET, "sim_draws": SIM_DRAWS, "queries_per_policy": outcome["queries"],
        "peak_vision_qps": outcome["peak_vision_qps"],
        "duration_s": duration, "wall_s": round(time.monotonic() - started, 1),
        "figure": str(figure.relative_to(REPO_ROOT)),
        "workers": "vision: 3 workers emulating cpu-1t, cpu-2t, g4dn-emu from measured profiles; digits: 1 real "
                   "onnxruntime worker"})


if __name__ == "__main__":
    main()
