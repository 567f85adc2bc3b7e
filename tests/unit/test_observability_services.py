"""The metrics the planner, fleet, registry and lag exporter export for their decisions."""
from __future__ import annotations

import threading
import time

import numpy as np
from kafka import TopicPartition
from kafka.errors import KafkaTimeoutError
from kafka.structs import OffsetAndMetadata, OffsetAndTimestamp
from prometheus_client import REGISTRY

from schemas import AllocationPlan, LoadStatistics, PlanPlacement
from services.fleet.app import Fleet
from services.observability import lag_exporter
from services.observability.lag_exporter import LagGauges, LagSnapshot, collect
from services.planner.app import PlannerContext, handle_load_statistics
from services.registry.app import export_catalogue
from shared.catalogue import Catalogue
from shared.kairos.control import KairosPlanningLoop, application_planning
from shared.kairos.monitor import BatchSizeMonitor
from shared.kairos.planner import KairosPlanner
from shared.profiles.kairos import load_kairos_profiles
from shared.profiles.sources import load_profile_dir
from shared.settings import REPO_ROOT, Settings
from shared.sim.arrivals import deeprecsys_sizes


def value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


class RecordingProducer:
    def send(self, topic: str, key: bytes | None = None, value: bytes | None = None) -> None:
        pass


class FakeAdmin:
    """The four kafka-python 3.x admin calls the exporter makes."""

    def __init__(self) -> None:
        q0, q1, d = TopicPartition("meridian.queries", 0), TopicPartition("meridian.queries", 1), \
            TopicPartition("meridian.dispatch.a", 0)
        self.groups = [{"group_id": "meridian-scheduler", "protocol_type": "consumer", "group_state": "Stable"},
                       {"group_id": "meridian.worker.a", "protocol_type": "consumer", "group_state": "Empty"},
                       {"group_id": "connect-x", "protocol_type": "connect", "group_state": "Stable"}]
        self.offsets = {"meridian-scheduler": {q0: OffsetAndMetadata(10, "", -1), q1: OffsetAndMetadata(-1, "", -1)},
                        "meridian.worker.a": {d: OffsetAndMetadata(7, "", -1)}}
        self.ends = {q0: 25, q1: 3, d: 7}

    def list_groups(self):
        return self.groups

    def describe_groups(self, group_ids):
        return {g: {"group_id": g, "members": [{}] if g == "meridian-scheduler" else []} for g in group_ids}

    def list_group_offsets(self, group_specs):
        return {g: self.offsets[g] for g in group_specs}

    def list_partition_offsets(self, specs):
        return {tp: OffsetAndTimestamp(self.ends[tp], -1, 0) for tp in specs}

    def close(self) -> None:
        pass


def test_lag_is_summed_per_group_and_topic_over_committed_partitions() -> None:
    snapshot = collect(FakeAdmin())
    assert snapshot.lag_messages == {("meridian-scheduler", "meridian.queries"): 15,
                                     ("meridian.worker.a", "meridian.dispatch.a"): 0}
    assert snapshot.members == {"meridian-scheduler": 1, "meridian.worker.a": 0}
    assert collect(FakeAdmin(), group_prefix="meridian.worker").members == {"meridian.worker.a": 0}


def test_lag_gauges_drop_groups_that_went_away() -> None:
    gauges = LagGauges()
    gauges.update(LagSnapshot({("ut-g1", "t"): 5, ("ut-g2", "t"): 1}, {"ut-g1": 1, "ut-g2": 0}))
    assert value("meridian_kafka_consumer_lag_messages", group="ut-g1", topic="t") == 5
    gauges.update(LagSnapshot({("ut-g1", "t"): 2}, {"ut-g1": 1}))
    assert value("meridian_kafka_consumer_lag_messages", group="ut-g1", topic="t") == 2
    assert value("meridian_kafka_consumer_lag_messages", group="ut-g2", topic="t") is None
    assert value("meridian_kafka_consumer_group_members", group="ut-g2") is None


