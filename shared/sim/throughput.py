"""Allowable throughput: the highest arrival rate a fleet + policy serves within the QoS (Kairos §7).

A rate *passes* when, pooled over several seeds, at least ``quantile`` (0.99) of the queries finish within
their SLO (p99 latency <= T_qos) and no run diverges. The search brackets the answer by doubling or halving
from a starting guess, then bisects to a relative tolerance. Every scheme is measured by this one
procedure. Runs end early once the verdict is certain: more misses than the pooled budget allows, or a
queue longer than ``queue_factor`` SLO-windows of arrivals (and than 2n), the Kairos artifact's
divergence test.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np

from shared.policy.base import DispatchPolicy
from shared.profiles.format import ProfileSet
from shared.serving.core import CoreConfig
from shared.serving.service_time import ServiceTime
from shared.sim.arrivals import Workload
from shared.sim.engine import StopRule, simulate
from shared.sim.workers import SimWorker


@dataclass(frozen=True, slots=True)
class Scenario:
    """Everything but the rate: fleet, service times, a fresh policy per run, and a workload maker."""

    workers: tuple[SimWorker, ...]
    #: what the scheduler knows, and (without ``service``) the profiled mean service times
    profiles: ProfileSet
    #: called once per run, so learning policies start from the same state every time
    make_policy: Callable[[], DispatchPolicy]
    #: ``(rate_qps, rng) -> Workload``; use the rng for every draw so seeds reproduce
    make_workload: Callable[[float, np.random.Generator], Workload]
    service: ServiceTime | None = None
    #: the serving core's drop rule (default: the live default)
    config: CoreConfig | None = None


class ThroughputStatus(str, Enum):
    CONVERGED = "converged"
    #: fails even at the smallest rate tried
    ZERO = "zero"
    #: still passes at the largest rate tried
    UNBOUNDED = "unbounded"


@dataclass(frozen=True, slots=True)
class ThroughputResult:
    status: ThroughputStatus
    message: str
    #: the highest rate that passed (0 if none did)
    rate_qps: float
    #: (rate, passed) in the order tried
    history: tuple[tuple[float, bool], ...]

    @property
    def success(self) -> bool:
        return self.status is ThroughputStatus.CONVERGED


def search_rate(
    passes: Callable[[float], bool],
    *,
    start_qps: float,
    rel_tol: float = 0.02,
    max_steps: int = 12,
) -> ThroughputResult:
    """Largest rate with ``passes(rate)`` true, assuming passing is monotone (decreasing) in the rate.

    Brackets by doubling/halving from ``start_qps`` (at most ``max_steps`` times), then bisects until the
    bracket is narrower than ``rel_tol`` of its upper end.
    """
    if not start_qps > 0 or not 0 < rel_tol < 1:
        raise ValueError(f"`start_qps` must be > 0 and `rel_tol` in (0, 1); got {start_qps}, {rel_tol}")
    history: list[tuple[float, bool]] = []

    def check(rate: float) -> bool:
        ok = passes(rate)
        history.append((rate, ok))
        return ok

    lo, hi = 0.0, start_qps
    if check(start_qps):
        lo, hi = start_qps, 2 * start_qps
        for _ in range(max_steps):
            if not check(hi):
                break
            lo, hi = hi, 2 * hi
        else:
            return ThroughputResult(ThroughputStatus.UNBOUNDED, f"passes at {lo:.4g} qps", lo, tuple(history))
    else:
        for _ in range(max_steps):
            if check(hi / 2):
                lo = hi / 2
                break
            hi /= 2
        else:
            return ThroughputResult(ThroughputStatus.ZERO, f"fails down to {hi:.4g} qps", 0.0, tuple(history))
    while hi - lo > rel_tol * hi:
        mid = 0.5 * (lo + hi)
        if check(mid):
            lo = mid
        else:
            hi = mid
    return ThroughputResult(
        ThroughputStatus.CONVERGED, f"{lo:.4g} qps passes, {hi:.4g} fails", lo, tuple(history)
    )


def rate_passes(
    scenario: Scenario,
    rate_qps: float,
    *,
    seeds: Sequence[int],
    quantile: float = 0.99,
    queue_factor: float = 10.0,
) -> bool:
    """Pooled over ``seeds``: no run diverges and >= ``quantile`` of queries meet their SLO."""
    workloads = [(seed, scenario.make_workload(rate_qps, np.random.default_rng(seed))) for seed in seeds]
    total = sum(len(w) for _, w in workloads)
    budget = math.floor((1.0 - quantile) * total + 1e-9)
    misses = 0
    for seed, workload in workloads:
        stop = StopRule(
            max_queue=max(2 * len(scenario.workers), math.ceil(queue_factor * workload.slo_ms / 1000.0 * rate_qps)),
            max_misses=budget - misses,
        )
        result = simulate(workload, scenario.workers, scenario.make_policy(), scenario.profiles, service=scenario.service,
                          config=scenario.config, seed=seed, stop=stop)
        if not result.success:
            return False
        misses += len(workload) - result.num_within_slo
        if misses > budget:
            return False
    return True


def allowable_throughput(
    scenario: Scenario,
    *,
    start_qps: float,
    seeds: Sequence[int] = (0, 1, 2),
    quantile: float = 0.99,
    rel_tol: float = 0.02,
    queue_factor: float = 10.0,
) -> ThroughputResult:
    """Highest arrival rate whose pooled p99 latency stays within the SLO (see module docstring).

    The scenario's workload maker fixes the arrival process; Kairos uses Poisson (`poisson_workload`).
    """
    if not seeds:
        raise ValueError("`seeds` must not be empty")
    if not 0 < quantile < 1:
        raise ValueError(f"`quantile` must be in (0, 1), got {quantile}")
    return search_rate(
        lambda rate: rate_passes(scenario, rate, seeds=seeds, quantile=quantile, queue_factor=queue_factor),
        start_qps=start_qps,
        rel_tol=rel_tol,
    )
