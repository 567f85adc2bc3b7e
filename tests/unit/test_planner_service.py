"""The planner service's handler: plan once enough sizes were seen, then only when they shift."""
from __future__ import annotations

import numpy as np

from schemas import AllocationPlan, LoadStatistics
from services.planner.app import PlannerContext, handle_load_statistics
from shared.kairos.control import KairosPlanningLoop
from shared.kairos.monitor import BatchSizeMonitor
from shared.kairos.planner import KairosPlanner
from shared.profiles.kairos import load_kairos_profiles
from shared.settings import Settings
from shared.sim.arrivals import deeprecsys_sizes, truncated_gaussian_sizes


class RecordingProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []

    def send(self, topic: str, key: bytes | None = None, value: bytes | None = None) -> None:
        self.sent.append((topic, value))


def context() -> PlannerContext:
    settings = Settings(planner_min_queries=2000, planner_budget_per_hour=2.5)
    planner = KairosPlanner(load_kairos_profiles(Settings().kairos_data_dir), application="rm2", budget_per_hour=2.5)
    ctx = PlannerContext(settings=settings, producer=RecordingProducer())
    ctx.applications["rm2"] = KairosPlanningLoop(planner, min_queries=2000,
                                                 monitor=BatchSizeMonitor(window=4000, check_every=1000))
    return ctx


def stats(sizes: np.ndarray) -> LoadStatistics:
    return LoadStatistics(application="rm2", window_s=2.0, arrival_rate_qps=len(sizes) / 2.0, queue_depth=0,
                          batch_sizes=[int(s) for s in sizes], at=0.0)


def test_plans_after_enough_sizes_then_only_on_a_shift() -> None:
    ctx, rng = context(), np.random.default_rng(0)
    assert handle_load_statistics(ctx, stats(deeprecsys_sizes(1000, rng)), 1.0) is None, "too few sizes yet"
    first = handle_load_statistics(ctx, stats(deeprecsys_sizes(1000, rng)), 2.0)
    assert isinstance(first, AllocationPlan) and first.status == "feasible" and first.cost_per_hour <= 2.5
    assert any(p.device == "g4dn.xlarge" for p in first.placements)
    for _ in range(3):  # same distribution: no re-plan
        assert handle_load_statistics(ctx, stats(deeprecsys_sizes(1000, rng)), 3.0) is None
    replans = [handle_load_statistics(ctx, stats(truncated_gaussian_sizes(1000, rng, mean=600, std=100)), 4.0)
               for _ in range(4)]
    assert any(isinstance(p, AllocationPlan) for p in replans), "a shift to larger queries must re-plan"
    assert len(ctx.producer.sent) == 1 + sum(p is not None for p in replans)


def test_unknown_applications_are_ignored() -> None:
    ctx = context()
    other = stats(np.array([10, 20])).model_copy(update={"application": "other"})
    assert handle_load_statistics(ctx, other, 1.0) is None and not ctx.producer.sent


def test_the_fleet_planner_records_one_sample_per_statistics_window() -> None:
    """Statistics of one scheduler tick form one window; the next tick's first message closes it."""
    from shared.catalogue import Catalogue
    from shared.proteus.control import fleet_planning

    settings = Settings(planner="proteus", applications={"vision": ["efficientnet-lite"]}, load_stats_interval_s=1.0)
    ctx = PlannerContext(settings=settings, producer=RecordingProducer())
    ctx.fleet = fleet_planning(settings, Catalogue.from_settings(settings))
    for tick in range(3):
        handle_load_statistics(ctx, LoadStatistics(application="vision", window_s=1.0, arrival_rate_qps=40.0,
                                                   queue_depth=0, at=100.0 + tick), 100.0 + tick)
    assert ctx.fleet.monitor.rates() == {"vision": 40.0}, "two complete windows of 40 q/s, none empty"
    (_, reason, plan), = ctx.fleet.log
    assert reason == "initial" and plan.success and len(ctx.producer.sent) == 1


def test_the_fleet_planner_plans_the_applications_its_policy_serves() -> None:
    from shared.proteus.control import planned_applications

    apps = {"vision": ["efficientnet-lite"], "digits": ["digits"]}
    both = Settings(planner="proteus", scheduler_policy="proteus", applications=apps)
    assert planned_applications(both) == {"vision": "efficientnet-lite", "digits": "digits"}
    own = both.model_copy(update={"application_policies": {"digits": "fcfs"}})
    assert planned_applications(own) == {"vision": "efficientnet-lite"}, "digits has its own policy and workers"
    unserved = both.model_copy(update={"scheduler_policy": "fcfs"})
    assert planned_applications(unserved) == {"vision": "efficientnet-lite", "digits": "digits"}


def test_arrivals_of_an_application_the_fleet_planner_does_not_plan_never_trigger_a_plan() -> None:
    from shared.catalogue import Catalogue
    from shared.proteus.control import fleet_planning

    settings = Settings(planner="proteus", scheduler_policy="proteus", application_policies={"digits": "fcfs"},
                        applications={"vision": ["efficientnet-lite"], "digits": ["digits"]},
                        application_slo_ms={"vision": 300.0}, load_stats_interval_s=1.0)
    controller = fleet_planning(settings, Catalogue.from_settings(settings))
    for tick in range(5):
        controller.control(100.0 + tick, {"vision": 40, "digits": 30 if tick % 2 else 0})
    assert [reason for _, reason, _ in controller.log] == ["initial"], "digits' bursts are not vision's demand"
    assert set(controller.log[0][2].routing) == {"vision"}
    assert controller.planner.applications["vision"].slo_ms == 300.0, "planned for the SLO its queries carry"
