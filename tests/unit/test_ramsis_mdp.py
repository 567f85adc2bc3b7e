"""RAMSIS MDP: problem inputs, state/action space and the Eq. 1-3 transition probabilities."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from shared.profiles.format import ProfileSet
from shared.ramsis import (
    ArrivalProcess,
    build_problem,
    compile_mdp,
    explicit_mdp,
    fixed_slack_grid,
    model_slack_grid,
    pareto_front,
    quantile_profiles,
)
from shared.ramsis.testing import tiny_problem, tiny_profiles


# -- problem ------------------------------------------------------------------------------------
def test_pareto_front_drops_dominated_models_and_sorts_fastest_first():
    assert pareto_front([30, 10, 20, 25, 40], [0.9, 0.7, 0.8, 0.75, 0.9]).tolist() == [1, 2, 0]


def test_build_problem_prunes_to_the_pareto_front():
    profiles = tiny_profiles()
    slow_and_bad = profiles.variants[0].model_copy(update={"variant": "bad", "accuracy": 0.6,
                                                           "batch_latency_ms": {b: 50.0 * b for b in range(1, 17)}})
    problem = build_problem(profiles.model_copy(update={"variants": profiles.variants + [slow_and_bad]}),
                            family="tiny", slo_ms=100.0, max_queue=6)
    assert problem.models == ("fast", "mid", "slow") and problem.pruned == ("bad",)
    assert problem.latency_ms[1, 3] == pytest.approx(12.0 * 2.0)


def test_state_space_has_the_papers_3334_states_for_n32_delta100():
    problem = build_problem(tiny_profiles(max_batch=32), family="tiny", slo_ms=150.0, max_queue=32, delta=100)
    assert problem.num_states == 33 * 101 + 1 == 3334
    assert fixed_slack_grid(150.0, 100)[:3].tolist() == [0.0, 1.5, 3.0]


def test_model_based_grid_is_every_latency_within_the_slo():
    problem = build_problem(tiny_profiles(), family="tiny", slo_ms=40.0, discretization="model", max_queue=4)
    lat = problem.latency_ms[:, 1:]
    assert problem.slack_ms.tolist() == sorted({0.0, 40.0, *lat[lat <= 40.0].tolist()})
    assert model_slack_grid(problem.latency_ms, 40.0).tolist() == problem.slack_ms.tolist()


def test_slack_quantisation_is_a_floor_clipped_to_the_grid():
    problem = tiny_problem(delta=10)  # 0, 10, ..., 100 ms
    slack = np.array([-5.0, 0.0, 9.99, 10.0, 55.0, 100.0, 500.0])
    assert problem.slack_index(slack).tolist() == [0, 0, 0, 1, 5, 10, 10]


def test_quantile_profiles_use_the_sample_quantile_and_fill_every_batch():
    profiles = ProfileSet.load("profiles/digits.json")
    dense = quantile_profiles(profiles, quantile=0.95)
    raw, out = profiles.variants[-1], dense.variants[-1]
    assert out.batch_latency_ms[8] == pytest.approx(np.quantile(raw.latency_samples_ms[8], 0.95))
    assert list(out.batch_latency_ms) == list(range(1, 65))
    assert np.all(np.diff(list(out.batch_latency_ms.values())) >= 0)


def test_problem_validation_names_the_argument():
    with pytest.raises(ValueError, match="`slo_ms`"):
        build_problem(tiny_profiles(), family="tiny", slo_ms=-1.0)
    with pytest.raises(ValueError, match="`family`"):
        build_problem(tiny_profiles(), slo_ms=10.0)
    with pytest.raises(ValueError, match="`workers`"):
        compile_mdp(tiny_problem(), workers=0, rate_qps=10.0)


# -- arrivals -----------------------------------------------------------------------------------
def test_gamma_counts_are_a_distribution_and_cv1_is_poisson():
    durations = np.array([0.0, 0.01, 0.05])
    poisson = ArrivalProcess().count_pmf(200.0, durations, 80)
    gamma1 = ArrivalProcess("gamma", cv=1.0).count_pmf(200.0, durations, 80)
    bursty = ArrivalProcess("gamma", cv=2.0).count_pmf(200.0, durations, 400)
    np.testing.assert_allclose(gamma1, poisson, atol=1e-12)
    np.testing.assert_allclose(bursty.sum(axis=1), 1.0, atol=1e-9)
    assert bursty[2, 0] > poisson[2, 0]  # bursty: more empty intervals at the same mean


# -- transitions --------------------------------------------------------------------------------
@pytest.mark.parametrize("batching", ["maximal", "variable"])
@pytest.mark.parametrize("arrivals", [ArrivalProcess(), ArrivalProcess("gamma", cv=1.8)])
@pytest.mark.parametrize(("workers", "rate"), [(1, 30.0), (3, 90.0), (4, 400.0)])
def test_every_transition_row_is_a_distribution(batching, arrivals, workers, rate):
    mdp = compile_mdp(tiny_problem(max_queue=5, delta=8, batching=batching), workers=workers, rate_qps=rate,
                      arrivals=arrivals)
    rows = explicit_mdp(mdp).transitions
    assert rows.min() >= 0
    np.testing.assert_allclose(np.asarray(rows.sum(axis=1)).ravel(), 1.0, atol=1e-9)


def test_eq1_the_empty_queue_waits_for_the_next_query_at_full_slack():
    mdp = compile_mdp(tiny_problem(), workers=2, rate_qps=50.0)
    e = explicit_mdp(mdp)
    waiting = e.state < mdp.problem.num_slack
    assert np.all(e.model[waiting] == -1)
    np.testing.assert_array_equal(e.transitions[waiting].toarray()[:, mdp.state(1, mdp.problem.num_slack - 1)], 1.0)


def test_k1_queue_lengths_are_poisson_and_do_not_depend_on_the_slack():
    problem = tiny_problem(max_queue=6, delta=10)
    mdp = compile_mdp(problem, workers=1, rate_qps=60.0)
    n, m = 2, 1
    lat = mdp.latency_index[m, n]
    rows = mdp.maximal_rows(np.array([n, n, n]), np.array([4, 7, 10]), np.full(3, lat))
    j_count = problem.num_slack
    per_queue = rows[:, : (problem.max_queue + 1) * j_count].reshape(3, -1, j_count).sum(axis=2)
    mu = 60.0 * problem.latency_ms[m, n] / 1000.0
    expected = stats.poisson.pmf(np.arange(problem.max_queue + 1), mu)
    expected[1] += expected[0]  # no arrival: idle, then the next query arrives at full slack (Eq. 1)
    expected[0] = 0.0
    for row in per_queue:
        np.testing.assert_allclose(row, expected, atol=1e-12)
    np.testing.assert_allclose(rows[:, -1], stats.poisson.sf(problem.max_queue, mu), atol=1e-12)


def _eq2_literal(mdp, n, j, latency_ms, n_next, j_next):
    """Eq. 2 as printed: the four-interval sum over central-queue counts, intervals per spec §3.5.1."""
    p, k, lam = mdp.problem, mdp.workers, mdp.rate_qps / 1000.0
    slack, slo = p.slack_ms, p.slo_ms
    pois = stats.poisson.pmf
    t_a = slo - slack[j]
    upper = slack[j_next + 1] if j_next + 1 < len(slack) else slo
    lower_arr = latency_ms - slo + slack[j_next] if j_next > 0 else 0.0
    upper_arr = latency_ms - slo + upper
    t_b = max(0.0, lower_arr)
    t_c = max(0.0, upper_arr) - max(0.0, lower_arr)
    t_d = max(0.0, latency_ms - max(0.0, upper_arr))
    num = den = 0.0
    for k_a in range((n - 1) * k, n * k):
        p_a = pois(k_a, lam * t_a)
        den += p_a
        r = k_a % k
        for k_b in range(k - r):
            for k_c in range(k - r - k_b, (n_next + 1) * k - r - k_b):
                lo, hi = max(0, n_next * k - r - k_b - k_c), (n_next + 1) * k - r - k_b - 1 - k_c
                num += p_a * pois(k_b, lam * t_b) * pois(k_c, lam * t_c) * pois(np.arange(lo, hi + 1), lam * t_d).sum()
    return num / den


@pytest.mark.parametrize(
    ("workers", "rate", "n", "j", "model"), [(2, 60.0, 2, 3, 1), (3, 150.0, 1, 5, 2), (2, 40.0, 3, 0, 0)]
)
def test_fast_rows_equal_the_literal_eq2(workers, rate, n, j, model):
    problem = tiny_problem(max_queue=4, delta=5)
    mdp = compile_mdp(problem, workers=workers, rate_qps=rate)
    lat = mdp.latency_index[model, n]
    row = mdp.maximal_rows(np.array([n]), np.array([j]), np.array([lat]))[0]
    for n_next in range(1, problem.max_queue + 1):
        for j_next in range(problem.num_slack):
            expected = _eq2_literal(mdp, n, j, problem.latency_ms[model, n], n_next, j_next)
            if n_next == 1 and j_next == problem.num_slack - 1:
                continue  # also holds the n' = 0 mass (Eq. 1 composed)
            assert row[mdp.state(n_next, j_next)] == pytest.approx(expected, abs=1e-12)


def _monte_carlo(mdp, n, j, model, batch, samples, rng):
    """Empirical next-state distribution: Poisson central arrivals dealt round-robin over K workers,
    conditioned on the state exactly as the MDP models it (earliest query T_A before the decision)."""
    p, k = mdp.problem, mdp.workers
    lam = mdp.rate_qps / 1000.0
    t_a, lat = p.slo_ms - p.slack_ms[j], p.latency_ms[model, batch]
    arrivals = np.cumsum(rng.exponential(1 / lam, size=(samples, (p.max_queue + n + 3) * k + 30)), axis=1) - t_a
    mine = np.where((np.arange(1, arrivals.shape[1] + 1) % k == 0)[None, :], arrivals, np.inf)
    mine = mine[(mine <= 0).sum(axis=1) == n - 1]
    queued = np.concatenate([np.full((len(mine), 1), -t_a), np.sort(mine, axis=1)[:, : n - 1]], axis=1)
    fresh = np.where((mine > 0) & (mine <= lat), mine, np.inf)
    kept = queued[:, batch:]
    count = kept.shape[1] + np.isfinite(fresh).sum(axis=1)
    first = np.concatenate([kept, np.sort(fresh, axis=1)[:, :1]], axis=1).min(axis=1)
    j_next = p.slack_index(p.slo_ms - (lat - first))
    state = np.where(count == 0, mdp.state(1, p.num_slack - 1),
                     np.where(count > p.max_queue, mdp.full_state, count * p.num_slack + j_next))
    return np.bincount(state, minlength=mdp.num_states) / len(state)


@pytest.mark.parametrize(("batching", "workers", "rate", "n", "j", "model", "batch"), [
    ("maximal", 3, 80.0, 2, 6, 1, 2),
    ("maximal", 4, 100.0, 3, 4, 2, 3),
    ("variable", 2, 60.0, 3, 4, 1, 1),
])
def test_rows_match_monte_carlo_round_robin(batching, workers, rate, n, j, model, batch):
    mdp = compile_mdp(tiny_problem(max_queue=6, delta=10, batching=batching), workers=workers, rate_qps=rate)
    lat = mdp.latency_index[model, batch]
    if batch == n:
        row = mdp.maximal_rows(np.array([n]), np.array([j]), np.array([lat]))[0]
    else:
        row = mdp.partial_rows(n, batch, lat)[j]
    empirical = _monte_carlo(mdp, n, j, model, batch, 120_000, np.random.default_rng(7))
    assert np.abs(empirical - row).max() < 0.008


def test_round_robin_thins_the_arrivals_it_is_not_poisson_over_k():
    """A worker of K=4 sees Erlang-4 gaps: fewer zero- and many-arrival intervals than Poisson(λ/K)."""
    problem = tiny_problem(max_queue=6)
    mdp = compile_mdp(problem, workers=4, rate_qps=400.0)
    lat = mdp.latency_index[2, 1]
    row = mdp.maximal_rows(np.array([1]), np.array([5]), np.array([lat]))[0]
    per_queue = row[: -1].reshape(problem.max_queue + 1, -1).sum(axis=1)
    naive = stats.poisson.pmf(np.arange(problem.max_queue + 1), 100.0 * problem.latency_ms[2, 1] / 1000.0)
    assert per_queue[1] != pytest.approx(naive[0] + naive[1], abs=1e-3)


def test_actions_respect_the_latency_constraint_and_force_the_fastest_model():
    mdp = compile_mdp(tiny_problem(max_queue=6, delta=10), workers=2, rate_qps=50.0)
    e = explicit_mdp(mdp)
    p = mdp.problem
    serving = (e.model >= 0) & (e.state < mdp.full_state)
    n, j = np.divmod(e.state[serving], p.num_slack)
    lat = p.latency_ms[e.model[serving], e.batch[serving]]
    ok = e.satisfied[serving]
    assert np.all(lat[ok] <= p.slack_ms[j[ok]])
    assert np.all(e.model[serving][~ok] == 0) and np.all(e.batch[serving][~ok] == n[~ok])
    np.testing.assert_allclose(e.reward[serving], np.where(ok, p.accuracy[e.model[serving]], 0.0))
    assert e.model[-1] == 0 and e.batch[-1] == p.max_queue and e.reward[-1] == 0  # the full state
