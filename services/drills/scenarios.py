"""The drills: each starts its services on the given stack, breaks one thing under a steady load, and
returns what the client saw.

Ports: each drill takes a ``port_base`` and uses the next few metrics ports from it, so tests and the
benchmark can run them next to other services.
"""
from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
from kafka import TopicPartition
from kafka.errors import KafkaError

from schemas import Query
from services.drills.load import DrillOutcome, run_drill
from services.launcher import LocalLauncher, ManagedProcess, read_metric, wait_until
from services.observability.lag_exporter import collect
from services.stack import LocalStack
from shared.adapters import topics
from shared.adapters.kafka_io import make_admin, make_consumer
from shared.settings import REPO_ROOT, Settings
from shared.tensors import encode

DIGITS_TEST_SPLIT = REPO_ROOT / "var/models/digits-test.npz"
#: real onnxruntime variants; cheap enough that two workers keep up with the drills' load
DIGITS_VARIANTS = ["digits-mlp-s", "digits-cnn-xs"]
#: ~9.6 ms per image measured on this CPU: an emulated worker of it has a capacity one client can exceed
OVERLOAD_VARIANT = "efficientnet-lite0"


@dataclass(frozen=True)
class DrillConfig:
    rate_qps: float = 40.0
    duration_s: float = 20.0
    fault_at_s: float = 5.0
    #: how long the broken part stays broken (outages), or before a killed process is restarted
    outage_s: float = 5.0
    slo_ms: float = 5000.0
    settle_s: float = 90.0


def digits_queries(slo_ms: float, seed: int = 0) -> Callable[[], Query]:
    data = np.load(DIGITS_TEST_SPLIT)
    x = data["x"].astype(np.float32)
    rng = np.random.default_rng(seed)

    def make() -> Query:
        rows = x[rng.integers(0, len(x), size=2)]
        return Query(query_id=f"drill-{uuid.uuid4().hex}", application="digits", model="digits", slo_ms=slo_ms,
                     batch_size=len(rows), inputs=encode(rows), sent_at=time.time())
    return make


def _digits_pipeline(launcher: LocalLauncher, port_base: int, *, policy: str | None = None) -> ManagedProcess:
    scheduler = launcher.start_scheduler(metrics_port=port_base, policy=policy)
    for index in (1, 2):
        launcher.start_worker(f"drill-w{index}", variants=DIGITS_VARIANTS, metrics_port=port_base + index)
    launcher.wait_for_workers(scheduler, 2, timeout_s=120)
    return scheduler


def _steady_digits(stack: LocalStack, config: DrillConfig, inject: Callable[[], None]) -> DrillOutcome:
    return run_drill(stack.settings(), digits_queries(config.slo_ms), rate_qps=config.rate_qps,
                     duration_s=config.duration_s, fault_at_s=config.fault_at_s, inject=inject,
                     settle_s=config.settle_s)


def worker_kill(stack: LocalStack, log_dir: Path, port_base: int, config: DrillConfig) -> DrillOutcome:
    """SIGKILL one of two workers; restart it with the same id after ``outage_s``."""
    with LocalLauncher(stack.env, log_dir) as launcher:
        _digits_pipeline(launcher, port_base)

        def inject() -> None:
            launcher.processes.pop("worker-drill-w1").kill()
            time.sleep(config.outage_s)
            launcher.start_worker("drill-w1", variants=DIGITS_VARIANTS, metrics_port=port_base + 1)
        return _steady_digits(stack, config, inject)


def scheduler_restart(stack: LocalStack, log_dir: Path, port_base: int, config: DrillConfig) -> DrillOutcome:
    """SIGKILL the scheduler and start a new one: it re-reads every query whose offset it had not committed."""
    with LocalLauncher(stack.env, log_dir) as launcher:
        _digits_pipeline(launcher, port_base)

        def inject() -> None:
            launcher.processes.pop("scheduler").kill()
            time.sleep(config.outage_s)
            launcher.start_scheduler(metrics_port=port_base)
        return _steady_digits(stack, config, inject)


def broker_restart(stack: LocalStack, log_dir: Path, port_base: int, config: DrillConfig) -> DrillOutcome:
    """Stop the Kafka broker (clean shutdown) and start it again after ``outage_s``."""
    with LocalLauncher(stack.env, log_dir) as launcher:
        _digits_pipeline(launcher, port_base)

        def inject() -> None:
            stack.restart("kafka", down_s=config.outage_s)
        return _steady_digits(stack, config, inject)


