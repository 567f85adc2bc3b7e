"""Capacity rule and the batching policies of `shared.proteus.batching`."""
from __future__ import annotations

import pytest

from shared.policy.base import PendingQuery, WorkerView
from shared.profiles.format import DeviceType, ProfileSet, VariantProfile
from shared.proteus.batching import (
    AimdBatching,
    FixedBatching,
    NexusBatching,
    ProteusBatching,
    TimerBatching,
    make_batching,
)
from shared.proteus.capacity import max_batch_size, peak_throughput

LAT = {1: 10.0, 2: 15.0, 4: 25.0, 8: 45.0}


def profiles(latency=LAT) -> ProfileSet:
    return ProfileSet(source="test", devices=[DeviceType(name="cpu", kind="cpu", price_per_hour=0.0)],
                      variants=[VariantProfile(variant="m", family="f", device="cpu", batch_latency_ms=latency,
                                               max_batch=max(latency))])


def worker(*, inflight: int = 0, available_at: float = 0.0, max_batch: int = 64) -> WorkerView:
    return WorkerView("w", "cpu", ("m",), inflight, 0.0, available_at, max_batch)


def queries(*arrivals: float, slo_ms: float = 100.0) -> list[PendingQuery]:
    return [PendingQuery(str(i), "app", 1, a, slo_ms, ("m",)) for i, a in enumerate(arrivals)]


def vp(latency: dict[int, float], **kw) -> VariantProfile:
    return VariantProfile(variant="v", family="f", device="d", batch_latency_ms=latency, max_batch=max(latency), **kw)


# -- capacity (spec §3.3 worked examples, SLO 300 ms) -------------------------------------------------
def test_capacity_fixtures_from_the_artifact() -> None:
    assert max_batch_size(vp({1: 96.9, 2: 192.1}), 300.0) == 1                       # resnet50, CPU
    assert peak_throughput(vp({1: 96.9, 2: 192.1}), 300.0) == pytest.approx(1000 / 96.9)
    assert peak_throughput(vp({1: 26.7, 8: 145.9}), 300.0) == pytest.approx(8000 / 145.9)  # resnet50, 1080 Ti
    assert peak_throughput(vp({1: 239.6}), 300.0) == 0.0                              # efficientnet-b7, CPU
    assert int(peak_throughput(vp({1: 1.7, 8: 10.76}), 300.0)) == 743                 # bert-base, 1080 Ti


def test_capacity_rule_is_strict_and_respects_memory_and_batch_sizes() -> None:
    assert max_batch_size(vp({1: 50.0, 2: 100.0}), 200.0) == 1  # latency must be < SLO/2
    assert max_batch_size(vp({1: 10.0, 2: 12.0}, peak_memory_mb=900.0), 200.0, memory_mb=512.0) == 0
    assert max_batch_size(vp({1: 10.0, 2: 12.0}, peak_memory_mb=400.0), 200.0, memory_mb=512.0) == 2
    assert max_batch_size(vp({1: 10.0, 2: 12.0, 4: 14.0}), 200.0, batch_sizes=[1, 2]) == 2


# -- Proteus ------------------------------------------------------------------------------------------
def test_proteus_waits_for_one_more_query() -> None:
    policy, w = ProteusBatching(profiles()), worker()
    q = queries(0.0)
    assert policy.batch_rows(0.0, q, w, "m") == 0
    assert policy.wake_at_s(0.0, q, w, "m") == pytest.approx(0.1 - 0.015)  # T_exp(1) - T_proc(2)
    assert policy.batch_rows(0.084, q, w, "m") == 0
    assert policy.batch_rows(0.085, q, w, "m") == 1


def test_proteus_case_two() -> None:
    policy, w = ProteusBatching(profiles()), worker()
    q = queries(0.0, 0.05)
    # 2 queued: the next wait is T_exp(1) - T_proc(3) = 0.1 - T(4) = 0.075
    assert policy.batch_rows(0.05, q, w, "m") == 0
    assert policy.wake_at_s(0.05, q, w, "m") == pytest.approx(0.075)
    assert policy.batch_rows(0.08, q, w, "m") == 2


