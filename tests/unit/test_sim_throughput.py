"""Allowable-throughput search: the bracketing/bisection and a system with a known answer."""
import dataclasses
import math

import numpy as np
import pytest
from scipy.optimize import brentq

from shared.policy.fcfs import FcfsDispatch
from shared.profiles.format import DeviceType, ProfileSet, VariantProfile
from shared.serving import CoreConfig
from shared.sim import (
    Scenario,
    ThroughputStatus,
    allowable_throughput,
    make_fleet,
    poisson_workload,
    search_rate,
)


@pytest.mark.parametrize("threshold, start", [(37.3, 10.0), (37.3, 500.0), (0.9, 1.0)])
def test_search_brackets_and_bisects_to_tolerance(threshold, start):
    result = search_rate(lambda rate: rate <= threshold, start_qps=start, rel_tol=0.01)
    assert result.success and result.status is ThroughputStatus.CONVERGED
    assert threshold * 0.99 <= result.rate_qps <= threshold
    assert all(ok == (rate <= threshold) for rate, ok in result.history)


def test_search_reports_zero_and_unbounded():
    assert search_rate(lambda r: False, start_qps=1.0, max_steps=5).status is ThroughputStatus.ZERO
    unbounded = search_rate(lambda r: True, start_qps=1.0, max_steps=5)
    assert unbounded.status is ThroughputStatus.UNBOUNDED and not unbounded.success


def md1_allowable_qps(service_ms: float, qos_ms: float, quantile: float = 0.99) -> float:
    """Rate at which P(wait + D <= qos) = quantile in an M/D/1 queue (Erlang's waiting-time CDF)."""

    def wait_cdf(t: float, lam: float) -> float:
        rho = lam * service_ms
        return (1 - rho) * sum(
            (lam * (k * service_ms - t)) ** k / math.factorial(k) * math.exp(-lam * (k * service_ms - t))
            for k in range(int(t // service_ms) + 1)
        )

    per_ms = brentq(lambda lam: wait_cdf(qos_ms - service_ms, lam) - quantile, 1e-9, (1 - 1e-9) / service_ms)
    return per_ms * 1000.0


def test_one_worker_constant_latency_matches_md1_analysis():
    service_ms, qos_ms = 10.0, 50.0
    profiles = ProfileSet(
        source="test",
        devices=[DeviceType(name="d", kind="cpu", price_per_hour=1.0)],
        slo_ms={"m": qos_ms},
        variants=[VariantProfile(variant="m", family="m", device="d", batch_latency_ms={1: service_ms}, max_batch=1)],
    )
    scenario = Scenario(
        workers=tuple(make_fleet({"d": 1}, ["m"], max_batch=1)),
        profiles=profiles,
        make_policy=FcfsDispatch,
        make_workload=poisson_workload(
            num_queries=6000,
            sizes=lambda n, rng: np.ones(n, dtype=np.int64),
            application="m",
            slo_ms=qos_ms,
            candidate_variants=("m",),
        ),
        config=CoreConfig(drop_after_slo_multiple=1e9),  # M/D/1 serves every query: no drop rule
    )
    result = allowable_throughput(scenario, start_qps=40.0, seeds=(0, 1, 2), rel_tol=0.01)
    with_drops = allowable_throughput(dataclasses.replace(scenario, config=None), start_qps=40.0, seeds=(0, 1, 2),
                                      rel_tol=0.01)
    assert with_drops.rate_qps > result.rate_qps, "shedding hopeless queries keeps the others in time"
    expected = md1_allowable_qps(service_ms, qos_ms)  # ~56.1 qps, well below the 100 qps capacity
    assert result.success
    assert result.rate_qps == pytest.approx(expected, rel=0.05)