def test_a_plan_exports_its_status_cost_and_workers_per_device() -> None:
    settings = Settings(planner_min_queries=500, planner_budget_per_hour=2.5)
    ctx = PlannerContext(settings=settings, producer=RecordingProducer())
    ctx.applications["ut-rm2"] = KairosPlanningLoop(
        KairosPlanner(load_kairos_profiles(Settings().kairos_data_dir), application="ut-rm2", variant="rm2", budget_per_hour=2.5),
        min_queries=500, monitor=BatchSizeMonitor(window=4000, check_every=1000))
    before = value("meridian_plans_total", service="planner", status="feasible") or 0.0
    sizes = deeprecsys_sizes(1000, np.random.default_rng(0))
    plan = handle_load_statistics(ctx, LoadStatistics(
        application="ut-rm2", window_s=2.0, arrival_rate_qps=500.0, queue_depth=0,
        batch_sizes=[int(s) for s in sizes], at=0.0), now=time.time())
    assert plan is not None and plan.status == "feasible"
    assert value("meridian_plans_total", service="planner", status="feasible") == before + 1
    assert value("meridian_fleet_cost_dollars_per_hour", application="ut-rm2") == plan.cost_per_hour
    assert value("meridian_planner_last_plan_timestamp_seconds", application="ut-rm2") == plan.at
    for device in {p.device for p in plan.placements}:
        count = sum(p.device == device for p in plan.placements)
        assert value("meridian_planned_workers", application="ut-rm2", device=device) == count
    assert value("meridian_planner_solve_seconds_count", service="planner", planner="kairos") >= 1


def test_the_planner_skips_applications_its_planner_cannot_place() -> None:
    settings = Settings(applications={"digits": ["digits"], "rm2": ["rm2"]}, profile_sources=["dir", "kairos"])
    assert set(application_planning(settings, Catalogue.from_settings(settings))) == {"rm2"}


class FakeLauncher:
    def __init__(self) -> None:
        self.started: list[str] = []
        self.stopped: list[str] = []

    def start(self, worker_id: str, device: str, variants: object) -> None:
        self.started.append(worker_id)

    def stop(self, worker_id: str) -> None:
        self.stopped.append(worker_id)


def plan(*devices: str, status: str = "feasible") -> AllocationPlan:
    return AllocationPlan(plan_id="p1", planner="kairos", status=status, message="test",
                          placements=[PlanPlacement(device=d, variants=["rm2"]) for d in devices], at=0.0)


def test_the_fleet_counts_its_scaling_actions_and_skipped_plans() -> None:
    gpu, cpu = "g4dn.xlarge", "c5n.2xlarge"
    fleet = Fleet(Settings(profile_sources=["kairos"], local_device="cpu-1t"), FakeLauncher(), [gpu, cpu])

    def actions(action: str, device: str) -> float:
        return value("meridian_scaling_actions_total", service="fleet", action=action, device=device) or 0.0

    before = {(a, d): actions(a, d) for a in ("start", "stop") for d in (gpu, cpu)}
    skipped = value("meridian_fleet_plans_received_total", outcome="skipped") or 0.0
    fleet.apply(plan(gpu, cpu, cpu))
    fleet.apply(plan(gpu))
    fleet.apply(plan(status="infeasible"))
    fleet.apply(plan(gpu, gpu).model_copy(update={"planner": "autoscaler"}))  # it ran those workers itself
    assert actions("start", gpu) - before["start", gpu] == 1 and actions("start", cpu) - before["start", cpu] == 2
    assert actions("stop", cpu) - before["stop", cpu] == 2 and actions("stop", gpu) == before["stop", gpu]
    assert value("meridian_fleet_plans_received_total", outcome="skipped") == skipped + 2
    assert value("meridian_fleet_workers", device=gpu, emulated="true") == 1


def test_the_registry_exports_accuracy_per_variant_and_price_per_device() -> None:
    profiles = load_profile_dir(REPO_ROOT / "profiles")
    export_catalogue([profiles])
    for profile in profiles.variants:
        assert value("meridian_variant_accuracy_ratio", variant=profile.variant) == profile.accuracy
    for device in profiles.devices:
        assert value("meridian_device_price_dollars_per_hour", device=device.name) == device.price_per_hour


def test_the_exporter_survives_an_unreachable_broker_and_recovers(monkeypatch) -> None:
    attempts = []

    def make_admin(settings):
        attempts.append(1)
        if len(attempts) < 3:
            raise KafkaTimeoutError("Unable to bootstrap")
        return FakeAdmin()

    monkeypatch.setattr(lag_exporter, "make_admin", make_admin)
    errors = value("meridian_kafka_lag_collections_total", status="error") or 0.0
    stop = threading.Event()
    thread = threading.Thread(target=lag_exporter.run, args=(Settings(), stop), kwargs={"interval_s": 0.01})
    thread.start()
    deadline = time.monotonic() + 10
    while value("meridian_kafka_consumer_lag_messages", group="meridian-scheduler",
                topic="meridian.queries") != 15 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(timeout=5)
    assert value("meridian_kafka_consumer_lag_messages", group="meridian-scheduler", topic="meridian.queries") == 15
    assert value("meridian_kafka_lag_collections_total", status="error") == errors + 2
