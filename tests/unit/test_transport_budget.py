"""`TransportBudget`: the quantile of each hop around a batch's compute, learnt online, stalls left out."""
from __future__ import annotations

import numpy as np
import pytest

from shared.serving.transport_budget import TransportBudget, without_stalls


def test_before_enough_batches_the_prior_is_reserved() -> None:
    budget = TransportBudget(prior_s=0.030, min_samples=32, refit_every=8)
    for _ in range(31):
        budget.observe(start_s=0.001, answer_s=0.001)
    assert budget.reserve_s == 0.030
    budget.observe(start_s=0.001, answer_s=0.001)
    assert budget.reserve_s == pytest.approx(0.002)


def test_the_reserve_is_a_high_quantile_of_each_hop_over_a_bounded_window() -> None:
    rng = np.random.default_rng(0)
    budget = TransportBudget(quantile=0.95, window=512, refit_every=16, min_samples=16)
    starts, answers = rng.uniform(0.001, 0.005, 2000), rng.uniform(0.002, 0.010, 2000)
    for start, answer in zip(starts, answers):
        budget.observe(start_s=start, answer_s=answer)
    quantiles = budget.quantiles_ms()
    assert quantiles["start"] == pytest.approx(1000 * np.quantile(starts[-512:], 0.95), rel=0.05)
    assert quantiles["answer"] == pytest.approx(1000 * np.quantile(answers[-512:], 0.95), rel=0.05)
    assert budget.reserve_s == pytest.approx(sum(quantiles.values()) / 1000.0)


def test_a_stall_is_counted_not_reserved() -> None:
    delays = [0.002] * 200 + [0.8] * 3
    assert len(without_stalls(delays)) == 200
    budget = TransportBudget(quantile=1.0, refit_every=1, min_samples=1)
    for delay in delays:
        budget.observe(start_s=delay, answer_s=0.002)
    assert budget.quantiles_ms()["start"] == pytest.approx(2.0) and budget.stalls["start"] == 3
