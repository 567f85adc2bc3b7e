"""`ProteusPlanner` plans, the re-plan monitor, the baselines' planners, and the serving simulator."""
from __future__ import annotations

import numpy as np
import pytest

from shared.policy.base import LoadSnapshot, PlanStatus
from shared.profiles.format import DeviceType, ProfileSet, VariantProfile
from shared.proteus.apps import default_slo_ms, resolve_applications
from shared.proteus.baselines import (
    InfaasAccuracyPlanner,
    SommelierPlanner,
    clipper_plan,
)
from shared.proteus.control import PlanningController, StaticController
from shared.proteus.dispatch import ProteusDispatch
from shared.proteus.evaluation import serving_metrics
from shared.proteus.monitor import ReplanMonitor
from shared.proteus.planner import ProteusPlanner, family_counts
from shared.sim import simulate
from shared.sim.arrivals import Workload
from shared.sim.workers import SimWorker

FLEET = {"cpu": 3, "gpu": 1}


@pytest.fixture(scope="module")
def profiles() -> ProfileSet:
    """Two families; ``fast`` is 3x quicker than ``slow``; the gpu 4x quicker than the cpu (SLO 100 ms)."""
    variants = []
    for device, factor in (("cpu", 1.0), ("gpu", 0.25)):
        for family in ("img", "txt"):
            for name, acc, slow in (("slow", 0.8, 3.0), ("fast", 0.72, 1.0)):
                variants.append(VariantProfile(variant=f"{family}-{name}", family=family, device=device, accuracy=acc,
                                               batch_latency_ms={1: 10 * slow * factor, 2: 15 * slow * factor,
                                                                 4: 25 * slow * factor}, max_batch=4))
    return ProfileSet(source="test", slo_ms={"img": 100.0, "txt": 100.0}, variants=variants,
                      devices=[DeviceType(name="cpu", kind="cpu", price_per_hour=0.1),
                               DeviceType(name="gpu", kind="gpu", price_per_hour=1.0)])


def load(img: float, txt: float = 0.0) -> LoadSnapshot:
    return LoadSnapshot(at_s=0.0, arrival_rate_qps={"img": img, "txt": txt})


def test_applications_default_to_families_and_normalized_accuracy(profiles: ProfileSet) -> None:
    apps = resolve_applications(profiles)
    assert sorted(apps) == ["img", "txt"]
    assert apps["img"].variants == ("img-slow", "img-fast") and apps["img"].accuracy == pytest.approx((1.0, 0.9))
    bare = profiles.model_copy(update={"slo_ms": {}})
    assert default_slo_ms(bare, "img") == pytest.approx(20.0)  # 2 x the fastest CPU batch-1 latency


def test_plan_shape(profiles: ProfileSet) -> None:
    planner = ProteusPlanner(profiles, fleet=FLEET, headroom=1.0)
    plan = planner.plan(load(60.0, 20.0))
    assert plan.status is PlanStatus.OPTIMAL
    assert len(plan.placements) <= sum(FLEET.values())
    assert all(len(p.variants) == 1 for p in plan.placements)
    for shares in plan.routing.values():
        assert sum(shares.values()) == pytest.approx(1.0)
    assert plan.cost_per_hour == pytest.approx(sum(0.1 if p.device == "cpu" else 1.0 for p in plan.placements))
    assert 0.9 <= plan.objective <= 1.0


def test_light_load_is_served_by_the_most_accurate_variants(profiles: ProfileSet) -> None:
    plan = ProteusPlanner(profiles, fleet=FLEET).plan(load(5.0, 5.0))
    assert plan.routing == {"img": {"img-slow": 1.0}, "txt": {"txt-slow": 1.0}}
    assert plan.objective == pytest.approx(1.0)


def test_overload_degrades(profiles: ProfileSet) -> None:
    plan = ProteusPlanner(profiles, fleet=FLEET).plan(load(10_000.0))
    assert plan.status is PlanStatus.DEGRADED and "lowered" in plan.message
    assert plan.routing["img"]["img-fast"] > 0.9


def test_fill_idle_hosts_routed_variants_only(profiles: ProfileSet) -> None:
    bare = ProteusPlanner(profiles, fleet=FLEET, fill_idle=False).plan(load(5.0))
    filled = ProteusPlanner(profiles, fleet=FLEET).plan(load(5.0))
    assert len(bare.placements) < len(filled.placements) == sum(FLEET.values())
    assert {p.variants for p in filled.placements} == {("img-slow",)}


def test_restricted_variants_and_pinning(profiles: ProfileSet) -> None:
    plan = clipper_plan(profiles, {"img": 5.0, "txt": 5.0}, which="ht", fleet=FLEET)
    assert {v for shares in plan.routing.values() for v in shares} == {"img-fast", "txt-fast"}
    sommelier = SommelierPlanner(profiles, fleet=FLEET)
    first = sommelier.plan(load(40.0, 10.0))
    pins = family_counts(first, profiles)
    second = sommelier.plan(load(10.0, 40.0))
    assert family_counts(second, profiles) == pins  # devices keep their family


def test_infaas_accuracy_scales_up_then_back(profiles: ProfileSet) -> None:
    planner = InfaasAccuracyPlanner(profiles, fleet=FLEET)
    light = planner.plan(load(5.0))
    assert {p.variants for p in light.placements} == {("img-slow",)} and len(light.placements) == 1
    heavy = planner.plan(load(400.0))  # the slow variant everywhere serves 347 qps
    assert len(heavy.placements) == 4 and any(p.variants == ("img-fast",) for p in heavy.placements)
    again = planner.plan(load(5.0))
    assert len(again.placements) == 1 and again.placements[0].variants == ("img-slow",)


