"""Arrival processes and query-size samplers."""
import numpy as np
import pytest

from shared.settings import Settings
from shared.sim.arrivals import (
    deeprecsys_sizes,
    gamma_arrivals,
    load_trace_timestamps,
    poisson_arrivals,
    poisson_workload,
    trace_arrivals,
    truncated_gaussian_sizes,
)

TRACE = Settings().azure_trace("code")


def test_poisson_rate_and_exponential_gaps():
    times = poisson_arrivals(200.0, 50_000, np.random.default_rng(0))
    gaps = np.diff(times)
    assert len(times) / times[-1] == pytest.approx(200.0, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.03)


def test_common_random_numbers_across_rates():
    slow = poisson_arrivals(10.0, 100, np.random.default_rng(4))
    fast = poisson_arrivals(20.0, 100, np.random.default_rng(4))
    np.testing.assert_allclose(slow, 2 * fast)


@pytest.mark.parametrize("cv", [0.5, 2.0])
def test_gamma_has_requested_rate_and_cv(cv):
    gaps = np.diff(gamma_arrivals(50.0, 80_000, np.random.default_rng(1), cv=cv))
    assert 1 / gaps.mean() == pytest.approx(50.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)


def test_trace_replay_is_rescaled_to_the_target_rate():
    stamps = load_trace_timestamps(TRACE)
    assert stamps[0] == 0 and np.all(np.diff(stamps) >= 0) and len(stamps) > 8000
    times = trace_arrivals(stamps, 37.0, 5000)
    assert (len(times) - 1) / times[-1] == pytest.approx(37.0)
    # burstiness is kept: gap shape is the trace's, only scaled
    native = np.diff(stamps[:5000])
    np.testing.assert_allclose(np.diff(times) / np.diff(times).mean(), native / native.mean(), atol=1e-9)
    with pytest.raises(ValueError, match="num_queries"):
        trace_arrivals(stamps, 37.0, len(stamps) + 1)


def test_deeprecsys_sampler_matches_the_artifact_mix():
    sizes = deeprecsys_sizes(200_000, np.random.default_rng(2))
    assert sizes.min() >= 1 and sizes.max() <= 999
    assert sizes.mean() == pytest.approx(239, rel=0.02)
    assert np.median(sizes) == pytest.approx(178, abs=3)
    assert np.mean(sizes >= 600) == pytest.approx(5 / 99, rel=0.05)
    assert np.mean(sizes < 100) == pytest.approx(8 / 99, rel=0.05)


def test_truncated_gaussian_stays_in_bounds():
    sizes = truncated_gaussian_sizes(50_000, np.random.default_rng(3), mean=300, std=100, low=1, high=1000)
    assert sizes.min() >= 1 and sizes.max() <= 1000 and sizes.dtype == np.int64
    assert sizes.mean() == pytest.approx(300, rel=0.02)
    narrow = truncated_gaussian_sizes(1000, np.random.default_rng(3), mean=0, std=100, low=1, high=50)
    assert narrow.min() >= 1 and narrow.max() <= 50


def test_poisson_workload_is_seeded():
    make = poisson_workload(
        num_queries=100, sizes=deeprecsys_sizes, application="a", slo_ms=10.0, candidate_variants=("a",)
    )
    a, b = make(5.0, np.random.default_rng(9)), make(5.0, np.random.default_rng(9))
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    np.testing.assert_array_equal(a.batch_size, b.batch_size)
    assert len(a) == 100 and a.slo_ms == 10.0
