"""KAIROS+ (Algorithm 1): an online configuration search that the upper bound prunes.

Visit configurations in descending UB order and evaluate each still-alive one with ``evaluate`` (an
online or simulated throughput measurement). After an improvement, drop every configuration whose UB
cannot beat the best so far; after every evaluation, drop the evaluated configuration's
sub-configurations (element-wise <=), which are assumed never to beat it. Since UBs only decrease along
the visit order, the search stops at the first UB <= best.

The search space is every configuration within the budget ("configs <- list of all configs within cost
budget"); those without a base instance have UB 0 and are never visited, but they count in
`KairosPlusResult.fraction_evaluated`. With one consistent ``evaluate`` that the UB bounds and that adding
instances never lowers, the result is the best of the whole space, so never below Kairos's one-shot pick
measured the same way.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Config = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class KairosPlusResult:
    success: bool
    message: str
    best_config: Config | None
    best_qps: float
    #: (configuration, measured qps) in evaluation order
    evaluated: tuple[tuple[Config, float], ...]
    num_configs: int

    @property
    def fraction_evaluated(self) -> float:
        return len(self.evaluated) / self.num_configs if self.num_configs else 0.0


def kairos_plus(
    configs: np.ndarray, ubs: np.ndarray, evaluate: Callable[[Config], float]
) -> KairosPlusResult:
    """Algorithm 1 over ``configs`` (K, T) with upper bounds ``ubs`` (K,)."""
    counts = np.asarray(configs, dtype=np.int64)
    bound = np.asarray(ubs, dtype=np.float64)
    if counts.ndim != 2 or bound.shape != (len(counts),):
        raise ValueError("`configs` must be (K, T) and `ubs` (K,)")
    alive = np.ones(len(counts), dtype=bool)
    best_qps, best = 0.0, None
    evaluated: list[tuple[Config, float]] = []
    for k in np.argsort(-bound, kind="stable"):
        if bound[k] <= best_qps:
            break
        if not alive[k]:
            continue
        config = tuple(int(c) for c in counts[k])
        qps = float(evaluate(config))
        evaluated.append((config, qps))
        if qps > best_qps:
            best_qps, best = qps, config
            alive &= bound > best_qps
        alive &= ~np.all(counts <= counts[k], axis=1)
    message = f"best {best_qps:.4g} qps after {len(evaluated)} of {len(counts)} evaluations"
    return KairosPlusResult(best is not None, message, best, best_qps, tuple(evaluated), len(counts))
