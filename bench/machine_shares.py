"""Two real workers that measured themselves, served live by every policy: who gets the work, and the SLO.

`make bench-machines`' second part (`bench.machines` runs it, alone on the machine). On a stack of its
own (Kafka and Redis), two real onnxruntime workers serve the digits family's slowest variant, one given
one intra-op thread (device key ``cpu-1t``) and one given two (``cpu-2t``); each measures itself at its
first start and announces it (`services.worker.self_measure`). Each policy of `POLICIES` serves them through Kafka
(Proteus with its planner, planning the two machines by their announcements): Poisson queries of `ROWS`
digit rows at each of `LOADS` times the pair's capacity by their announcements (`pair_capacity_rows_per_s`),
for `SECONDS` each. Per point: the share of rows each worker computed, SLO attainment, and the same
queries in the simulator, with `SimWorker`s announcing what the live workers announced and the hops
fitted from the live answers. RAMSIS is left out: its MDP policies are solved offline for one device
type, and it deals queries round-robin.

This host has two cores, shared by both workers (three threads), the broker, the scheduler and the client:
the two-thread worker computes faster only while the other processes leave it a second core.
"""
from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path

import numpy as np

from bench.common import save_figure
from schemas import Query, ResultStatus, WorkerHeartbeat, worker_event_adapter
from services.launcher import LocalLauncher
from services.replay.comparison import simulate_record
from services.serve_config import ServeConfig, WorkerConfig, settings_env, start_services
from services.stack import LocalStack
from shared.adapters import topics
from shared.adapters.client import MeridianClient
from shared.adapters.kafka_io import make_consumer
from shared.catalogue import Catalogue
from shared.proteus.capacity import peak_throughput
from shared.serving.wording import reason_kind
from shared.settings import Settings
from shared.sim.arrivals import poisson_arrivals
from shared.sim.transport import fit_transport, hop_records
from shared.sim.workers import SimWorker
from shared.tensors import encode_binary

POLICIES = ("fcfs", "kairos", "infaas", "proteus")
VARIANT = "digits-cnn-l"
ROWS = 16
#: times the pair's capacity by their announcements, which counts compute alone: on this 2-core host the
#: client, broker and scheduler share the cores, and at 0.25x (375 q/s) live attainment fell to 92-98%
LOADS = (0.1, 0.2)
SECONDS = 20.0
#: a fresh worker's first batches are slow: each policy's run starts with these, unmeasured
WARM_QPS, WARM_S = 20.0, 3.0
WORKERS = {"real-1t": 1, "real-2t": 2}
PORTS = {"kafka": 29892, "redis": 26879, "metrics": 19970}


def serve_config(policy: str) -> ServeConfig:
    settings = {"planner_fleet": {f"cpu-{t}t": 1 for t in WORKERS.values()}} if policy == "proteus" else {}
    return ServeConfig(applications={"digits": ["digits"]}, policy=policy,
                       planner="proteus" if policy == "proteus" else None, settings=settings,
                       workers=[WorkerConfig(id=name, variants=[VARIANT], threads=threads)
                                for name, threads in WORKERS.items()])


def announcements(settings: Settings, timeout_s: float = 60.0) -> dict[str, WorkerHeartbeat]:
    """Each worker's latest heartbeat on the worker events topic, read from its start."""
    consumer = make_consumer(settings, topics.WORKER_EVENTS, group_id=None, auto_offset_reset="earliest")
    latest: dict[str, WorkerHeartbeat] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and not set(WORKERS) <= {w for w, b in latest.items() if b.measured}:
            for records in consumer.poll(timeout_ms=500).values():
                for record in records:
                    event = worker_event_adapter.validate_json(record.value)
                    if isinstance(event, WorkerHeartbeat) and event.worker_id in WORKERS:
                        latest[event.worker_id] = event
    finally:
        consumer.close()
    missing = set(WORKERS) - {w for w, b in latest.items() if b.measured}
    if missing:
        raise RuntimeError(f"no measurement announced by {sorted(missing)} within {timeout_s} s")
    return latest


def pair_capacity_rows_per_s(catalogue: Catalogue, beats: dict[str, WorkerHeartbeat], slo_ms: float) -> float:
    """Rows per second the two serve at best by what they announced (each the largest batch within half the
    SLO over its latency, as Proteus counts a device's capacity)."""
    measured = catalogue.with_measured({(VARIANT, b.device): b.measured[VARIANT] for b in beats.values()},
                                       {b.device: b.price_per_hour for b in beats.values()})
    return sum(peak_throughput(measured.profile(VARIANT, b.device), slo_ms) for b in beats.values())


def send(client: MeridianClient, rows: np.ndarray, rate: float, slo_ms: float, *, seconds: float,
         seed: int) -> list[Query]:
    """Poisson queries of `ROWS` rows at ``rate`` for ``seconds``; the queries as sent."""
    times = poisson_arrivals(rate, max(2, int(rate * seconds)), np.random.default_rng(seed))
    run, sent, start = uuid.uuid4().hex[:6], [], time.time()
    for index, offset in enumerate(times):
        delay = start + offset - time.time()
        if delay > 0:
            time.sleep(delay)
        first = (index * ROWS) % (len(rows) - ROWS)
        inputs = encode_binary(rows[first:first + ROWS])
        query = Query(query_id=f"mach-{run}-{index}", application="digits", model=VARIANT, slo_ms=slo_ms,
                      batch_size=ROWS, inputs=inputs.tensors, sent_at=time.time())
        sent.append(client.send(query, inputs.binary))
    client.flush()
    return sent


def shares(rows_by_worker: Counter) -> dict[str, float]:
    """Each worker's share of the rows computed."""
    total = sum(rows_by_worker.values()) or 1
    return {worker: round(rows_by_worker[worker] / total, 3) for worker in WORKERS}


