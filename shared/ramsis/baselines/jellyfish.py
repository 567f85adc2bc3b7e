"""Jellyfish+ (spec §5.4): the most accurate model that keeps up with the load within half the SLO.

Per model m, the feasible batches are those with ``b / l(m, b) >= margin * load / K`` (per-worker
throughput above the per-worker load, the artifact's 1.05 margin) and ``l(m, b) <= SLO / 2`` (half the
SLO is left for waiting in the central queue). The most accurate model with a feasible batch runs, with
its largest feasible batch as the max batch; when none is feasible, the fastest model with batches up
to N. Dispatch is the shared central-queue, eager-worker one.
"""
from __future__ import annotations

import numpy as np

from shared.ramsis.baselines.load_granular import LoadGranularDispatch
from shared.ramsis.problem import RamsisProblem


def jellyfish_choice(
    problem: RamsisProblem, workers: int, rate_qps: float, *, margin: float = 1.05
) -> tuple[int, int] | None:
    """``(model index, max batch)`` at this load, or None when no model keeps up.

    Examples
    --------
    >>> from shared.ramsis.testing import tiny_problem
    >>> p = tiny_problem()  # 5 / 12 / 30 ms at b = 1, +50% per extra query; SLO 100 ms
    >>> jellyfish_choice(p, 2, 10.0), jellyfish_choice(p, 2, 200.0), jellyfish_choice(p, 2, 5000.0)
    ((2, 2), (1, 6), None)
    """
    batch = np.arange(1, problem.max_queue + 1)
    latency = problem.latency_ms[:, 1:]
    throughput = batch[None, :] / (latency / 1000.0)
    ok = (throughput >= margin * rate_qps / workers) & (latency <= problem.slo_ms / 2)
    feasible = np.flatnonzero(ok.any(axis=1))
    if len(feasible) == 0:
        return None
    best = int(feasible[np.argmax(problem.accuracy[feasible])])  # first of equals: the faster
    return best, int(batch[ok[best]].max())


class JellyfishDispatch(LoadGranularDispatch):
    """Jellyfish+ over the problem's (Pareto) models, on the same workers as RAMSIS."""

    name = "jellyfish"

    def __init__(
        self, problem: RamsisProblem, *, margin: float = 1.05, rate_qps: float | None = None, window_s: float = 0.5
    ) -> None:
        super().__init__(rate_qps=rate_qps, window_s=window_s)
        if not margin > 0:
            raise ValueError(f"`margin` must be > 0, got {margin}")
        self.problem = problem
        self._margin = margin

    def choose(self, workers: int, rate_qps: float | None) -> tuple[str, int]:
        choice = jellyfish_choice(self.problem, workers, rate_qps or 0.0, margin=self._margin)
        model, max_batch = choice if choice is not None else (self.problem.fastest(1), self.problem.max_queue)
        return self.problem.models[model], max_batch
