"""ModelSwitching (spec §5.4): per load, the most accurate model whose measured violations stay below 1%.

Offline, for each load of a grid and each model, a simulation serves constant-rate arrivals with that
model alone; the chosen model is the most accurate one whose violation ratio is below
``target_violation`` (the artifact's 1%, i.e. p99 latency within the SLO), else the fastest. Online the
lowest grid load that covers the estimate picks the model. The max batch is the artifact's: the
Jellyfish+ rule without its margin, taken from the most accurate model that rule finds feasible.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shared.profiles.format import ProfileSet
from shared.ramsis.arrivals import POISSON, ArrivalProcess
from shared.ramsis.baselines.jellyfish import jellyfish_choice
from shared.ramsis.baselines.load_granular import LoadGranularDispatch
from shared.ramsis.problem import RamsisProblem
from shared.sim.ramsis_workloads import constant_arrivals, run_fleet, serving_metrics, single_query_workload


@dataclass(frozen=True, eq=False)
class ModelSwitchingTable:
    """The offline choices for K workers: model index, max batch and measured violations per load."""

    workers: int
    rates_qps: np.ndarray
    model: np.ndarray
    max_batch: np.ndarray
    violation: np.ndarray

    def choice(self, rate_qps: float | None) -> tuple[int, int]:
        """The lowest grid load >= ``rate_qps`` decides (the highest when above it or unknown)."""
        last = len(self.rates_qps) - 1
        i = last if rate_qps is None else min(int(np.searchsorted(self.rates_qps, rate_qps)), last)
        return int(self.model[i]), int(self.max_batch[i])


def model_switching_batch(problem: RamsisProblem, workers: int, rate_qps: float) -> int:
    choice = jellyfish_choice(problem, workers, rate_qps, margin=1.0)
    return problem.max_queue if choice is None else choice[1]


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


class ModelSwitchingDispatch(LoadGranularDispatch):
    """ModelSwitching over the problem's models with tables measured per K."""

    name = "model_switching"

    def __init__(
        self,
        problem: RamsisProblem,
        tables: Sequence[ModelSwitchingTable],
        *,
        rate_qps: float | None = None,
        window_s: float = 0.5,
    ) -> None:
        super().__init__(rate_qps=rate_qps, window_s=window_s)
        self.problem = problem
        self._tables = {t.workers: t for t in tables}
        if not self._tables:
            raise ValueError("`tables` must not be empty")

    def choose(self, workers: int, rate_qps: float | None) -> tuple[str, int]:
        table = self._tables.get(workers)
        if table is None:
            raise ValueError(f"no ModelSwitching table for {workers} workers; have {sorted(self._tables)}")
        model, max_batch = table.choice(rate_qps)
        return self.problem.models[model], max_batch
