"""Two priority classes of one application offered more than the fleet serves, and how each class fared.

The scenario of ``make bench-priorities`` (live and simulated) and of ``tests/unit/test_priorities.py``: a
high class arriving at a fixed share of the fleet's capacity (the issue's 40%) and a low class making up the
rest of an offered load of 1x, 2x or 3x capacity, both Poisson, one row per query. The high class should keep
its SLO at every load (the fleet can serve it alone); the low class gets what the high one leaves.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from shared.sim.arrivals import Workload, poisson_arrivals
from shared.sim.engine import SimResult


#: the two classes
HIGH, LOW = 1, 9


@dataclass(frozen=True, slots=True)
class ClassMix:
    """The offered load: ``load`` times ``capacity_qps`` in all, ``high_share`` of capacity in the high class."""

    capacity_qps: float
    load: float
    high_share: float = 0.4
    high: int = HIGH
    low: int = LOW

    @property
    def high_qps(self) -> float:
        return self.high_share * self.capacity_qps

    @property
    def low_qps(self) -> float:
        return max(0.0, self.load - self.high_share) * self.capacity_qps


def workloads(mix: ClassMix, *, application: str, slo_ms: float, candidates: tuple[str, ...], duration_s: float,
              seed: int) -> list[Workload]:
    """The high and the low class's arrivals over ``duration_s``."""
    rng = np.random.default_rng(seed)
    out = []
    for rate, priority in ((mix.high_qps, mix.high), (mix.low_qps, mix.low)):
        count = int(rate * duration_s)
        if count < 1:
            continue
        arrivals = poisson_arrivals(rate, count, rng)
        out.append(Workload(arrivals, np.ones(count, dtype=int), application, slo_ms, candidates,
                            priority=priority))
    return out


class ClassOutcome(NamedTuple):
    """How one class fared: its queries, those answered within their SLO, their share, and per second."""

    queries: int
    within_slo: int
    attainment: float
    goodput_qps: float


def class_outcomes(priority: np.ndarray, within_slo: np.ndarray, duration_s: float) -> dict[int, ClassOutcome]:
    """Per class: ``priority[i]`` is query ``i``'s class, ``within_slo[i]`` whether it was answered in time."""
    out = {}
    for level in sorted(set(priority.tolist())):
        mine = priority == level
        queries, within = int(np.count_nonzero(mine)), int(np.count_nonzero(within_slo[mine]))
        out[level] = ClassOutcome(queries, within, within / queries, within / duration_s)
    return out


def sim_class_outcomes(result: SimResult, duration_s: float) -> dict[int, ClassOutcome]:
    return class_outcomes(result.priority, ~result.violated, duration_s)
