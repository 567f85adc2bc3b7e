"""``make bench-hosts``: Meridian on hosts of its own, and what a link cut and healed costs.

On the rig (`services.rig`: network namespaces on one bridge, each host its own address): three Kafka
nodes on three hosts as one KRaft cluster, Redis on a fourth, two schedulers (one of them the standby) on
two more, a real digits worker on each of two more; the client is the bridge's own host. Under a steady
Poisson load of digits queries, each drill takes one host's link down for ``CUT_S`` and brings it back,
one minute apart: a worker's host, a broker's host (``kafka1``), then the host of the scheduler that
serves the application (the standby takes over).

Per drill, over the minute around it: queries lost (never answered), duplicates (results the client
received twice and suppressed), SLO attainment, the first ``ok`` after the cut and after the heal (for a
query sent after that moment, seconds from it to the answer), and the recovery time: from the cut to the
first moment from which every query sent in the next 2 s was answered within the SLO. Kafka's settings
bound most of it: see `BOUNDED_BY`.

First, what hosts of their own add to a query: the same deployment (three brokers, two schedulers, two
workers) at ``LATENCY_RATE_QPS`` for ``LATENCY_S`` on one host (this machine's loopback), on the rig without
TLS, and on the rig with it (the drills' rig): each query's latency from its send to its answer, p50 and
p99 (digits-mlp-s computes a row in ~0.02 ms: the latency is the path's).

Writes ``bench/results/hosts.json`` and ``bench/results/hosts.png`` (within-SLO share per second, the cut
and heal marked).
"""
from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.common import RESULTS_DIR, save_figure, write_result
from schemas import Query, ResultStatus
from services.launcher import LocalLauncher, read_metric
from services.rig import HostsRig
from services.stack import LocalStack
from shared.adapters.client import MeridianClient
from shared.settings import Settings
from shared.tensors import encode

SLO_MS = 1000.0
CUT_S = 10.0
#: seconds of load before the first drill, between drills, and after the last
SPACING_S = 60.0
RATE_QPS = 40.0
#: a drill's recovery: the first moment after the cut from which every query sent in this window is ok
RECOVERED_WINDOW_S = 2.0
#: the latency comparison: queries a second, and seconds measured after `LATENCY_WARM_S` unmeasured
LATENCY_RATE_QPS, LATENCY_S, LATENCY_WARM_S = 200.0, 20.0, 5.0
VARIANT = "digits-mlp-s"
#: which of Kafka's and Meridian's settings bound each drill's figures
BOUNDED_BY = {
    "worker": "the scheduler counts a worker lost after 3 missed heartbeats (MERIDIAN_HEARTBEAT_INTERVAL_S, 1 s) "
              "and re-dispatches its unfinished batches; on the heal the worker reads its topic from its committed "
              "offset and its late results reach the client as duplicates, which it suppresses",
    "broker": "the controller fences a broker it has not heard for broker.session.timeout.ms "
              "(MERIDIAN_KAFKA_BROKER_SESSION_TIMEOUT_MS, Kafka's default 9 s) and moves its partitions' "
              "leadership; a group coordinator on it moves with them",
    "scheduler": "the standby is given the partitions once the group coordinator has not heard the active "
                 "scheduler for its session.timeout.ms (10 s, services/scheduler/query_reader.py): a cut "
                 "shorter than that ends with the same scheduler serving",
}


@dataclass
class Drill:
    kind: str
    host: str
    cut_at: float
    healed_at: float


def digits_rows(settings: Settings) -> np.ndarray:
    """The digits test split's rows, the queries' inputs."""
    return np.load(settings.models_dir / "digits-test.npz")["x"].astype(np.float32)


def digits_query(rows: np.ndarray, k: int) -> Query:
    return Query(query_id=f"hosts-{k:06d}-{uuid.uuid4().hex[:8]}", application="digits", model="digits", slo_ms=SLO_MS, batch_size=1,
                 inputs=encode(rows[k % len(rows)][None, ...]), sent_at=time.time())


