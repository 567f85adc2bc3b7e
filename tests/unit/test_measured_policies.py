"""Every policy plans with what real workers measured on their machines, not only the core.

A real worker announces its measured latencies in its heartbeats (`services.worker.self_measure`); the
core serves that device by them and tells its policy (`DispatchPolicy.on_profiles`), and the planning loops
hear the same heartbeats (`shared.profiles.measured.AnnouncedMeasurements`). Here in the simulator, which
announces a `SimWorker`'s measurement as a live worker does and runs its batches at that speed: a machine
no committed profile names, measured faster than the one-thread CPU beside it, is served by every policy,
and given more of the work; a machine measured too slow for a query is passed over; the planners (Kairos,
Proteus) re-plan and INFaaS' autoscaler re-sizes by what was announced.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from schemas import MeasuredLatency, Query, WorkerHeartbeat
from services.replay.comparison import simulate_record
from shared.autoscale.catalogue import Application, serving_catalogue
from shared.autoscale.loop import AutoscaleLoop
from shared.catalogue import Catalogue
from shared.infaas.dispatch import InfaasDispatch
from shared.kairos.dispatch import KairosDispatch
from shared.kairos.predictor import LatencyPredictor
from shared.policy.base import LoadSnapshot
from shared.policy.registry import make_autoscaler
from shared.profiles import DeviceType, ProfileSet, VariantProfile
from shared.profiles.measured import with_measured
from shared.proteus.control import fleet_planning
from shared.serving import CoreConfig, SchedulerCore
from shared.settings import Settings
from shared.sim.workers import SimWorker

VARIANT, FAMILY = "efficientnet-lite0", "efficientnet-lite"
#: a machine no profile names, as a real worker keys a 16-thread CPU
FAST = "cpu-16t"
#: what it measured, against the committed one-thread profile
SPEED_UP = 2.5
RATE_QPS = 200.0  # the slow worker holds ~104 q/s, the two ~360


def _heartbeat(worker_id: str, device: str, variant: str, measured: MeasuredLatency | None) -> WorkerHeartbeat:
    """A heartbeat of a worker hosting ``variant`` and announcing it ``measured`` (emulated, as the
    simulator's: the queries here carry no inputs)."""
    return WorkerHeartbeat(worker_id=worker_id, device=device, emulated=True, variants=[variant], max_batch=8,
                           inflight=0, busy_fraction=0.0, measured={variant: measured} if measured else {},
                           price_per_hour=0.4, at=0.0)


@pytest.fixture(scope="module")
def served() -> tuple[Settings, Catalogue, list[SimWorker], list[Query]]:
    settings = Settings(applications={"photos": [FAMILY]}, planner_fleet={"cpu-1t": 1, FAST: 1},
                        redis_url="redis://127.0.0.1:1/0")
    catalogue = Catalogue.from_settings(settings)
    slow = catalogue.profile(VARIANT, "cpu-1t")
    measured = MeasuredLatency(batch_latency_ms={b: ms / SPEED_UP for b, ms in slow.batch_latency_ms.items()})
    workers = [SimWorker("slow", "cpu-1t", (VARIANT,), slow.max_batch),
               SimWorker("fast", FAST, (VARIANT,), slow.max_batch, measured={VARIANT: measured})]
    sent = np.cumsum(np.random.default_rng(0).exponential(1.0 / RATE_QPS, int(8 * RATE_QPS)))
    slo_ms = catalogue.profiles.slo_ms[FAMILY]
    queries = [Query(query_id=f"q{k}", application="photos", model=VARIANT, slo_ms=slo_ms, batch_size=1,
                     sent_at=1000.0 + s) for k, s in enumerate(sent)]
    return settings, catalogue, workers, queries


@pytest.mark.parametrize("policy", ["fcfs", "kairos", "infaas", "proteus"])
def test_every_policy_gives_the_machine_that_measured_itself_faster_more_of_the_work(served, policy) -> None:
    settings, catalogue, workers, queries = served
    result = simulate_record(policy, queries, workers, settings, catalogue, start_s=1000.0, transport=None)
    rows = Counter(result.worker_ids[w] for w in result.worker if w >= 0)
    in_slo = float(np.mean(np.nan_to_num(result.latency_ms, nan=np.inf) <= result.slo_ms))
    assert rows["fast"] > rows["slow"], f"{policy}: {dict(rows)}"
    assert in_slo >= 0.99, f"{policy}: {in_slo:.3f} within the SLO, {dict(rows)}"


def test_kairos_predicts_a_measured_pair_afresh_and_keeps_what_it_learned_of_the_others() -> None:
    cpu = DeviceType(name="cpu", kind="cpu", price_per_hour=0.1)
    profiles = ProfileSet(source="t", devices=[cpu], variants=[
        VariantProfile(variant=v, family="f", device="cpu", batch_latency_ms={1: 10.0, 2: 20.0}, max_batch=2)
        for v in ("a", "b")])
    policy = KairosDispatch(profiles, latency_quantile=1.0)
    for _ in range(20):
        policy.predictor.observe("cpu", "b", 1, 30.0)
    learned_b = policy.predictor.predict("cpu", "b", np.array([1]))[0]
    remeasured = with_measured(profiles, {("a", "cpu"): MeasuredLatency(batch_latency_ms={1: 4.0, 2: 7.0})}, {})
    policy.on_profiles(remeasured)
    assert policy.predictor.predict("cpu", "a", np.array([1, 2])).tolist() == [4.0, 7.0]
    assert policy.predictor.predict("cpu", "b", np.array([1]))[0] == learned_b > 10.0


def test_the_proteus_planner_replans_with_a_machine_once_its_worker_announces_what_it_measured() -> None:
    settings = Settings(applications={"photos": [FAMILY]}, planner="proteus", scheduler_policy="proteus",
                        planner_fleet={"cpu-1t": 1, FAST: 1})
    loop = fleet_planning(settings, Catalogue.from_settings(settings))
    assert loop.control(0.0, {"photos": 100}) is not None
    before = loop.planner.plan(LoadSnapshot(at_s=1.0, arrival_rate_qps={"photos": 100.0}))
    assert FAST not in {p.device for p in before.placements if p.variants}, "no capacity before its measurement"
    loop.on_worker_event(_heartbeat("w1", FAST, VARIANT, MeasuredLatency(batch_latency_ms={1: 4.0, 8: 30.0})))
    plan = loop.control(1.0, {"photos": 100})
    assert plan is not None and loop.log[-1][1] == "a worker measured its machine"
    assert FAST in {p.device for p in plan.placements}


@pytest.mark.parametrize("make_policy", [lambda p: KairosDispatch(p, batch_queries=True), InfaasDispatch],
                         ids=["kairos", "infaas"])
def test_a_policy_sends_a_query_past_the_machine_that_measured_itself_too_slow_for_it(make_policy) -> None:
    cpu = [DeviceType(name=d, kind="cpu", price_per_hour=0.1) for d in ("cpu-a", "cpu-b")]
    profiles = ProfileSet(source="t", devices=cpu, slo_ms={"f": 100.0}, variants=[
        VariantProfile(variant="m", family="f", device=d.name, accuracy=0.9, batch_latency_ms={1: 10.0, 2: 12.0},
                       max_batch=2) for d in cpu])
    core = SchedulerCore(make_policy(profiles), Catalogue(profiles, {"app": ["f"]}), CoreConfig(), clock=lambda: 1.0)
    too_slow = MeasuredLatency(batch_latency_ms={1: 400.0, 2: 700.0})  # its host is busy: 40x its profile
    core.on_worker_event(_heartbeat("a-first-in-every-tie", "cpu-a", "m", too_slow))
    core.on_worker_event(_heartbeat("b", "cpu-b", "m", None))
    query = Query(query_id="q", application="app", model="m", slo_ms=100.0, batch_size=1, sent_at=1.0)
    assert core.admit(query) is None
    assert [d.worker_id for d in core.step().dispatches] == ["b"]


def test_a_predictor_is_reseeded_within_its_grid() -> None:
    predictor = LatencyPredictor([1, 2])
    predictor.reseed("cpu", "m", {1: 3.0, 2: 5.0, 64: 90.0})
    assert predictor.predict("cpu", "m", np.array([1, 2])).tolist() == [3.0, 5.0]


def test_the_autoscaler_sizes_machines_by_what_their_real_workers_measured() -> None:
    cpu = DeviceType(name="cpu-1t", kind="cpu", price_per_hour=0.04)
    profiles = ProfileSet(source="t", devices=[cpu], variants=[
        VariantProfile(variant="m", family="f", device="cpu-1t", batch_latency_ms={1: 10.0, 2: 18.0}, max_batch=2)])
    loop = AutoscaleLoop(make_autoscaler("infaas", serving_catalogue(profiles, [Application("app", "f", 100.0)])),
                         profiles=profiles)
    option = loop.policy.catalogue.option["m", "cpu-1t"]
    assert option.peak_qps(100.0, 0.5) == pytest.approx(2 / 0.018)
    busy_host = MeasuredLatency(batch_latency_ms={1: 30.0, 2: 54.0})  # three times its profile
    loop.on_worker_event(_heartbeat("w1", "cpu-1t", "m", busy_host).model_copy(update={"emulated": False}), 0.0)
    remeasured = loop.policy.catalogue.option["m", "cpu-1t"]
    assert remeasured.peak_qps(100.0, 0.5) == pytest.approx(1 / 0.030)  # batch 2 no longer fits half the SLO
    assert loop.policy.model.catalogue is loop.policy.vm.catalogue is loop.tracker.catalogue is loop.policy.catalogue
    assert remeasured.cost_per_hour == option.cost_per_hour and remeasured.needs == option.needs
