"""RAMSIS experiments on `shared.sim.simulate`: workloads, one homogeneous fleet, and the paper's metrics.

Trace workloads follow the paper (§7, spec §4.4): a production trace gives the *rate* per interval, the
intervals are compressed onto the run, and arrivals within each are Poisson. Metrics (spec §5.5):
the violation ratio is the share of served queries finished after their deadline; accuracy is the mean
profiled accuracy of the model that served each query that met its deadline. RAMSIS serves every
query, late or not (its MDP predicts late ones), so these runs switch the core's drop rule off.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from shared.policy.base import DispatchPolicy
from shared.profiles.format import ProfileSet
from shared.ramsis.arrivals import ArrivalProcess
from shared.serving.core import CoreConfig
from shared.sim.arrivals import Workload, gamma_arrivals, poisson_arrivals
from shared.sim.engine import SimResult, simulate
from shared.sim.workers import make_fleet


#: the paper's RAMSIS and its baselines never drop a query
SERVE_EVERY_QUERY = CoreConfig(drop_after_slo_multiple=math.inf)


def rate_profile(timestamps: np.ndarray, *, num_bins: int) -> np.ndarray:
    """Relative load of ``num_bins`` equal intervals of a trace (mean 1).

    >>> rate_profile(np.array([0.0, 0.1, 0.2, 1.5, 2.0]), num_bins=2).tolist()
    [1.2, 0.8]
    """
    if num_bins < 1:
        raise ValueError(f"`num_bins` must be >= 1, got {num_bins}")
    counts, _ = np.histogram(timestamps, bins=num_bins, range=(float(np.min(timestamps)), float(np.max(timestamps))))
    return counts / counts.mean()


def piecewise_poisson_arrivals(
    relative_rates: Sequence[float], *, mean_rate_qps: float, bin_s: float, rng: np.random.Generator
) -> np.ndarray:
    """Arrival times of a Poisson process whose rate is ``mean_rate_qps * relative_rates[i]`` in bin i."""
    rates = mean_rate_qps * np.asarray(relative_rates, dtype=np.float64)
    if np.any(rates < 0) or not bin_s > 0:
        raise ValueError("`relative_rates` must be >= 0 and `bin_s` > 0")
    counts = rng.poisson(rates * bin_s)
    starts = np.repeat(np.arange(len(rates)) * bin_s, counts)
    return np.sort(starts + rng.uniform(0.0, bin_s, counts.sum()))


def constant_arrivals(
    rate_qps: float, num_queries: int, rng: np.random.Generator, *, arrivals: ArrivalProcess
) -> np.ndarray:
    """``num_queries`` arrivals at a constant rate, with the gaps of ``arrivals``."""
    if arrivals.kind == "poisson":
        return poisson_arrivals(rate_qps, num_queries, rng)
    return gamma_arrivals(rate_qps, num_queries, rng, cv=arrivals.cv)


def single_query_workload(arrival_s: np.ndarray, *, slo_ms: float, variants: Sequence[str]) -> Workload:
    """One query per arrival, each servable by every variant (RAMSIS chooses among them)."""
    return Workload(np.asarray(arrival_s), np.ones(len(arrival_s), dtype=np.int64), "ramsis", slo_ms, tuple(variants))


def run_fleet(
    policy: DispatchPolicy,
    workload: Workload,
    *,
    profiles: ProfileSet,
    device: str,
    workers: int,
    max_batch: int,
    seed: int = 0,
) -> SimResult:
    """``workers`` identical ``device`` workers hosting every candidate variant, deterministic service."""
    fleet = make_fleet({device: workers}, workload.candidate_variants, max_batch=max_batch)
    return simulate(workload, fleet, policy, profiles, config=SERVE_EVERY_QUERY, seed=seed)


@dataclass(frozen=True, slots=True)
class ServingMetrics:
    #: mean profiled accuracy over queries that met their deadline (0 when none did)
    accuracy: float
    #: late served queries / served queries
    slo_violation_ratio: float
    served: int
    dropped: int


def serving_metrics(result: SimResult, accuracy: Mapping[str, float]) -> ServingMetrics:
    served = result.worker >= 0
    latency = result.latency_ms
    on_time = served & (latency <= result.slo_ms)
    late = served & ~on_time
    acc = np.array([accuracy[v] for v in result.variant[on_time]], dtype=np.float64)
    num_served = int(served.sum())
    return ServingMetrics(
        accuracy=float(acc.mean()) if len(acc) else 0.0,
        slo_violation_ratio=float(late.sum() / num_served) if num_served else 0.0,
        served=num_served,
        dropped=len(result.dropped),
    )
