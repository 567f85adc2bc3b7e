"""ModelSwitching (spec §5.4): per load, the most accurate model whose measured violations stay below 1%.

The table of choices per load is measured offline by simulation
(`shared.sim.scenarios.model_switching.profile_model_switching`); online the lowest grid load that covers
the estimate picks the model. The max batch is the artifact's: the Jellyfish+ rule without its margin,
taken from the most accurate model that rule finds feasible.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shared.ramsis.baselines.jellyfish import jellyfish_choice
from shared.ramsis.baselines.load_granular import LoadGranularDispatch
from shared.ramsis.problem import RamsisProblem


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
