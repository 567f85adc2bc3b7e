"""Proteus's MILP against brute force, its constraints, and the degraded fallback."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from shared.policy.base import PlanStatus
from shared.proteus.milp import AllocationProblem, solve_allocation

EXACT = {"mip_rel_gap": 1e-9, "headroom": 1.0}


def brute_force(problem: AllocationProblem, demand: np.ndarray) -> float | None:
    """Best effective accuracy over every placement (each device: nothing or one variant).

    With one query type per variant, a placement's best assignment fills each type's demand from its
    hosted capacity, most accurate variant first.
    """
    cap, acc = problem.capacity, problem.accuracy
    devices = [t for t, c in enumerate(problem.device_counts) for _ in range(c)]
    best = None
    for choice in itertools.product(range(-1, cap.shape[1]), repeat=len(devices)):
        total = 0.0
        feasible = True
        for q in range(cap.shape[2]):
            hosted = sorted(((acc[m], cap[devices[d], m, q]) for d, m in enumerate(choice) if m >= 0 and cap[devices[d], m, q] > 0),
                            reverse=True)
            need = demand[q]
            for a, c in hosted:
                take = min(c, need)
                total += a * take
                need -= take
            feasible &= need <= 1e-9
        if feasible and (best is None or total > best):
            best = total
    return None if best is None else best / demand.sum()


def random_problem(rng: np.random.Generator, *, counts=(2, 1), variants_per_type=(2, 2), load=0.6) -> AllocationProblem:
    num_types, num_variants, num_queries = len(counts), sum(variants_per_type), len(variants_per_type)
    accuracy = np.empty(num_variants)
    capacity = np.zeros((num_types, num_variants, num_queries))
    m = 0
    for q, size in enumerate(variants_per_type):
        accuracy[m:m + size] = np.sort(rng.uniform(0.8, 1.0, size))[::-1]
        for k in range(size):
            base = rng.uniform(5, 20) * (1 + k)
            for t in range(num_types):
                if rng.random() > 0.15:
                    capacity[t, m, q] = base * (1 + 2 * t) * rng.uniform(0.8, 1.2)
            m += 1
    top = sum(counts[t] * capacity[t].max(axis=0) for t in range(num_types))
    demand = load * top / num_queries * rng.uniform(0.5, 1.5, num_queries)
    return AllocationProblem(np.array(counts), accuracy, capacity, demand)


@pytest.mark.parametrize("seed", range(6))
def test_matches_brute_force(seed: int) -> None:
    problem = random_problem(np.random.default_rng(seed), load=[0.3, 0.6, 0.9][seed % 3])
    expected = brute_force(problem, problem.demand)
    for per_device in (False, True):
        result = solve_allocation(problem, per_device=per_device, **EXACT)
        if expected is None:
            assert result.status is PlanStatus.DEGRADED
        else:
            assert result.status is PlanStatus.OPTIMAL
            assert result.objective == pytest.approx(expected, abs=1e-6)


def test_hand_computed_optimum() -> None:
    # one CPU: fast variant 10 qps (acc 0.9) or accurate 5 qps (acc 1.0); one GPU: 40 / 20 qps
    cap = np.array([[[10.0], [5.0]], [[40.0], [20.0]]])
    problem = AllocationProblem(np.array([1, 1]), np.array([0.9, 1.0]), cap, np.array([30.0]))
    result = solve_allocation(problem, **EXACT)
    # best: GPU fast (40 qps, serves 25) + CPU accurate (5): (25 * 0.9 + 5) / 30, or GPU accurate (20) + CPU fast (10): (20 + 9) / 30
    assert result.objective == pytest.approx(max(25 * 0.9 + 5, 20 + 10 * 0.9) / 30)
    assert result.counts.tolist() == [[1, 0], [0, 1]]


def test_solution_satisfies_constraints() -> None:
    problem = random_problem(np.random.default_rng(7), counts=(4, 3, 2), variants_per_type=(3, 2, 4), load=0.7)
    result = solve_allocation(problem, **EXACT)
    counts, served = result.counts, result.served
    assert (counts.sum(axis=1) <= problem.device_counts).all()                           # Eq. 1
    assert np.allclose(served.sum(axis=(0, 1)), problem.demand)                          # Eq. 6
    assert (served <= problem.capacity * counts[:, :, None] + 1e-6).all()                # Eq. 5
    assert (served[problem.capacity == 0] == 0).all()                                   # Eq. 3: only serving variants


def test_accuracy_never_rises_with_demand() -> None:
    problem = random_problem(np.random.default_rng(3), counts=(3, 2), variants_per_type=(3, 3), load=0.2)
    previous = 1.0 + 1e-9
    for scale in (0.5, 1, 2, 3, 4, 5):
        scaled = AllocationProblem(problem.device_counts, problem.accuracy, problem.capacity, problem.demand * scale)
        result = solve_allocation(scaled, **EXACT)
        if result.status is PlanStatus.OPTIMAL:
            assert result.objective <= previous + 1e-7
            previous = result.objective
    assert previous < 1.0  # the sweep reached accuracy scaling


def test_light_load_gets_top_variants() -> None:
    problem = random_problem(np.random.default_rng(4), load=0.05)
    result = solve_allocation(problem, **EXACT)
    assert result.objective == pytest.approx(1.0 * problem.demand @ [problem.accuracy[0], problem.accuracy[2]] / problem.demand.sum())


def test_overload_lowers_demand_step_by_step() -> None:
    cap = np.array([[[10.0], [5.0]]])
    problem = AllocationProblem(np.array([2]), np.array([0.9, 1.0]), cap, np.array([33.0]))
    result = solve_allocation(problem, headroom=1.0, degrade_step=0.05)
    # at most 20 qps: the first rung 1 - k * 0.05 with 33 * rung <= 20 is 0.60
    assert result.status is PlanStatus.DEGRADED
    assert result.demand_scale == pytest.approx(0.60)
    assert result.served.sum() == pytest.approx(0.60 * 33)
    assert "lowered" in result.message


def test_headroom_serves_more_than_demand() -> None:
    problem = random_problem(np.random.default_rng(5), load=0.4)
    result = solve_allocation(problem, headroom=1.05, mip_rel_gap=1e-9)
    assert result.served.sum() == pytest.approx(1.05 * problem.demand.sum())


def test_infeasible_variant_is_never_placed() -> None:
    cap = np.array([[[0.0], [5.0]], [[40.0], [20.0]]])  # variant 0 infeasible on type 0
    problem = AllocationProblem(np.array([3, 1]), np.array([1.0, 0.9]), cap, np.array([50.0]))
    result = solve_allocation(problem, **EXACT)
    assert result.counts[0, 0] == 0 and result.counts[1, 0] == 1


def test_unservable_type_is_reported() -> None:
    cap = np.zeros((1, 2, 2))
    cap[0, 0, 0] = 10.0
    problem = AllocationProblem(np.array([1]), np.array([1.0, 1.0]), cap, np.array([5.0, 5.0]))
    result = solve_allocation(problem, **EXACT)
    assert result.success and result.served[:, :, 1].sum() == 0
    assert "no feasible variant" in result.message


def test_host_caps_pin_families() -> None:
    problem = random_problem(np.random.default_rng(8), counts=(3, 2), variants_per_type=(2, 2), load=0.5)
    pinned = AllocationProblem(problem.device_counts, problem.accuracy, problem.capacity, problem.demand,
                               np.array([0, 0, 1, 1]), np.array([[1, 2], [2, 0]]))
    result = solve_allocation(pinned, headroom=1.0)
    assert result.counts[:, :2].sum(axis=1).tolist() <= [1, 2]
    assert result.counts[1, 2:].sum() == 0


def test_variant_serving_two_types_shares_its_capacity() -> None:
    cap = np.array([[[10.0, 10.0]]])  # one device, one variant serving two types
    problem = AllocationProblem(np.array([1]), np.array([1.0]), cap, np.array([6.0, 6.0]))
    assert solve_allocation(problem, **EXACT).status is PlanStatus.DEGRADED
    problem = AllocationProblem(np.array([1]), np.array([1.0]), cap, np.array([4.0, 6.0]))
    assert solve_allocation(problem, **EXACT).status is PlanStatus.OPTIMAL


@pytest.mark.parametrize("bad, match", [
    ({"capacity": np.ones((2, 2))}, "capacity"),
    ({"demand": np.array([-1.0])}, "demand"),
    ({"device_counts": np.array([1.5])}, "device_counts"),
])
def test_invalid_input_names_the_argument(bad: dict, match: str) -> None:
    base = {"device_counts": np.array([1]), "accuracy": np.array([1.0]), "capacity": np.ones((1, 1, 1)), "demand": np.array([1.0])}
    with pytest.raises(ValueError, match=match):
        solve_allocation(AllocationProblem(**{**base, **bad}))
