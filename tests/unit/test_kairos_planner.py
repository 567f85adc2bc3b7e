"""KairosPlanner (one-shot configuration choice) and the batch-size monitor (spec §7 items 11, 21)."""
import numpy as np
import pytest

from shared.kairos import BatchSizeMonitor, KairosPlanner, LatencyTable, distribution_stats, ks_statistic
from shared.policy.base import LoadSnapshot, PlanStatus
from shared.profiles.kairos import load_kairos_pool, load_kairos_profiles
from shared.settings import Settings
from shared.sim import deeprecsys_sizes, truncated_gaussian_sizes


@pytest.fixture(scope="module")
def profiles():
    return load_kairos_profiles(Settings().kairos_data_dir)


def planner_for(profiles, model, budget=2.5):
    pool = load_kairos_pool(Settings().kairos_data_dir)
    return KairosPlanner(profiles, application=model, budget_per_hour=budget, devices=pool.devices)


def snapshot(model, sizes):
    return LoadSnapshot(at_s=0.0, arrival_rate_qps={model: 100.0}, batch_sizes={model: tuple(int(s) for s in sizes)})


def test_plan_is_the_selected_configuration_within_budget(profiles):
    planner = planner_for(profiles, "rm2")
    sizes = deeprecsys_sizes(10_000, np.random.default_rng(0))
    ranking = planner.rank(sizes)
    plan = planner.plan(snapshot("rm2", sizes))
    assert plan.success and plan.status is PlanStatus.FEASIBLE
    assert ranking.devices[0] == "g4dn.xlarge"  # the base, picked from the data
    assert plan.device_counts() == ranking.counts(ranking.selection.index)
    assert plan.objective == pytest.approx(ranking.upper_bounds[ranking.selection.index])
    assert plan.cost_per_hour <= 2.5 + 1e-9
    assert plan.cost_per_hour == pytest.approx(
        sum(profiles.device_by_name[d].price_per_hour * n for d, n in plan.device_counts().items())
    )
    assert all(p.variants == ("rm2",) for p in plan.placements)
    assert plan.routing == {"rm2": {"rm2": 1.0}}
    assert np.all(np.diff(ranking.upper_bounds) <= 0) and len(ranking.configs) == 331


def test_no_sizes_or_no_budget_is_infeasible(profiles):
    assert planner_for(profiles, "ncf").plan(snapshot("ncf", [])).status is PlanStatus.INFEASIBLE
    poor = planner_for(profiles, "ncf", budget=0.01).plan(snapshot("ncf", [10, 20]))
    assert not poor.success and "fits" in poor.message


def test_replans_without_evaluation_when_the_distribution_shifts(profiles):
    planner = planner_for(profiles, "rm2")
    lognormal = deeprecsys_sizes(10_000, np.random.default_rng(1))
    gaussian = truncated_gaussian_sizes(10_000, np.random.default_rng(1), mean=700, std=150)
    before, after = planner.plan(snapshot("rm2", lognormal)), planner.plan(snapshot("rm2", gaussian))
    assert after.success and after.objective < before.objective  # larger queries: fewer per second
    assert after.device_counts()["g4dn.xlarge"] > before.device_counts()["g4dn.xlarge"]


def test_monitor_window_stats_and_shift_detection(profiles):
    table = LatencyTable.from_profiles(profiles, "wnd", load_kairos_pool(Settings().kairos_data_dir).devices)
    monitor = BatchSizeMonitor(window=10_000, check_every=1_000)
    monitor.add_sizes(deeprecsys_sizes(12_000, np.random.default_rng(2)))
    window = monitor.window()
    assert len(window) == 10_000
    stats = monitor.stats(table, qos_ms=25.0, base="g4dn.xlarge", auxiliaries=table.devices[1:])
    direct = distribution_stats(window, table, qos_ms=25.0, base="g4dn.xlarge", auxiliaries=table.devices[1:])
    assert stats == direct
    monitor.mark_planned(stats.limit)
    assert monitor.add_sizes(deeprecsys_sizes(999, np.random.default_rng(3))) is False  # no check yet
    assert monitor.add_sizes(deeprecsys_sizes(1, np.random.default_rng(4))) is False  # same distribution
    shifted = monitor.add_sizes(truncated_gaussian_sizes(3_000, np.random.default_rng(5)))
    report = monitor.shift()
    assert shifted and report.shifted and report.ks_statistic > 0.05 and report.max_f_change > 0.02


def test_monitor_keeps_the_most_recent_sizes_in_order():
    monitor = BatchSizeMonitor(window=4)
    monitor.add_sizes([1, 2, 3])
    monitor.add_sizes([4, 5, 6])
    assert monitor.window().tolist() == [3, 4, 5, 6]
    monitor.add_sizes(range(10, 20))
    assert monitor.window().tolist() == [16, 17, 18, 19]


def test_ks_statistic():
    a = np.arange(100)
    assert ks_statistic(a, a.copy()) == 0.0
    assert ks_statistic(a, a + 1000) == 1.0
    assert ks_statistic(a, a + 50) == pytest.approx(0.5)


def test_registry_builds_the_kairos_planner_by_name(profiles):
    from shared.policy.registry import make_planner

    planner = make_planner("kairos", profiles, application="dien", budget_per_hour=2.5)
    assert isinstance(planner, KairosPlanner) and planner.name == "kairos"
    plan = planner.plan(snapshot("dien", deeprecsys_sizes(2_000, np.random.default_rng(6))))
    assert plan.success and plan.device_counts().get("g4dn.xlarge", 0) >= 1


def test_auxiliary_qos_limits_follow_the_dispatchers_safeguard(profiles):
    """s is the first size past xi * T_qos: a tighter safeguard leaves fewer queries to the auxiliaries."""
    sizes = deeprecsys_sizes(10_000, np.random.default_rng(0))
    pool = load_kairos_pool(Settings().kairos_data_dir)
    artifact = KairosPlanner(profiles, application="dien", budget_per_hour=2.5, devices=pool.devices)
    tight = KairosPlanner(profiles, application="dien", budget_per_hour=2.5, devices=pool.devices, xi=0.88)
    assert artifact.qos_limits()["r5n.large"] == 430  # the artifact's vio_batch (spec A.1)
    assert tight.qos_limits()["r5n.large"] < 430
    loose_stats, tight_stats = artifact.rank(sizes).stats, tight.rank(sizes).stats
    assert tight_stats.limit == {d: s for d, s in tight.qos_limits().items() if d != "g4dn.xlarge"}
    assert all(tight_stats.f(a) < loose_stats.f(a) for a in tight_stats.auxiliaries)
    with pytest.raises(ValueError):
        KairosPlanner(profiles, application="dien", budget_per_hour=2.5, xi=1.2)