def leader_kill(stack: LocalStack, log_dir: Path, port_base: int, config: DrillConfig) -> DrillOutcome:
    """SIGKILL the broker leading the partition the load's queries go to, on a replicated cluster; start it
    again after ``outage_s`` and wait until it is back in every partition's in-sync replicas.

    Notes: the killed node, the partition's leader after the election and how long that took from the kill
    (``election_s``: the controller waits out the broker's session timeout, 9 s by default), and how long
    the node took to be back in sync (``isr_rejoin_s``, from its restart). The node stays down for
    ``outage_s``, or until the election if that takes longer.
    """
    if stack.kafka_brokers < 3:
        raise ValueError(f"the leader-kill drill needs a cluster of 3 or more brokers, not {stack.kafka_brokers}")
    settings = stack.settings()
    notes: dict[str, int | float | str] = {}
    with LocalLauncher(stack.env, log_dir) as launcher:
        _digits_pipeline(launcher, port_base)

        def inject() -> None:
            partition, leader = _loaded_partition_leader(settings, topics.QUERIES)
            os.kill(cast(int, stack.kafka_node_pid(leader)), signal.SIGKILL)
            killed = time.monotonic()
            wait_until(lambda: _led_by_another(settings, topics.QUERIES, partition, leader), 120,
                       f"a new leader of {topics.QUERIES}/{partition}", [])
            notes.update(killed_node=leader, partition=f"{topics.QUERIES}/{partition}",
                         leader_after=_leaders(settings, topics.QUERIES)[partition],
                         election_s=round(time.monotonic() - killed, 2))
            time.sleep(max(0.0, config.outage_s - (time.monotonic() - killed)))
            stack.repair("kafka")
            restarted = time.monotonic()
            wait_until(lambda: _in_every_isr(settings, leader), 120, f"Kafka node {leader} back in sync", [])
            notes["isr_rejoin_s"] = round(time.monotonic() - restarted, 2)
        outcome = _steady_digits(stack, config, inject)
    outcome.notes.update(notes)
    return outcome


def _leaders(settings: Settings, topic: str) -> dict[int, int]:
    """Partition -> the node leading it (-1 while none does)."""
    admin = make_admin(settings)
    try:
        return {p["partition_index"]: p["leader_id"] for p in admin.describe_topics([topic])[0]["partitions"]}
    finally:
        admin.close()


def _led_by_another(settings: Settings, topic: str, partition: int, node: int) -> bool:
    """Whether a node other than ``node`` leads the partition (False while the cluster cannot say)."""
    try:
        return _leaders(settings, topic)[partition] not in (-1, node)
    except KafkaError:
        return False


def _loaded_partition_leader(settings: Settings, topic: str) -> tuple[int, int]:
    """The partition of ``topic`` holding the most messages (the load's: queries are keyed by application),
    and its leader."""
    consumer = make_consumer(settings, group_id=None)
    try:
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in _leaders(settings, topic)])
    finally:
        consumer.close()
    partition = max(ends, key=lambda tp: ends[tp]).partition
    return partition, _leaders(settings, topic)[partition]


def _in_every_isr(settings: Settings, node: int) -> bool:
    """Whether ``node`` is an in-sync replica of every partition of every Meridian topic it replicates."""
    admin = make_admin(settings)
    try:
        names = [name for name in admin.list_topics() if name.startswith("meridian.")]
        return all(node in p["isr_nodes"] for t in admin.describe_topics(names) for p in t["partitions"]
                   if node in p["replica_nodes"])
    finally:
        admin.close()


def redis_outage(stack: LocalStack, log_dir: Path, port_base: int, config: DrillConfig) -> DrillOutcome:
    """Stop Redis under an ``infaas`` scheduler (which reads instance states from it every 2 s).

    Redis keeps its data across the restart (append-only file), as a deployment's would. The failed
    reads the scheduler counted are a note, not a verdict: redis-py retries with backoff, so a read that
    began during the outage may succeed once Redis is back.
    """
    with LocalLauncher(stack.env, log_dir) as launcher:
        scheduler = _digits_pipeline(launcher, port_base, policy="infaas")

        def inject() -> None:
            stack.restart("redis", down_s=config.outage_s)
        outcome = _steady_digits(stack, config, inject)
        outcome.notes["metadata_refresh_failures"] = _metric(scheduler, "meridian_metadata_refresh_failures_total")
        return outcome