def start_services(rig: HostsRig, variant: str) -> dict[str, LocalLauncher]:
    """Two schedulers (``sched1``, ``sched2``) and a real worker on each of ``worker1``, ``worker2``, healthy:
    host -> the launcher of its process (``stop_all`` stops it)."""
    launchers = {host: rig.launcher(host) for host in ("sched1", "sched2", "worker1", "worker2")}
    try:
        schedulers = [launchers[host].start_scheduler(metrics_port=9101, name=name)
                      for host, name in (("sched1", "sched-a"), ("sched2", "sched-b"))]
        for host in ("worker1", "worker2"):
            launchers[host].start_worker(host, variants=[variant], metrics_port=9102)
        for host, scheduler in zip(("sched1", "sched2"), schedulers):
            launchers[host].wait_for_workers(scheduler, 2, timeout_s=120)
    except BaseException:
        stop_services(launchers)
        raise
    return launchers


def stop_services(launchers: dict[str, LocalLauncher]) -> None:
    for launcher in launchers.values():
        launcher.stop_all()


def latency_ms(settings: Settings, rate: float = LATENCY_RATE_QPS, seconds: float = LATENCY_S,
               warm_s: float = LATENCY_WARM_S) -> dict[str, float]:
    """Poisson digits queries at ``rate``: p50 and p99 of send-to-answer over the ``seconds`` after ``warm_s``."""
    rows = digits_rows(settings)
    offsets = np.cumsum(np.random.default_rng(1).exponential(1.0 / rate, size=int(rate * (warm_s + seconds) * 1.2)))
    offsets = offsets[offsets < warm_s + seconds]
    with MeridianClient(settings, applications=["digits"]) as client:
        start, sent = time.time(), []
        for k, offset in enumerate(offsets):
            time.sleep(max(0.0, start + offset - time.time()))
            sent.append((offset, client.send(digits_query(rows, k))))
        client.flush()
        client.wait_for([q.query_id for _, q in sent], timeout_s=60)
        took = [(client.results[q.query_id][1] - q.sent_at) * 1000.0 for offset, q in sent
                if offset >= warm_s and q.query_id in client.results
                and client.results[q.query_id][0].status is ResultStatus.OK]
    return {"queries": len(took), "p50_ms": round(float(np.percentile(took, 50)), 2),
            "p99_ms": round(float(np.percentile(took, 99)), 2)}


def one_host_latency(root: Path) -> dict[str, float]:
    """The drills' deployment on this machine's loopback: three brokers, two schedulers, two workers."""
    stack = LocalStack(var_dir=root / "one-host", kafka_port=29892, kafka_brokers=3, redis_port=26879,
                       components=("kafka", "redis"))
    with stack, LocalLauncher(stack.env, root / "one-host" / "logs") as launcher:
        schedulers = [launcher.start_scheduler(metrics_port=29901 + k, name=f"sched-{k}") for k in (1, 2)]
        for k in (1, 2):
            launcher.start_worker(f"worker{k}", variants=[VARIANT], metrics_port=29911 + k)
        for scheduler in schedulers:
            launcher.wait_for_workers(scheduler, 2, timeout_s=120)
        return latency_ms(stack.settings())


def rig_latency(root: Path, *, secure: bool) -> dict[str, float]:
    with HostsRig(root / f"rig-{secure}", prefix="mrl", subnet="10.77.4", secure=secure) as rig:
        launchers = start_services(rig, VARIANT)
        try:
            return latency_ms(rig.settings())
        finally:
            stop_services(launchers)


def active_scheduler(rig: HostsRig) -> str:
    """The scheduler host that has dispatched the most batches so far: the one serving the application."""
    counts = {host: read_metric(9101, "meridian_batch_rows_count", rig.host(host).address) or 0.0
              for host in ("sched1", "sched2")}
    return max(counts, key=counts.get)


