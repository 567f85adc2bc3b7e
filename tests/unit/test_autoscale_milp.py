"""The Model-Autoscaler ILP (INFaaS §4.2.1): Table 3 exactly, and the optimum of tiny instances vs brute force."""
import itertools

import numpy as np
import pytest

from shared.autoscale import (
    Application,
    MachineCatalogue,
    MilpProblem,
    MilpStatus,
    VariantOption,
    WorkerType,
    milp_autoscale,
    milp_problem,
)
from shared.infaas.records import VariantRecord

#: Table 2: A (4 CPUs, TF), B (1 Inferentia core), C (1 V100); latency ms, req/s, $/s
TABLE2 = {"cost_per_s": [1, 3, 16], "saturation_qps": [5, 100, 800], "inference_ms": [200, 20, 15],
          "load_s": [0, 0, 0]}


def table2(load_qps, slo_ms, running=(0, 0, 0)):
    return MilpProblem(**TABLE2, running=list(running), application=[0, 0, 0], load_qps=[load_qps],
                       slo_ms=[slo_ms], needs=np.zeros((3, 0)), capacity=[])


@pytest.mark.parametrize("qps, slo, counts, cost", [(10, 300, [2, 0, 0], 2), (10, 50, [0, 1, 0], 3),
                                                    (1000, 300, [0, 2, 1], 22)])
def test_table3_rows(qps, slo, counts, cost):
    result = milp_autoscale(table2(qps, slo), lam=0.0)
    assert result.status is MilpStatus.OPTIMAL and result.success
    assert result.delta.tolist() == counts
    assert result.objective == pytest.approx(cost)
    assert result.cost_per_s_after == pytest.approx(cost)


def test_running_instances_are_unloaded_when_cheaper_and_loading_is_penalised():
    # 3 instances of C running for 10 qps: unload them all, load 2 of A
    result = milp_autoscale(table2(10, 300, running=(0, 0, 3)), lam=0.0)
    assert result.delta.tolist() == [2, 0, -3]
    assert result.cost_per_s_after == pytest.approx(2.0)
    # with a heavy loading penalty keeping one C (16 $/s, no load cost) beats loading two A's
    heavy = MilpProblem(**{**TABLE2, "load_s": [100.0, 100.0, 100.0]}, running=[0, 0, 3], application=[0, 0, 0],
                        load_qps=[10], slo_ms=[300], needs=np.zeros((3, 0)), capacity=[])
    assert milp_autoscale(heavy, lam=1.0).delta.tolist() == [0, 0, -2]


def brute_force(p: MilpProblem, lam: float, slack: np.ndarray, max_up: int) -> float | None:
    best = None
    ranges = [range(-int(n), 1 if t > p.slo_ms[a] else max_up + 1)
              for n, t, a in zip(p.running, p.inference_ms, p.application)]
    for delta in itertools.product(*ranges):
        after = p.running + np.asarray(delta)
        supply = np.bincount(p.application, p.saturation_qps * after, minlength=len(p.load_qps))
        if np.any(supply < p.load_qps + slack - 1e-9):
            continue
        if p.needs.shape[1] and np.any(p.needs.T @ after > p.capacity + 1e-9):
            continue
        cost = float(sum(c * (d + lam * t * max(d, 0)) for c, d, t in zip(p.cost_per_s, delta, p.load_s)))
        best = cost if best is None or cost < best else best
    return best


@pytest.mark.parametrize("seed", range(25))
def test_optimum_matches_brute_force_on_tiny_instances(seed):
    rng = np.random.default_rng(seed)
    n, m, k = 4, 2, 2
    p = MilpProblem(cost_per_s=rng.uniform(0.5, 5, n).round(2), saturation_qps=rng.uniform(5, 60, n).round(1),
                    inference_ms=rng.uniform(5, 120, n).round(1), load_s=rng.uniform(0, 3, n).round(2),
                    running=rng.integers(0, 3, n), application=np.array([0, 0, 1, 1]),
                    load_qps=rng.uniform(10, 90, m).round(1), slo_ms=[100.0, 100.0],
                    needs=rng.integers(1, 4, (n, k)).astype(float), capacity=rng.integers(12, 30, k).astype(float))
    lam, slack = float(rng.uniform(0, 1)), 0.05 * p.load_qps
    expected = brute_force(p, lam, slack, max_up=6)
    result = milp_autoscale(p, lam=lam, slack=slack)
    if expected is None:
        assert not result.success or np.any(result.delta > 6)
        return
    assert result.success
    assert result.objective == pytest.approx(expected, abs=1e-6)


def test_infeasible_when_resources_cannot_carry_the_load():
    p = MilpProblem(**TABLE2, running=[0, 0, 0], application=[0, 0, 0], load_qps=[1000], slo_ms=[300],
                    needs=np.eye(3), capacity=[1, 1, 0])
    result = milp_autoscale(p, lam=0.0)
    assert result.status is MilpStatus.INFEASIBLE and not result.success and result.delta is None


@pytest.mark.parametrize("field, value, name", [("running", [0, -1, 0], "`running`"),
                                                ("saturation_qps", [5, 100], "`saturation_qps`"),
                                                ("cost_per_s", [1, np.nan, 3], "`cost_per_s`")])
def test_malformed_problems_raise_naming_the_argument(field, value, name):
    kwargs = dict(**TABLE2, running=[0, 0, 0], application=[0, 0, 0], load_qps=[10], slo_ms=[300],
                  needs=np.zeros((3, 0)), capacity=[])
    kwargs[field] = value
    with pytest.raises(ValueError, match=name):
        MilpProblem(**kwargs)
    with pytest.raises(ValueError, match="`lam`"):
        milp_autoscale(table2(10, 300), lam=-1.0)


def test_problem_from_catalogue_keeps_eligible_options_and_running_ones():
    cpu = WorkerType("cpu", "cpu", 0.32, {"vcpu": 8})
    rec = lambda v, acc, ms: VariantRecord(v, "fam", "cpu", accuracy=acc, batch_latency_ms=((1, ms),))
    options = (VariantOption(rec("small", 0.7, 5.0), "small", {"vcpu": 1}, 0.04),
               VariantOption(rec("big", 0.9, 20.0), "big", {"vcpu": 1}, 0.04),
               VariantOption(rec("slow", 0.95, 80.0), "slow", {"vcpu": 1}, 0.04))
    cat = MachineCatalogue((cpu,), options, (Application("app", "fam", 50.0, accuracy_floor=0.8),))
    problem, rows = milp_problem(cat, {"app": 100.0}, running={("app", "small", "cpu"): 2}, capacity={"vcpu": 8})
    # "slow" misses the 25 ms batch budget, "small" misses the accuracy floor but is running
    assert rows == [("app", ("big", "cpu")), ("app", ("small", "cpu"))]
    assert problem.running.tolist() == [0, 2]
    result = milp_autoscale(problem, lam=0.0, slack=5.0)
    assert result.delta.tolist() == [3, -2]  # "big" Q = 50: 3 x 50 >= 105; the ineligible ones go
