"""Fault drills under a steady load on a stack of their own: what the client saw in each.

Run: ``make bench-faults`` (about 15 minutes). Writes ``bench/results/faults.json`` and prints it.
"""
from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from bench.common import write_result
from services.demo import photos as photos_act
from services.drills.hostile import flood
from services.drills.hostile_images import HostileImagesOutcome, hostile_images
from services.drills.load import DrillOutcome
from services.drills.scenarios import DRILLS, DrillConfig, digits_queries, leader_kill, scheduler_restart
from services.drills.spoofing import SpoofingOutcome, spoof
from services.launcher import LocalLauncher, read_metric, wait_until
from services.stack import LocalStack

STEADY = DrillConfig(rate_qps=40.0, duration_s=40.0, fault_at_s=10.0, outage_s=8.0, slo_ms=5000.0, settle_s=120.0)
#: a killed broker's partitions change leader once the controller's 9 s broker session timeout has passed
LEADER_KILL = replace(STEADY, outage_s=15.0)
#: the scheduler SIGKILLed and started again at once under 100 q/s: what its restart itself costs
RESTART_AT_ONCE = replace(STEADY, rate_qps=100.0, outage_s=0.0)
#: a minute at three times one worker's capacity
OVERLOAD = DrillConfig(duration_s=60.0, slo_ms=1000.0, settle_s=120.0)
HOSTILE_PER_TOPIC = 10_000
#: rounds of every hostile image file, each followed by a photograph, then the largest image allowed
HOSTILE_IMAGE_ROUNDS = 5
PORT_BASE = 29600


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="meridian-faults-"))
    scenarios: dict[str, dict] = {}
    with LocalStack(var_dir=root / "var", kafka_port=29592, redis_port=26479, components=("kafka", "redis")) as stack:
        for name, drill in DRILLS.items():
            config = OVERLOAD if name == "overload" else STEADY
            scenarios[name] = drill_entry(name, drill(stack, root / name, PORT_BASE, config))
        scenarios["scheduler_restart_at_once"] = drill_entry("scheduler_restart_at_once", scheduler_restart(
            stack, root / "scheduler_restart_at_once", PORT_BASE, RESTART_AT_ONCE))
        scenarios["hostile_input"] = hostile_input(stack, root / "hostile").model_dump()
        scenarios["spoofing"] = spoofing(stack, root / "spoofing").model_dump()
        print(f"spoofing: {scenarios['spoofing']}", flush=True)
        scenarios["hostile_images"] = hostile_image_files(stack, root / "hostile-images").model_dump()
        print(f"hostile_images: {scenarios['hostile_images']}", flush=True)
    with LocalStack(var_dir=root / "cluster-var", kafka_port=29800, kafka_brokers=3, redis_port=26579,
                    components=("kafka", "redis")) as cluster:
        scenarios["leader_kill"] = drill_entry("leader_kill", leader_kill(cluster, root / "leader_kill", PORT_BASE,
                                                                           LEADER_KILL))
    write_result("faults", {
        "setup": {"steady_load": STEADY.__dict__, "overload": OVERLOAD.__dict__,
                  "scheduler_restart_at_once": RESTART_AT_ONCE.__dict__,
                  "leader_kill": {**LEADER_KILL.__dict__,
                                  "cluster": "3 KRaft nodes, 3 replicas, min.insync.replicas 2"},
                  "hostile_messages_per_topic": HOSTILE_PER_TOPIC,
                  "hostile_image_rounds": HOSTILE_IMAGE_ROUNDS,
                  "workers": "2 real onnxruntime workers (digits-mlp-s, digits-cnn-xs); overload: 1 worker "
                             "emulating cpu-1t efficientnet-lite0 from its measured profile; hostile_images: 1 real "
                             "onnxruntime worker holding efficientnet-lite0/1/2"},
        "scenarios": scenarios,
    })


def drill_entry(name: str, outcome: DrillOutcome) -> dict:
    """A drill's line of the results (printed as it ends): every result on the wire reaches the client,
    which counts the repeats it suppressed."""
    print(f"{name}: {outcome.model_dump_json(exclude={'series'})}", flush=True)
    return {"duplicates_on_wire": outcome.duplicates_seen_by_client, **outcome.model_dump(exclude={"series"})}


def hostile_input(stack: LocalStack, log_dir: Path):
    with LocalLauncher(stack.env, log_dir) as launcher:
        scheduler = launcher.start_scheduler(metrics_port=PORT_BASE)
        launcher.start_worker("hostile-w", variants=["digits-mlp-s"], metrics_port=PORT_BASE + 1)
        launcher.start_planner(metrics_port=PORT_BASE + 2)
        registry = launcher.start_registry(metrics_port=PORT_BASE + 3)
        launcher.wait_for_workers(scheduler, 1, timeout_s=120)
        wait_until(lambda: read_metric(PORT_BASE + 3, "meridian_registry_ready") == 1.0, 60, "the registry",
                   [registry])
        return flood(stack.settings(), "hostile-w", per_topic=HOSTILE_PER_TOPIC, timeout_s=900,
                     alive=lambda: all(p.alive() for p in launcher.processes.values()))


def spoofing(stack: LocalStack, log_dir: Path) -> SpoofingOutcome:
    """Every rejected kind of message claiming a client's query id, before and after its query."""
    with LocalLauncher(stack.env, log_dir) as launcher:
        scheduler = launcher.start_scheduler(metrics_port=PORT_BASE + 10)
        launcher.start_worker("spoofing-w", variants=["digits-mlp-s"], metrics_port=PORT_BASE + 11)
        launcher.wait_for_workers(scheduler, 1, timeout_s=120)
        return spoof(stack.settings(), digits_queries(STEADY.slo_ms)())


def hostile_image_files(stack: LocalStack, log_dir: Path) -> HostileImagesOutcome:
    """Hostile image files among photographs, to the real worker of `make demo`'s photographs act."""
    with photos_act.started(stack.env, log_dir, metrics_port=PORT_BASE + 20) as worker:
        return hostile_images(photos_act.fields(stack.settings()), photos_act.APPLICATION, worker,
                              rounds=HOSTILE_IMAGE_ROUNDS)


if __name__ == "__main__":
    main()
