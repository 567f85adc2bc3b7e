"""RAMSIS solver: value iteration, its fast sweep, and the stationary-distribution predictions."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from shared.ramsis import (
    ArrivalProcess,
    PolicyGenerator,
    PolicySet,
    RamsisDispatch,
    ViStatus,
    compile_mdp,
    expected_metrics,
    explicit_mdp,
    policy_transitions,
    value_iteration,
)
from shared.ramsis.testing import tiny_problem, tiny_profiles
from shared.ramsis.value_iteration import _solve_explicit
from shared.sim.scenarios.ramsis import constant_arrivals, run_fleet, serving_metrics, single_query_workload


@pytest.mark.parametrize(("workers", "rate", "arrivals"), [
    (1, 30.0, ArrivalProcess()), (3, 150.0, ArrivalProcess()), (2, 80.0, ArrivalProcess("gamma", cv=2.0)),
])
def test_fast_sweep_equals_explicit_value_iteration(workers, rate, arrivals):
    mdp = compile_mdp(tiny_problem(max_queue=6, delta=10), workers=workers, rate_qps=rate, arrivals=arrivals)
    fast = value_iteration(mdp)
    slow = _solve_explicit(mdp, 1.0, 100, None)
    np.testing.assert_allclose(fast.values, slow.values, rtol=1e-10)
    np.testing.assert_array_equal(fast.model, slow.model)
    assert fast.status is ViStatus.HORIZON and fast.iterations == 100


def _brute_force(e, n_states, gamma):
    """Evaluate every deterministic policy exactly, (I - gamma P_pi) V = R_pi; return the best values."""
    choices = [np.flatnonzero(e.state == s) for s in range(n_states)]
    best = np.full(n_states, -np.inf)
    dense = e.transitions.toarray()
    for pick in itertools.product(*choices):
        rows = np.array(pick)
        values = np.linalg.solve(np.eye(n_states) - gamma * dense[rows], e.reward[rows])
        best = np.maximum(best, values)
    return best


@pytest.mark.parametrize("batching", ["maximal", "variable"])
def test_discounted_value_iteration_converges_to_the_best_policy_by_brute_force(batching):
    mdp = compile_mdp(tiny_problem(max_queue=2, delta=2, batching=batching), workers=2, rate_qps=60.0)
    e = explicit_mdp(mdp)
    result = value_iteration(mdp, gamma=0.9, max_iter=2000, tol=1e-12)
    assert result.status is ViStatus.CONVERGED and result.success
    solved = np.append(result.values.ravel(), result.full_value)
    np.testing.assert_allclose(solved, _brute_force(e, mdp.num_states, 0.9), atol=1e-9)


def test_undiscounted_relative_value_iteration_converges_in_span():
    mdp = compile_mdp(tiny_problem(), workers=2, rate_qps=60.0)
    result = value_iteration(mdp, tol=1e-9, max_iter=5000)
    assert result.status is ViStatus.CONVERGED and result.iterations < 5000
    with pytest.raises(ValueError, match="`gamma`"):
        value_iteration(mdp, gamma=1.5)
    assert value_iteration(mdp, tol=1e-30, max_iter=3).status is ViStatus.NOT_CONVERGED


def test_policy_sanity_at_low_load_and_beyond_capacity():
    problem = tiny_problem(max_queue=6, delta=10)
    calm = PolicyGenerator(problem)(2, 1.0)
    assert calm.model[1, -1] == 2  # one query with the whole SLO: the most accurate model that fits
    flooded = PolicyGenerator(problem)(1, 20_000.0)
    assert flooded.full_model == 0 and flooded.expected_violation > 0.9  # the full queue dominates
    mid = PolicyGenerator(problem)(2, 120.0)
    for n in range(1, problem.max_queue + 1):  # more slack, no less accurate models on average
        row = problem.accuracy[mid.model[n]]
        half = problem.num_slack // 2
        assert row[half:].mean() >= row[:half].mean()


def test_policy_transitions_are_stochastic_and_expected_metrics_are_rates():
    mdp = compile_mdp(tiny_problem(batching="variable", max_queue=4, delta=6), workers=2, rate_qps=90.0)
    vi = value_iteration(mdp)
    chain = policy_transitions(mdp, vi.model, vi.batch, vi.full_model)
    np.testing.assert_allclose(np.asarray(chain.sum(axis=1)).ravel(), 1.0, atol=1e-9)
    expected = expected_metrics(mdp, vi.model, vi.batch, vi.full_model)
    assert expected.converged and expected.distribution.sum() == pytest.approx(1.0)
    assert 0.7 <= expected.accuracy <= 0.9 and 0.0 <= expected.violation_rate <= 1.0


@pytest.mark.parametrize(("workers", "rate"), [(2, 60.0), (3, 240.0)])
def test_expected_metrics_predict_the_simulation(workers, rate):
    """Section 7.3.1: the simulation tracks the expectation (which is conservative: slack is floored)."""
    profiles = tiny_profiles()
    problem = tiny_problem(max_queue=8, delta=20)
    policy = PolicyGenerator(problem)(workers, rate)
    arrivals = constant_arrivals(rate, 6000, np.random.default_rng(3), arrivals=ArrivalProcess())
    workload = single_query_workload(arrivals, slo_ms=problem.slo_ms, variants=problem.models)
    dispatch = RamsisDispatch(profiles, policy_set=PolicySet([policy]), rate_qps=rate)
    result = run_fleet(dispatch, workload, profiles=profiles, device="cpu", workers=workers, max_batch=16)
    measured = serving_metrics(result, dict(zip(problem.models, problem.accuracy)))
    assert measured.served == len(arrivals) and measured.dropped == 0
    assert measured.accuracy == pytest.approx(policy.expected_accuracy, abs=0.02)
    assert measured.slo_violation_ratio == pytest.approx(policy.expected_violation, abs=0.02)
    assert measured.accuracy >= policy.expected_accuracy - 0.01
