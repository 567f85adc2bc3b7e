"""Kairos' planning loop: plans from query sizes, not from the rate, and the simulator starts what it plans."""
from __future__ import annotations

import numpy as np

from shared.kairos import KairosDispatch
from shared.kairos.control import KairosPlanningLoop
from shared.kairos.monitor import BatchSizeMonitor
from shared.kairos.planner import KairosPlanner
from shared.profiles.kairos import load_kairos_profiles
from shared.settings import Settings
from shared.sim import Workload, simulate
from shared.sim.arrivals import deeprecsys_sizes, truncated_gaussian_sizes


def loop(min_queries: int = 500) -> KairosPlanningLoop:
    planner = KairosPlanner(load_kairos_profiles(Settings().kairos_data_dir), application="rm2", budget_per_hour=2.5)
    return KairosPlanningLoop(planner, min_queries=min_queries, monitor=BatchSizeMonitor(window=2000, check_every=500))


def test_it_plans_once_enough_sizes_were_seen_then_only_when_they_shift() -> None:
    kairos, rng = loop(), np.random.default_rng(0)
    kairos.on_query_sizes("rm2", deeprecsys_sizes(400, rng))
    kairos.on_query_sizes("other", deeprecsys_sizes(400, rng))
    assert kairos.control(1.0, {"rm2": 400}) is None, "400 of rm2's sizes: too few"
    kairos.on_query_sizes("rm2", deeprecsys_sizes(400, rng))
    first = kairos.control(2.0, {"rm2": 400})
    assert first is not None and first.success and first.cost_per_hour <= 2.5
    for now in (3.0, 4.0):
        kairos.on_query_sizes("rm2", deeprecsys_sizes(500, rng))
        assert kairos.control(now, {"rm2": 10_000}) is None, "a rate never re-plans Kairos"
    for now in (5.0, 6.0, 7.0):
        kairos.on_query_sizes("rm2", truncated_gaussian_sizes(500, rng, mean=600, std=100))
        kairos.control(now, {})
    reasons = [reason for _, reason, _ in kairos.log]
    assert reasons[:2] == ["800 query sizes seen", "the query-size distribution shifted"], "larger queries re-plan"


def test_the_simulator_starts_the_fleet_it_plans_after_each_type_s_boot() -> None:
    profiles = load_kairos_profiles(Settings().kairos_data_dir)
    rng = np.random.default_rng(1)
    arrivals = np.sort(rng.random(600) * 6.0)
    load = Workload(arrivals, deeprecsys_sizes(600, rng), "rm2", 200.0, ("rm2",))
    kairos = loop(min_queries=300)
    result = simulate(load, [], KairosDispatch(profiles), profiles, controller=kairos, startup_s={
        d.name: 1.0 for d in profiles.devices})
    (planned_at, plan), = result.plans
    assert 3.0 <= planned_at <= 4.0, "planned at the first control after 300 queries (~3 s)"
    assert sorted(life.device for life in result.lifetimes) == sorted(p.device for p in plan.placements)
    assert all(life.joined_s >= planned_at + 1.0 for life in result.lifetimes)
    assert result.num_served > 0 and np.all(result.start_s[result.served] >= planned_at + 1.0)
