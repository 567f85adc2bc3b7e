"""Offline policy generation: solve one (K, load) policy, and build a load-indexed set (spec §3.7).

The set starts from a load grid and bisects every adjacent pair whose expected accuracies (§3.9)
differ by ``threshold`` (1 percentage point in the paper) or more, so neighbouring policies behave alike
and the online lookup never jumps far.
"""
from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from shared.profiles.format import ProfileSet
from shared.ramsis.arrivals import POISSON, ArrivalProcess
from shared.ramsis.evaluate import expected_metrics
from shared.ramsis.mdp import compile_mdp
from shared.ramsis.policy import PolicySet, RamsisPolicy
from shared.ramsis.problem import RamsisProblem, build_problem
from shared.ramsis.value_iteration import value_iteration


class PolicyGenerator:
    """``generator(workers, rate_qps) -> RamsisPolicy``: MDP, value iteration, expected metrics.

    Parameters
    ----------
    problem : models, latencies, SLO and slack grid of the worker type.
    arrivals : the central-queue arrival process (Poisson by default).
    gamma, max_iter, tol : passed to `value_iteration` (the artifact's 100 undiscounted sweeps by default).

    It holds no state between calls, so a service may call it from a background thread.
    """

    def __init__(
        self,
        problem: RamsisProblem,
        *,
        arrivals: ArrivalProcess = POISSON,
        gamma: float = 1.0,
        max_iter: int = 100,
        tol: float | None = None,
    ) -> None:
        self.problem = problem
        self.arrivals = arrivals
        self._vi = {"gamma": gamma, "max_iter": max_iter, "tol": tol}

    @classmethod
    def extending(cls, policies: PolicySet, profiles: ProfileSet, **options: Any) -> PolicyGenerator:
        """A generator whose policies fit into ``policies``: the same models, device, SLO, slack grid,
        queue length, batching and arrival process, latencies from ``profiles`` (give them in the form
        the set was built from, e.g. `quantile_profiles` as the generation CLI does by default)."""
        if not len(policies):
            raise ValueError("`policies` must not be empty")
        first = policies.policies[0]
        problem = build_problem(profiles, variants=first.models, device=first.device, slo_ms=first.slo_ms,
                                max_queue=first.max_queue, batching=first.batching)  # type: ignore[arg-type]
        if problem.models != first.models:
            raise ValueError(
                f"`profiles` make {list(problem.models)} the Pareto front, the set has {list(first.models)}"
            )
        return cls(dataclasses.replace(problem, slack_ms=first.slack_ms.copy()), arrivals=first.arrivals, **options)

    def __call__(self, workers: int, rate_qps: float) -> RamsisPolicy:
        p = self.problem
        mdp = compile_mdp(p, workers=workers, rate_qps=rate_qps, arrivals=self.arrivals)
        vi = value_iteration(mdp, **self._vi)  # type: ignore[arg-type]
        expected = expected_metrics(mdp, vi.model, vi.batch, vi.full_model)
        return RamsisPolicy(
            workers=int(workers),
            rate_qps=float(rate_qps),
            slo_ms=p.slo_ms,
            device=p.device,
            models=p.models,
            accuracy=tuple(float(a) for a in p.accuracy),
            slack_ms=p.slack_ms.copy(),
            max_queue=p.max_queue,
            batching=p.batching,
            arrivals=self.arrivals,
            model=vi.model,
            batch=vi.batch,
            full_model=vi.full_model,
            expected_accuracy=expected.accuracy,
            expected_violation=expected.violation_rate,
        )


def generate_policy_set(
    generate: Callable[[int, float], RamsisPolicy],
    *,
    workers: Sequence[int],
    rates_qps: Sequence[float],
    threshold: float = 0.01,
    min_gap_qps: float | None = None,
    on_policy: Callable[[RamsisPolicy, int], None] | None = None,
) -> PolicySet:
    """Policies for every K in ``workers`` over the load grid ``rates_qps``, refined by bisection.

    Parameters
    ----------
    generate : ``(workers, rate_qps) -> policy``, e.g. a `PolicyGenerator`.
    workers : the worker counts K to cover.
    rates_qps : the initial load grid (at least one load).
    threshold : bisect adjacent loads while their expected accuracies differ by this much or more.
    min_gap_qps : never bisect loads closer than this (default: the grid's span / 256); the
        set's `PolicySet.max_spacing` tells whether ``threshold`` was met.
    on_policy : called after each solve with the policy and how many solves are still planned.

    Examples
    --------
    >>> from shared.ramsis.testing import tiny_problem
    >>> policies = generate_policy_set(PolicyGenerator(tiny_problem()), workers=[2], rates_qps=[20, 200])
    >>> len(policies) > 2, policies.max_spacing(2) < 0.01
    (True, True)
    """
    grid = np.unique(np.asarray(rates_qps, dtype=np.float64))
    if len(grid) == 0 or not np.all(np.isfinite(grid)) or grid[0] <= 0:
        raise ValueError(f"`rates_qps` must hold finite loads > 0, got {list(rates_qps)}")
    if not threshold > 0:
        raise ValueError(f"`threshold` must be > 0, got {threshold}")
    if any(k < 1 for k in workers) or not workers:
        raise ValueError(f"`workers` must be counts >= 1, got {list(workers)}")
    gap = (grid[-1] - grid[0]) / 256 if min_gap_qps is None else min_gap_qps
    policies: list[RamsisPolicy] = []
    planned = len(grid) * len(set(workers))
    for k in sorted(set(workers)):
        solved: dict[float, RamsisPolicy] = {}
        todo = list(grid)
        while todo:
            for rate in todo:
                planned -= 1
                solved[rate] = generate(k, float(rate))
                if on_policy is not None:
                    on_policy(solved[rate], planned)
            rates = sorted(solved)
            todo = [
                (lo + hi) / 2
                for lo, hi in itertools.pairwise(rates)
                if abs(solved[hi].expected_accuracy - solved[lo].expected_accuracy) >= threshold and hi - lo > gap
            ]
            planned += len(todo)
        policies.extend(solved.values())
    return PolicySet(policies)
