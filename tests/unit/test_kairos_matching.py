"""Heterogeneity coefficients and the Eq. 4/8 cost matrix (spec §7 items 1-3)."""
import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from shared.kairos import heterogeneity_coefficients, kairos_cost_matrix
from shared.profiles.kairos import load_kairos_profiles
from shared.settings import Settings


def test_paper_example_coefficients():
    c = heterogeneity_coefficients({"I1": 100.0, "I2": 200.0, "I3": 500.0})
    assert c == pytest.approx({"I1": 1.0, "I2": 0.5, "I3": 0.2})


def test_coefficients_on_real_data_match_the_artifact():
    profiles = load_kairos_profiles(Settings().kairos_data_dir)
    at_max = {d.name: profiles.latency_ms("rm2", d.name, 1000) for d in profiles.devices}
    c = heterogeneity_coefficients(at_max)
    assert c["g4dn.xlarge"] == 1.0
    assert c == pytest.approx({"g4dn.xlarge": 1.0, "c5n.2xlarge": 0.67, "r5n.large": 0.65, "t3.xlarge": 0.29}, abs=0.01)
    with pytest.raises(ValueError, match="max_batch_latency_ms"):
        heterogeneity_coefficients({"a": 0.0})


def test_pair_within_two_percent_of_qos_is_penalised():
    qos = 100.0
    latency = np.array([[99.0, 97.0], [50.0, 60.0]])  # 0.99 and 0.97 of T_qos
    cost, feasible = kairos_cost_matrix(latency, np.zeros(2), np.array([1.0, 0.5]), qos)
    assert feasible.tolist() == [[False, True], [True, True]]
    assert cost[0, 0] == 10 * qos  # default penalty 10 T_qos, on the cost
    assert cost[0, 1] == pytest.approx(0.5 * 97.0)
    assert cost[1].tolist() == pytest.approx([50.0, 30.0])


def test_wait_counts_against_qos_and_penalty_options():
    latency = np.array([[40.0, 20.0]])
    cost, feasible = kairos_cost_matrix(latency, np.array([70.0]), np.array([1.0, 0.5]), 100.0)
    assert feasible.tolist() == [[False, True]]  # 40 + 70 > 98, 20 + 70 <= 98
    cost, _ = kairos_cost_matrix(latency, np.array([90.0]), np.array([1.0, 0.5]), 100.0, penalty_ms=7.0,
                                 penalty_tiebreak=True)
    assert cost.tolist() == [[47.0, 17.0]]


def test_rectangular_assignment_returns_min_m_n_distinct_pairs():
    rng = np.random.default_rng(0)
    for m, n in [(7, 3), (3, 7), (5, 5)]:
        cost, _ = kairos_cost_matrix(rng.uniform(1, 150, (m, n)), rng.uniform(0, 50, m), rng.uniform(0.1, 1, n), 120.0)
        rows, cols = linear_sum_assignment(cost)
        assert len(rows) == min(m, n) == len(set(rows)) == len(set(cols))


def test_cost_matrix_validates_inputs():
    with pytest.raises(ValueError, match="two-dimensional"):
        kairos_cost_matrix(np.ones(3), np.zeros(3), np.ones(3), 1.0)
    with pytest.raises(ValueError, match="coefficients"):
        kairos_cost_matrix(np.ones((2, 2)), np.zeros(2), np.array([1.0, 1.5]), 1.0)