def live_point(client: MeridianClient, rows: np.ndarray, rate: float, slo_ms: float, seconds: float,
               seed: int) -> tuple[dict, list[Query], dict]:
    """What one load measured live, the queries as sent, and their answers."""
    sent = send(client, rows, rate, slo_ms, seconds=seconds, seed=seed)
    client.wait_for([q.query_id for q in sent], timeout_s=60)
    answers = {q.query_id: client.results[q.query_id] for q in sent if q.query_id in client.results}
    served: Counter = Counter()
    missed: Counter = Counter()
    for query in sent:
        result, held = answers.get(query.query_id, (None, None))
        if result is None:
            missed["unanswered"] += 1
        elif result.status is not ResultStatus.OK:
            missed[f"{result.status.value}: {reason_kind(result.reason or '')}"] += 1
        else:
            served[result.worker_id] += query.batch_size
            missed["ok, late"] += (held - query.sent_at) * 1000.0 > query.slo_ms
    in_slo = len(sent) - sum(missed.values())
    return {"queries": len(sent), "answered": len(answers), "slo_attainment": round(in_slo / len(sent), 4),
            "row_share": shares(served), "missed": dict(+missed)}, sent, answers


def simulated_point(policy: str, settings: Settings, catalogue: Catalogue, beats: dict[str, WorkerHeartbeat],
                    sent: list[Query], answers: dict) -> dict:
    """The same queries in the simulator: its workers announce what the live ones did, its hops are fitted
    from the live answers."""
    workers = [SimWorker(name, beats[name].device, (VARIANT,), beats[name].max_batch,
                         measured={VARIANT: beats[name].measured[VARIANT]})
               for name in WORKERS]
    start = min(q.sent_at for q in sent)
    result = simulate_record(policy, sent, workers, settings, catalogue, start_s=start,
                             transport=fit_transport(hop_records(answers)))
    served = Counter()
    for index, worker in enumerate(result.worker):
        if worker >= 0:
            served[result.worker_ids[worker]] += int(sent[index].batch_size)
    in_slo = float(np.mean(np.nan_to_num(result.latency_ms, nan=np.inf) <= result.slo_ms))
    return {"slo_attainment": round(in_slo, 4), "row_share": shares(served)}


def policy_points(stack: LocalStack, logs: Path, policy: str, loads: tuple[float, ...] = LOADS,
                  seconds: float = SECONDS) -> list[dict[str, object]]:
    """``policy`` serving the two real workers at each of ``loads`` (times the pair's announced capacity),
    live and in the simulator."""
    config = serve_config(policy)
    fields = config.settings_fields()
    settings = stack.settings().model_copy(update=fields)
    catalogue = Catalogue.from_settings(settings)
    rows = np.load(settings.models_dir / "digits-test.npz")["x"].astype(np.float32)
    slo_ms = catalogue.profiles.slo_ms["digits"]
    points = []
    with LocalLauncher({**stack.env, **settings_env(fields)}, logs) as launcher:
        start_services(launcher, config, metrics_port=PORTS["metrics"])
        beats = announcements(settings)
        capacity = pair_capacity_rows_per_s(catalogue, beats, slo_ms)
        with MeridianClient(settings, applications=["digits"]) as client:
            send(client, rows, WARM_QPS, slo_ms, seconds=WARM_S, seed=0)  # a fresh worker's first batches are slow
            for k, load in enumerate(loads):
                rate = load * capacity / ROWS
                live, sent, answers = live_point(client, rows, rate, slo_ms, seconds, seed=1 + k)
                sim = simulated_point(policy, settings, catalogue, beats, sent, answers)
                points.append({"policy": policy, "load": load, "rate_qps": round(rate, 1),
                               "pair_capacity_rows_per_s": round(capacity),
                               "announced": {name: {"device": beats[name].device,
                                                    "batch_latency_ms": beats[name].measured[VARIANT].batch_latency_ms}
                                             for name in WORKERS},
                               "live": live, "sim": sim})
                print(f"{policy} at {load:g}x ({rate:.0f} q/s of {ROWS} rows): live {live}; sim {sim}", flush=True)
    return points


def run(root: Path) -> list[dict[str, object]]:
    """Every policy of `POLICIES`, each on a fresh scheduler and workers (the measurement cached after the
    first start), on a stack of its own."""
    with LocalStack(var_dir=root / "var", kafka_port=PORTS["kafka"], redis_port=PORTS["redis"],
                    components=("kafka", "redis")) as stack:
        return [point for policy in POLICIES for point in policy_points(stack, root / "logs" / policy, policy)]


def plot(points: list[dict[str, object]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(LOADS), figsize=(5 * len(LOADS), 3.6), squeeze=False)
    for axis, load in zip(axes[0], LOADS):
        at = [p for p in points if p["load"] == load]
        x = np.arange(len(at))
        for offset, mode, colour in ((-0.2, "live", "#1f77b4"), (0.2, "sim", "#ff7f0e")):
            attained = ", ".join(f"{p[mode]['slo_attainment']:.1%}" for p in at)
            axis.bar(x + offset, [p[mode]["row_share"]["real-2t"] for p in at], 0.4, color=colour,
                     label=f"{mode}; within the SLO: {attained}")
        axis.axhline(0.5, color="#888", linestyle="--", linewidth=1)
        axis.set_xticks(x, [p["policy"] for p in at])
        axis.set_ylim(0, 1)
        axis.set_ylabel("share of rows on the 2-thread worker")
        axis.set_title(f"{load:g}x the pair's announced capacity", fontsize=9)
        axis.legend(fontsize=7)
    save_figure(fig, path)