def test_proteus_runs_b_max_at_once() -> None:
    policy, w = ProteusBatching(profiles()), worker()
    # SLO 100 ms: B_max is 4 (T(4) = 25 < 50, T(8) = 45 < 50 -> 8); SLO 80: T(8) = 45 >= 40 -> 4
    q = queries(*[0.0] * 6, slo_ms=80.0)
    assert policy.max_rows(w, "m", 80.0) == 4
    assert policy.batch_rows(0.0, q, w, "m") == 4
    assert policy.wake_at_s(0.0, q, w, "m") is None


def test_proteus_never_exceeds_worker_max_batch() -> None:
    policy = ProteusBatching(profiles())
    assert policy.batch_rows(0.0, queries(*[0.0] * 8), worker(max_batch=2), "m") == 2


def test_drop_rules() -> None:
    w = worker()
    q = queries(0.0, 0.0, 0.0, 0.0, 0.03)
    # alone, a head needs 10 ms (deadline 0.1); at 0.08 in the batch the queue forms it misses:
    # 5 queued -> T(8) = 45 ms, 4 -> T(4) = 25, 3 -> T(4) = 25 all miss; 2 -> T(2) = 15 makes it
    assert ProteusBatching(profiles(), drop="alone").num_hopeless(0.08, q, w, "m") == 0
    assert ProteusBatching(profiles(), drop="alone").num_hopeless(0.091, q, w, "m") == 4
    assert ProteusBatching(profiles()).num_hopeless(0.08, q, w, "m") == 3
    assert NexusBatching(profiles()).num_hopeless(0.08, q, w, "m") == 3
    assert ProteusBatching(profiles(), drop="lazy").num_hopeless(0.19, q, w, "m") == 0
    assert ProteusBatching(profiles(), drop="lazy").num_hopeless(0.201, q, w, "m") == 4


def test_no_dispatched_query_misses_when_load_fits() -> None:
    """Checklist 19: idle worker, queries as profiled -> every batch the policy starts finishes in time."""
    policy, w = ProteusBatching(profiles()), worker()
    q = queries(0.0, 0.01, 0.02)
    for now in [0.0, 0.01, 0.02, 0.05, 0.06, 0.07, 0.075, 0.08]:
        rows = policy.batch_rows(now, q, w, "m")
        if rows:
            assert now + policy.latency_s(w, "m", rows) <= 0.1 + 1e-9
            break
    else:
        pytest.fail("the batch never started")


# -- baselines ----------------------------------------------------------------------------------------
def test_nexus_is_work_conserving() -> None:
    assert NexusBatching(profiles()).batch_rows(0.0, queries(0.0), worker(), "m") == 1


def test_aimd_steps_through_profiled_sizes() -> None:
    policy = AimdBatching(profiles())
    q = queries(*[0.0] * 8, slo_ms=1000.0)
    assert policy.batch_rows(0.0, q, worker(), "m") == 1
    assert policy.batch_rows(0.02, q, worker(available_at=0.01), "m") == 2   # full and on time: up
    assert policy.batch_rows(0.04, q, worker(available_at=0.03), "m") == 4
    assert policy.batch_rows(2.0, q, worker(available_at=1.5), "m") == 2      # late (deadline 1.0): down
    fresh = queries(*[2.0] * 8, slo_ms=1000.0)
    assert policy.batch_rows(2.1, fresh[:1], worker(available_at=2.05), "m") == 1  # on time, not full
    assert policy.batch_rows(2.2, fresh, worker(available_at=2.15), "m") == 2      # so the limit stayed


def test_fixed_and_timer() -> None:
    assert FixedBatching(profiles(), size=1).batch_rows(0.0, queries(0.0, 0.0), worker(), "m") == 1
    timer = TimerBatching(profiles())
    q = queries(0.0)
    assert timer.batch_rows(0.0, q, worker(), "m") == 0
    assert timer.wake_at_s(0.0, q, worker(), "m") == pytest.approx(0.1 - 0.045)  # T_exp - T(B_max = 8)
    assert timer.batch_rows(0.055, q, worker(), "m") == 1


def test_make_batching_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="`batching`"):
        make_batching("fifo", profiles())
    with pytest.raises(ValueError, match="`drop`"):
        ProteusBatching(profiles(), drop="never")