def test_a_fleet_device_no_profile_names_serves_nothing_until_its_workers_measured_it(profiles: ProfileSet,
                                                                                      caplog) -> None:
    planner = ProteusPlanner(profiles, fleet={"cpu": 1, "tpu": 1}, headroom=1.0)
    assert "tpu have no profile" in caplog.text
    plan = planner.plan(load(40.0))
    assert plan.success and plan.routing["img"]
    assert {p.device for p in plan.placements if any(v.startswith("img") for v in p.variants)} == {"cpu"}
    assert plan.cost_per_hour is not None


def test_invalid_options(profiles: ProfileSet) -> None:
    with pytest.raises(ValueError, match="`slo_ms`"):
        ProteusPlanner(profiles, slo_ms={"audio": 10.0})
    with pytest.raises(ValueError, match="`variants`"):
        ProteusPlanner(profiles, variants={"img": ["txt-fast"]})


# -- monitor -------------------------------------------------------------------------------------------
def test_monitor_ewma_matches_pandas_weights() -> None:
    monitor = ReplanMonitor(ewma_com=1.6, window=3)
    for count in (10, 20, 40, 80):  # only the last three count
        monitor.record(0.0, {"a": count})
    w = (1 - 1 / 2.6) ** np.arange(3)
    assert monitor.rates()["a"] == pytest.approx(np.dot(w, [80, 40, 20]) / w.sum())


def test_monitor_period_burst_and_gap() -> None:
    monitor = ReplanMonitor(period_s=30.0, burst_threshold=0.2, min_gap_s=2.0)
    monitor.record(0.0, {"a": 100})
    monitor.mark_planned(0.0, monitor.rates())
    monitor.record(1.0, {"a": 400})
    assert monitor.due(1.0) is None           # within the minimum gap
    assert monitor.due(2.0).startswith("burst")
    monitor.mark_planned(2.0, monitor.rates())
    assert monitor.due(31.9) is None or monitor.due(31.9).startswith("burst")
    assert monitor.due(32.0) == "period"
    with pytest.raises(ValueError, match="`period_s`"):
        ReplanMonitor(period_s=0)


# -- the serving simulator with plans ------------------------------------------------------------------
def small_run(profiles: ProfileSet, dispatch, controller, seed: int = 1):
    rng = np.random.default_rng(seed)
    apps = resolve_applications(profiles)
    work = []
    for app, rate in (("img", 120.0), ("txt", 30.0)):
        arrival = np.cumsum(rng.standard_exponential(int(rate * 8))) / rate
        work.append(Workload(arrival, np.ones(len(arrival), dtype=np.int64), app, 100.0, apps[app].variants))
    workers = [SimWorker(f"{d}-{k}", d, (), 4) for d, c in FLEET.items() for k in range(c)]
    return simulate(work, workers, dispatch, profiles, controller=controller, seed=seed)


def test_simulated_proteus_follows_its_plans(profiles: ProfileSet) -> None:
    controller = PlanningController(ProteusPlanner(profiles, fleet=FLEET), initial_rates={"img": 120.0, "txt": 30.0})
    result = small_run(profiles, ProteusDispatch(profiles), controller)
    served = result.variant[result.served]
    assert result.plans and served.size > 0.9 * len(result.arrival_s)
    for i in np.flatnonzero(result.served):  # a query only ever ran on a variant of its own family
        assert result.variant[i].split("-")[0] == result.application[i]
    accuracy = {v: a for app in resolve_applications(profiles).values() for v, a in zip(app.variants, app.accuracy)}
    metrics = serving_metrics(result, accuracy)
    assert metrics["slo_violation_ratio"] < 0.1 and 90.0 <= metrics["effective_accuracy"] <= 100.0


@pytest.mark.parametrize("setup", ["clipper", "infaas", "sommelier", "uniform", "fixed", "aimd", "nexus"])
def test_baselines_run_in_the_simulator(profiles: ProfileSet, setup: str) -> None:
    rates = {"img": 120.0, "txt": 30.0}
    controller = PlanningController(ProteusPlanner(profiles, fleet=FLEET), initial_rates=rates)
    dispatch = ProteusDispatch(profiles)
    if setup == "clipper":
        controller = StaticController(clipper_plan(profiles, rates, which="ha", fleet=FLEET))
        dispatch = ProteusDispatch(profiles, batching="aimd", batching_options={"drop": "lazy"})
    elif setup == "infaas":
        controller = PlanningController(InfaasAccuracyPlanner(profiles, fleet=FLEET), ReplanMonitor(period_s=10.0),
                                        initial_rates=rates)
        dispatch = ProteusDispatch(profiles, routing="least_loaded", batching="timer")
    elif setup == "sommelier":
        controller = PlanningController(SommelierPlanner(profiles, fleet=FLEET, headroom=1.5), initial_rates=rates)
    elif setup == "uniform":
        dispatch = ProteusDispatch(profiles, routing="uniform")
    elif setup == "fixed":
        dispatch = ProteusDispatch(profiles, batching="fixed", batching_options={"size": 1})
    else:
        dispatch = ProteusDispatch(profiles, batching=setup)
    result = small_run(profiles, dispatch, controller)
    assert result.served.sum() + len(result.dropped) == len(result.arrival_s)
    assert result.served.sum() > 0.5 * len(result.arrival_s)


def test_seeded_runs_are_deterministic(profiles: ProfileSet) -> None:
    def run():
        controller = PlanningController(ProteusPlanner(profiles, fleet=FLEET), initial_rates={"img": 120.0, "txt": 30.0})
        return small_run(profiles, ProteusDispatch(profiles), controller, seed=3)

    a, b = run(), run()
    assert np.array_equal(a.finish_s, b.finish_s, equal_nan=True) and a.dropped == b.dropped
