"""ModelSwitching's offline table (spec §5.4), measured by simulation.

For each load of a grid and each model, a simulation serves constant-rate arrivals with that model
alone; the chosen model is the most accurate one whose violation ratio is below ``target_violation``
(the artifact's 1%, i.e. p99 latency within the SLO), else the fastest. The policy that reads the table
online is `shared.ramsis.baselines.ModelSwitchingDispatch`.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shared.profiles.format import ProfileSet
from shared.ramsis.arrivals import POISSON, ArrivalProcess
from shared.ramsis.baselines.load_granular import LoadGranularDispatch
from shared.ramsis.baselines.model_switching import ModelSwitchingTable, model_switching_batch
from shared.ramsis.problem import RamsisProblem
from shared.sim.scenarios.ramsis import constant_arrivals, run_fleet, serving_metrics, single_query_workload


class _StaticDispatch(LoadGranularDispatch):
    def __init__(self, variant: str, max_batch: int) -> None:
        super().__init__()
        self._choice = (variant, max_batch)

    def choose(self, workers: int, rate_qps: float | None) -> tuple[str, int]:
        return self._choice


def profile_model_switching(
    problem: RamsisProblem,
    profiles: ProfileSet,
    *,
    workers: int,
    rates_qps: Sequence[float],
    num_queries: int = 4000,
    target_violation: float = 0.01,
    arrivals: ArrivalProcess = POISSON,
    seed: int = 0,
) -> ModelSwitchingTable:
    """Measure the grid by simulation (``profiles`` must give the problem's latencies).

    Loads are scanned upwards and models downwards from the previous load's choice: a model too slow
    at one load is taken to be too slow at every higher one, which saves most of the runs.
    """
    if not 0 < target_violation < 1:
        raise ValueError(f"`target_violation` must be in (0, 1), got {target_violation}")
    rates = np.unique(np.asarray(rates_qps, dtype=np.float64))
    accuracy = dict(zip(problem.models, problem.accuracy))
    fleet_batch = max(profiles.get(m, problem.device).max_batch for m in problem.models)
    models, batches, violations = [], [], []
    upper = problem.num_models - 1
    for rate in rates:
        max_batch = model_switching_batch(problem, workers, float(rate))
        arrival_s = constant_arrivals(float(rate), num_queries, np.random.default_rng(seed), arrivals=arrivals)
        workload = single_query_workload(arrival_s, slo_ms=problem.slo_ms, variants=problem.models)
        chosen, violation = 0, 1.0
        for m in range(upper, -1, -1):
            result = run_fleet(_StaticDispatch(problem.models[m], max_batch), workload, profiles=profiles,
                               device=problem.device, workers=workers, max_batch=fleet_batch, seed=seed)
            violation = serving_metrics(result, accuracy).slo_violation_ratio
            chosen = m
            if violation < target_violation:
                break
        upper = chosen
        models.append(chosen)
        batches.append(max_batch)
        violations.append(violation)
    return ModelSwitchingTable(workers, rates, np.array(models), np.array(batches), np.array(violations))
