"""Similarity rule (spec §7 item 16) and KAIROS+ (Algorithm 1, item 17)."""
import numpy as np
import pytest

from shared.kairos import enumerate_configs, kairos_plus, rank_configs, select_config


def test_top3_with_the_same_base_count_gives_top1():
    ranked = np.array([[2, 1, 5], [2, 0, 9], [2, 3, 1], [1, 9, 9], [3, 0, 0]])
    choice = select_config(ranked)
    assert choice.index == 0 and "top-3" in choice.rule


def test_otherwise_the_least_squared_distance_member_of_the_top10():
    # an outlier ranked first; the other nine sit around (2, 5); an 11th config is ignored
    ranked = np.array(
        [[1, 20], [1, 5], [3, 5], [2, 4], [3, 6], [2, 6], [1, 4], [1, 6], [3, 4], [2, 5], [2, 6]]
    )
    choice = select_config(ranked)
    top = ranked[:10].astype(float)
    spread = [sum(((x - y) ** 2).sum() for y in top) for x in top]
    assert choice.index == int(np.argmin(spread)) == 5  # (2, 6), nearest the top-10 centroid (1.9, 6.5)
    assert "top-10" in choice.rule


def test_ties_prefer_the_higher_ranked():
    ranked = np.array([[1, 0], [2, 0], [3, 0], [2, 0]])  # rows 1 and 3 are identical
    assert select_config(ranked).index == 1


def test_ranking_orders_by_ub_then_cost():
    configs = np.array([[1, 0], [1, 1], [2, 0], [0, 3]])
    order = rank_configs(configs, np.array([5.0, 9.0, 9.0, 1.0]), np.array([1.0, 1.4, 2.0, 0.9]))
    assert order.tolist() == [1, 2, 0, 3]


def mock_space():
    configs = enumerate_configs([1.0, 0.3, 0.2], 4.0)
    u, v1, v2 = configs.T
    aux = 4.0 * v1 + 3.0 * v2  # auxiliaries give more UB per dollar than the base
    ub = 10.0 * u + aux
    # true throughput: auxiliaries help only up to twice the base's capacity (monotone, <= UB)
    true = ub - np.maximum(0.0, aux - 20.0 * u)
    return configs, ub, true


def test_kairos_plus_finds_the_optimum_with_pruning():
    configs, ub, true = mock_space()
    lookup = {tuple(c): t for c, t in zip(configs.tolist(), true)}
    visited = []

    def evaluate(config):
        visited.append(config)
        return lookup[config]

    result = kairos_plus(configs, ub, evaluate)
    assert result.success
    assert result.best_qps == pytest.approx(true.max())
    assert lookup[result.best_config] == true.max()
    assert ub[np.argmax(true)] < ub.max()  # the optimum is not simply the top-UB configuration
    assert len(visited) < len(configs) / 4 and result.fraction_evaluated == len(visited) / len(configs)
    ub_of = {tuple(c): b for c, b in zip(configs.tolist(), ub)}
    assert all(ub_of[a] >= ub_of[b] for a, b in zip(visited, visited[1:]))  # descending UB
    for k, later in enumerate(visited):  # never a sub-configuration of something already evaluated
        assert not any(all(x <= y for x, y in zip(later, earlier)) for earlier in visited[:k])
    best_so_far = 0.0
    for config, qps in result.evaluated:  # each visit could still have beaten the best so far
        assert ub_of[config] > best_so_far
        best_so_far = max(best_so_far, qps)


def test_kairos_plus_stops_once_ub_cannot_beat_the_best():
    configs = np.array([[1, 0], [0, 1], [0, 2], [0, 3]])
    ub = np.array([10.0, 9.0, 8.0, 7.0])
    measured = {(1, 0): 8.5, (0, 1): 8.8, (0, 2): 100.0, (0, 3): 100.0}
    result = kairos_plus(configs, ub, measured.__getitem__)
    # after 8.5, UBs 8 and 7 cannot win: they are never evaluated (even though the mock would say 100)
    assert [c for c, _ in result.evaluated] == [(1, 0), (0, 1)]
    assert (result.best_config, result.best_qps) == ((0, 1), 8.8)


def test_kairos_plus_never_visits_baseless_configurations_but_counts_them_in_the_space():
    """Algorithm 1 searches every configuration within the budget; without a base instance the UB is 0."""
    from shared.kairos import LatencyTable, configuration_upper_bounds, distribution_stats
    from shared.profiles.kairos import load_kairos_pool, load_kairos_profiles
    from shared.settings import Settings
    from shared.sim import deeprecsys_sizes

    pool = load_kairos_pool(Settings().kairos_data_dir)
    table = LatencyTable.from_profiles(load_kairos_profiles(Settings().kairos_data_dir), "dien", pool.devices)
    stats = distribution_stats(deeprecsys_sizes(5000, np.random.default_rng(0)), table, qos_ms=35.0,
                               base=pool.devices[0], auxiliaries=pool.devices[1:])
    space = enumerate_configs(pool.prices, 2.5, min_base=0)
    ub = configuration_upper_bounds(space, stats)
    ub_of = {tuple(c): b for c, b in zip(space.tolist(), ub)}
    result = kairos_plus(space, ub, lambda config: 0.9 * ub_of[config])
    assert len(space) == 697 and result.num_configs == 697
    assert all(config[0] >= 1 for config, _ in result.evaluated)


@pytest.mark.parametrize("seed", range(5))
def test_kairos_plus_is_never_below_any_configuration_under_the_algorithms_assumptions(seed):
    """With one consistent evaluation f <= UB, monotone under adding instances, KAIROS+ returns the best f
    of the whole space: in particular never less than Kairos's one-shot pick, whichever it is."""
    rng = np.random.default_rng(seed)
    configs = enumerate_configs([1.0, 0.4, 0.25], 5.0)
    weights = rng.uniform(0.5, 2.0, 3)
    true = np.sqrt(configs @ weights) * rng.uniform(0.95, 1.0)  # monotone under adding instances
    ub = true * rng.uniform(1.0, 1.3, len(true))  # a bound, loose by up to 30%
    lookup = {tuple(c): t for c, t in zip(configs.tolist(), true)}
    result = kairos_plus(configs, ub, lookup.__getitem__)
    assert result.best_qps == pytest.approx(true.max())
