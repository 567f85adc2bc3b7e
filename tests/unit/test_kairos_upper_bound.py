"""Throughput upper bound (Eq. 9-15) and the configuration space (spec §7 items 11-15)."""
import itertools

import numpy as np
import pytest

from shared.kairos import (
    LatencyTable,
    configuration_upper_bounds,
    distribution_stats,
    enumerate_configs,
    upper_bound,
)
from shared.profiles.kairos import load_kairos_pool, load_kairos_profiles
from shared.settings import Settings
from shared.sim import deeprecsys_sizes

PRICES = [0.526, 0.432, 0.149, 0.1664]


def test_hand_example_auxiliary_bottleneck_eq11():
    # (1-f)/f * Q_a = 2 < Q_b^{s+} = 5 -> UB = 8/0.8 + (5-2)/5 * 10
    assert upper_bound(1, 8.0, q_base=10.0, q_base_large=5.0, f_prime=0.8) == pytest.approx(16.0)


def test_base_bottleneck_eq9_and_scaling_eq12():
    # (1-f)/f * Q_a = 0.25 * 40 = 10 >= Q_b^{s+} = 5 -> UB = 5 / 0.2
    assert upper_bound(1, 40.0, q_base=10.0, q_base_large=5.0, f_prime=0.8) == pytest.approx(25.0)
    assert upper_bound(3, 120.0, q_base=10.0, q_base_large=5.0, f_prime=0.8) == pytest.approx(75.0)


def test_degenerate_shares():
    assert upper_bound(2, 7.0, q_base=10.0, q_base_large=5.0, f_prime=0.0) == 20.0
    assert upper_bound(2, 7.0, q_base=10.0, q_base_large=np.inf, f_prime=1.0) == 27.0


@pytest.fixture(scope="module")
def rm2_stats():
    profiles = load_kairos_profiles(Settings().kairos_data_dir)
    table = LatencyTable.from_profiles(profiles, "rm2", load_kairos_pool(Settings().kairos_data_dir).devices)
    sizes = deeprecsys_sizes(200_000, np.random.default_rng(42))
    return distribution_stats(
        sizes, table, qos_ms=350.0, base="g4dn.xlarge", auxiliaries=table.devices[1:]
    )


def test_distribution_inputs_match_the_artifact_profile(rm2_stats):
    s = rm2_stats
    assert s.limit == {"c5n.2xlarge": 910, "r5n.large": 870, "t3.xlarge": 400}
    assert s.q_base == pytest.approx(15.04, rel=0.01)
    assert s.f("r5n.large") == pytest.approx(0.984, abs=0.003)
    assert s.f("t3.xlarge") == pytest.approx(0.837, abs=0.01)
    assert s.time_ratio[870] == pytest.approx(0.941, abs=0.01)
    assert s.q_aux[("r5n.large", 870)] == pytest.approx(10.39, rel=0.01)
    assert s.q_aux[("r5n.large", 910)] == pytest.approx(10.27, rel=0.01)  # Q_a at another type's s
    f, tau = s.small_fraction[870], s.time_ratio[870]
    assert s.q_base_large[870] == pytest.approx(s.q_base * (1 - f) / (1 - tau))


def test_rm2_upper_bounds_from_the_real_data(rm2_stats):
    configs = np.array([[2, 0, 9, 0], [1, 0, 13, 0], [4, 0, 0, 0], [0, 3, 3, 3], [1, 1, 0, 1]])
    ubs = configuration_upper_bounds(configs, rm2_stats)
    assert ubs[0] == pytest.approx(119.5, rel=0.02)
    assert ubs[1] == pytest.approx(144.2, rel=0.02)
    assert ubs[2] == pytest.approx(4 * rm2_stats.q_base)  # homogeneous: u Q_b
    assert ubs[3] == 0.0  # no base instance
    # two auxiliary types: f', Q_b^{s+} and every Q_a at the larger s (c5n's 910)
    s = 910
    v = rm2_stats.q_aux[("c5n.2xlarge", s)] + rm2_stats.q_aux[("t3.xlarge", s)]
    expected = upper_bound(1, v, q_base=rm2_stats.q_base, q_base_large=rm2_stats.q_base_large[s],
                           f_prime=rm2_stats.small_fraction[s])
    assert ubs[4] == pytest.approx(float(expected))


def test_enumeration_counts_and_budget():
    configs = enumerate_configs(PRICES, 2.5)
    assert len(configs) == 331
    assert len(enumerate_configs(PRICES, 2.5, min_base=0)) == 697
    assert len(enumerate_configs(PRICES, 2.5, max_counts=[5, 6, 17, 15])) == 331
    brute = {
        c for c in itertools.product(range(5), range(6), range(17), range(16))
        if c[0] >= 1 and np.dot(c, PRICES) <= 2.5 + 1e-9
    }
    assert {tuple(c) for c in configs} == brute
    assert len(enumerate_configs(PRICES, 2.5, max_counts=[5, 6, 3, 15])) < 331


def test_budget_maximal_configurations_cover_the_space():
    from shared.kairos import budget_maximal

    configs = enumerate_configs(PRICES, 2.5)
    maximal = configs[budget_maximal(configs, PRICES, 2.5)]
    assert len(maximal) == 70
    assert np.all(2.5 - maximal @ np.array(PRICES) < min(PRICES))
    # every configuration is one of them or a sub-configuration of one
    assert all(np.any(np.all(c <= maximal, axis=1)) for c in configs)
    # ... and none of them is a sub-configuration of another
    assert not any(np.sum(np.all(m <= maximal, axis=1)) > 1 for m in maximal)