def recovered_after(sent: np.ndarray, good: np.ndarray, since: float, window_s: float = RECOVERED_WINDOW_S
                    ) -> float | None:
    """Seconds from ``since`` to the first query sent after it from which every query sent in the next
    ``window_s`` was good (``sent``: send times, ascending; ``good``: each answered ok within its SLO)."""
    after = np.flatnonzero(sent >= since)
    for i in after:
        inside = (sent >= sent[i]) & (sent < sent[i] + window_s)
        if good[inside].all():
            return float(sent[i] - since)
    return None


def first_ok_after(sent: np.ndarray, received: np.ndarray, ok: np.ndarray, since: float) -> float | None:
    """Seconds from ``since`` to the first ``ok`` answer of a query sent after it."""
    chosen = (sent >= since) & ok
    return float(received[chosen].min() - since) if chosen.any() else None


def run(rig: HostsRig, drills: list[tuple[str, str]], *, rate: float = RATE_QPS, spacing_s: float = SPACING_S,
        cut_s: float = CUT_S, seed: int = 0) -> dict:
    """Queries at ``rate`` (Poisson) for ``spacing_s`` before, between and after ``drills`` (kind, host; host
    ``active``: the scheduler serving the application when the drill starts); what each cost, and the
    run's answers per second."""
    rows = digits_rows(rig.settings())
    rng = np.random.default_rng(seed)
    length_s = spacing_s * (len(drills) + 1)
    offsets = np.cumsum(rng.exponential(1.0 / rate, size=int(rate * length_s * 1.2)))
    offsets = offsets[offsets < length_s]
    done: list[Drill] = []
    with MeridianClient(rig.settings(), applications=["digits"]) as client:
        sent: list[Query] = []
        start = time.time()

        failures: list[BaseException] = []

        def cut_and_heal() -> None:
            for k, (kind, host) in enumerate(drills, 1):
                time.sleep(max(0.0, start + k * spacing_s - time.time()))
                host = active_scheduler(rig) if host == "active" else host
                rig.cut(host)
                cut_at = time.time() - start
                try:
                    time.sleep(cut_s)
                finally:
                    rig.heal(host)
                done.append(Drill(kind, host, cut_at, time.time() - start))
                print(f"{kind} drill: {host} cut at {cut_at:.1f} s, healed at {done[-1].healed_at:.1f} s", flush=True)

        def drilling() -> None:
            try:
                cut_and_heal()
            except BaseException as exc:  # raised in the caller's thread once the load is sent
                failures.append(exc)

        chaos = threading.Thread(target=drilling, daemon=True)
        chaos.start()
        for k, offset in enumerate(offsets):
            time.sleep(max(0.0, start + offset - time.time()))
            sent.append(client.send(digits_query(rows, k)))
        client.flush()
        chaos.join()
        if failures:
            raise failures[0]
        client.wait_for([q.query_id for q in sent], timeout_s=120)
        answers = [client.results.get(q.query_id) for q in sent]
        duplicates = client.duplicates
    at = np.array([q.sent_at - start for q in sent])
    answered = np.array([a is not None for a in answers])
    ok = np.array([a is not None and a[0].status is ResultStatus.OK for a in answers])
    received = np.array([a[1] - start if a is not None else np.inf for a in answers])
    good = ok & ((received - at) * 1000.0 <= SLO_MS)
    outcomes = []
    for drill in done:
        around = (at >= drill.cut_at - spacing_s / 2) & (at < drill.cut_at + spacing_s / 2)
        outcomes.append({
            "drill": drill.kind, "host": drill.host, "cut_at_s": round(drill.cut_at, 2),
            "healed_at_s": round(drill.healed_at, 2), "queries": int(around.sum()),
            "lost": int((around & ~answered).sum()),
            "slo_attainment": round(float(good[around].mean()), 4),
            "first_ok_after_cut_s": _rounded(first_ok_after(at, received, ok, drill.cut_at)),
            "first_ok_after_heal_s": _rounded(first_ok_after(at, received, ok, drill.healed_at)),
            "recovery_s": _rounded(recovered_after(at, good, drill.cut_at)),
            "bounded_by": BOUNDED_BY[drill.kind]})
    seconds = np.arange(int(length_s) + 1)
    per_second = [round(float(good[(at >= s) & (at < s + 1)].mean()), 3) if ((at >= s) & (at < s + 1)).any() else None
                  for s in seconds]
    return {"rate_qps": rate, "slo_ms": SLO_MS, "cut_s": cut_s, "sent": len(sent), "lost": int((~answered).sum()),
            "duplicates_suppressed": duplicates, "drills": outcomes, "within_slo_per_second": per_second}


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(9, 3.6))
    shares = result["within_slo_per_second"]
    axis.plot([s for s, v in enumerate(shares) if v is not None], [v for v in shares if v is not None], lw=1)
    for drill in result["drills"]:
        axis.axvspan(drill["cut_at_s"], drill["healed_at_s"], color="#f4a6a6", alpha=0.5)
        axis.text(drill["cut_at_s"], 1.03, f"{drill['drill']} ({drill['host']})", fontsize=7)
    axis.set_ylim(0, 1.1)
    axis.set_xlabel("seconds")
    axis.set_ylabel("queries within SLO (per second sent)")
    axis.set_title(f"links cut for {result['cut_s']:g} s on the rig, {result['rate_qps']:g} q/s", fontsize=9)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.hosts", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=RATE_QPS)
    parser.add_argument("--spacing", type=float, default=SPACING_S, help="seconds between drills")
    parser.add_argument("--broker-session-timeout-ms", type=int, default=None,
                        help="the brokers' broker.session.timeout.ms (default: Kafka's, 9000)")
    parser.add_argument("--socket-timeout-ms", type=int, default=None,
                        help="every librdkafka client's socket.timeout.ms (default: MERIDIAN_KAFKA_SOCKET_TIMEOUT_MS)")
    args = parser.parse_args(argv)
    if args.broker_session_timeout_ms is not None:
        os.environ["MERIDIAN_KAFKA_BROKER_SESSION_TIMEOUT_MS"] = str(args.broker_session_timeout_ms)
    if args.socket_timeout_ms is not None:
        os.environ["MERIDIAN_KAFKA_SOCKET_TIMEOUT_MS"] = str(args.socket_timeout_ms)
    latency = {}
    with tempfile.TemporaryDirectory(prefix="meridian-bench-hosts-") as tmp:
        latency["one host"] = one_host_latency(Path(tmp))
        latency["hosts, PLAINTEXT"] = rig_latency(Path(tmp), secure=False)
        print(f"latency at {LATENCY_RATE_QPS:g} q/s: {latency}", flush=True)
        with HostsRig(Path(tmp) / "drills", prefix="mrb", subnet="10.77.1") as rig:
            launchers = start_services(rig, VARIANT)
            try:
                latency["hosts, TLS"] = latency_ms(rig.settings())
                print(f"latency at {LATENCY_RATE_QPS:g} q/s: {latency}", flush=True)
                result = run(rig, [("worker", "worker1"), ("broker", "kafka1"), ("scheduler", "active")],
                             rate=args.rate, spacing_s=args.spacing)
            finally:
                stop_services(launchers)
    result["latency_at_200_qps"] = latency
    result["broker_session_timeout_ms"] = int(os.environ.get("MERIDIAN_KAFKA_BROKER_SESSION_TIMEOUT_MS", "9000"))
    result["socket_timeout_ms"] = Settings().kafka_socket_timeout_ms
    plot(result, RESULTS_DIR / "hosts.png")
    write_result("hosts", result)


if __name__ == "__main__":
    main()