def overload(stack: LocalStack, log_dir: Path, port_base: int, config: DrillConfig) -> DrillOutcome:
    """Three times one emulated worker's capacity for ``duration_s``, then a normal load: the queue stays
    bounded (hopeless queries are dropped explicitly) and the scheduler's memory with it.

    The capacity is measured first, through the whole pipeline: the rate of answers while the worker is
    kept saturated (offered 1.2x its profiled rate, an SLO nothing misses); the profile's compute-only
    rate is a note beside it (``profiled_capacity_qps``).
    """
    env = {"MERIDIAN_APPLICATIONS": '{"vision": ["efficientnet-lite"]}'}
    settings = stack.settings().model_copy(update={"applications": {"vision": ["efficientnet-lite"]}})
    with LocalLauncher(stack.env, log_dir) as launcher:
        scheduler = launcher.start_scheduler(metrics_port=port_base, extra_env=env)
        launcher.start_worker("drill-emu", variants=[OVERLOAD_VARIANT], metrics_port=port_base + 1,
                              emulate="cpu-1t", max_batch=1, extra_env=env)
        launcher.wait_for_workers(scheduler, 1, timeout_s=120)
        profiled_qps = 1000.0 / _single_latency_ms()

        def make(slo_ms: float = config.slo_ms) -> Query:
            return Query(query_id=f"drill-{uuid.uuid4().hex}", application="vision", slo_ms=slo_ms,
                         batch_size=1, sent_at=time.time())

        saturated = run_drill(settings, lambda: make(60_000.0), rate_qps=1.2 * profiled_qps, duration_s=10.0,
                              fault_at_s=0.0, inject=lambda: None, settle_s=config.settle_s)
        capacity_qps = float(np.mean(saturated.series["goodput"][3:10]))
        rss_before = _rss_mb(scheduler)
        samples: dict[str, list[float]] = {"sample_t_s": [], "rss_mb": [], "queue_depth": [], "lag_messages": []}
        admin = make_admin(settings)

        def watch_while_overloaded() -> None:
            start = time.monotonic()
            while time.monotonic() < start + config.duration_s:
                lag = collect(admin, group_prefix=topics.SCHEDULER_GROUP).lag_messages
                for name, value in (("sample_t_s", time.monotonic() - start), ("rss_mb", _rss_mb(scheduler)),
                                    ("queue_depth", _metric(scheduler, "meridian_queue_depth")),
                                    ("lag_messages", float(sum(lag.values())))):
                    samples[name].append(round(value, 2))
                time.sleep(0.5)

        outcome = run_drill(settings, make, rate_qps=3 * capacity_qps, duration_s=config.duration_s,
                            fault_at_s=0.0, inject=watch_while_overloaded, settle_s=config.settle_s)
        admin.close()
        outcome.series.update(samples)
        # recovery: a normal load afterwards is served within its SLO again
        after = run_drill(settings, make, rate_qps=0.5 * capacity_qps, duration_s=5.0, fault_at_s=0.0,
                          inject=lambda: None, settle_s=config.settle_s)
        goodput_qps = (outcome.answered - outcome.late) / config.duration_s
        outcome.notes.update(capacity_qps=round(capacity_qps, 1), profiled_capacity_qps=round(profiled_qps, 1),
                             offered_qps=round(3 * capacity_qps, 1),
                             goodput_qps=round(goodput_qps, 1), goodput_ratio=round(goodput_qps / capacity_qps, 3),
                             late_ratio=round(outcome.late / max(1, outcome.answered), 4),
                             scheduler_rss_mb_before=round(rss_before, 1),
                             scheduler_rss_mb_peak=max(samples["rss_mb"], default=rss_before),
                             peak_queue_depth=max(samples["queue_depth"], default=0.0),
                             peak_lag_messages=max(samples["lag_messages"], default=0.0),
                             after_overload_within_slo_fraction=after.within_slo_fraction,
                             after_overload_lost=after.lost, emulated_device="cpu-1t (replayed profile)")
        return outcome


def _single_latency_ms() -> float:
    from shared.profiles.format import ProfileSet

    profiles = ProfileSet.load(REPO_ROOT / "profiles" / "efficientnet-lite.json")
    return profiles.get(OVERLOAD_VARIANT, "cpu-1t").latency_ms(1)


def _metric(process: ManagedProcess, name: str) -> float:
    return read_metric(process.metrics_port, name) or 0.0


def _rss_mb(process: ManagedProcess) -> float:
    return process.status_kb("VmRSS") / 1024.0 if process.alive() else 0.0


#: the drills any stack can run (``leader_kill`` needs a replicated cluster and is called by itself)
DRILLS: dict[str, Callable[[LocalStack, Path, int, DrillConfig], DrillOutcome]] = {
    "worker_kill": worker_kill,
    "scheduler_restart": scheduler_restart,
    "broker_restart": broker_restart,
    "redis_outage": redis_outage,
    "overload": overload,
}
