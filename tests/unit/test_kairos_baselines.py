"""Ribbon, DRS, Clockwork, Oracle and the homogeneous reference (spec §7 items 18, 20)."""
import numpy as np
import pytest

from shared.kairos import LatencyTable
from shared.kairos.baselines import (
    ClockworkDispatch,
    DrsDispatch,
    RibbonDispatch,
    hill_climb_threshold,
    homogeneous_fleet,
    oracle_throughput,
)
from shared.profiles.format import DeviceType, ProfileSet, VariantProfile
from shared.sim import Workload, make_fleet, simulate
from tests.unit.kairos_helpers import QOS, dispatched, query, worker

PROFILES = ProfileSet(
    source="test",
    devices=[DeviceType(name="gpu", kind="gpu", price_per_hour=1.0),
             DeviceType(name="cpu", kind="cpu", price_per_hour=0.2)],
    slo_ms={"m": QOS},
    variants=[
        VariantProfile(variant="m", family="m", device="gpu", batch_latency_ms={10: 10.0, 100: 40.0}, max_batch=100),
        VariantProfile(variant="m", family="m", device="cpu", batch_latency_ms={10: 20.0, 100: 200.0}, max_batch=100),
    ],
)





def test_ribbon_is_fcfs_with_base_first():
    policy = RibbonDispatch(preferred_devices=["gpu", "cpu"])
    decision = policy.decide(0.0, [query(0, 100), query(1, 10), query(2, 10)], [worker("c", "cpu"), worker("g", "gpu")])
    assert dispatched(decision) == {"0": "g", "1": "c"}  # head to the GPU, next to the CPU, QoS ignored


def test_drs_threshold_splits_the_pools():
    policy = DrsDispatch(threshold=50, base_devices={"gpu"})
    queue = [query(0, 10), query(1, 100), query(2, 20)]
    assert dispatched(policy.decide(0.0, queue, [worker("g", "gpu"), worker("c", "cpu")])) == {"0": "c", "1": "g"}
    # only the GPU idle: small queries wait for the CPU pool
    assert dispatched(policy.decide(0.0, queue, [worker("g", "gpu"), worker("c", "cpu", 5.0)])) == {"1": "g"}
    # a fleet without auxiliaries serves everything on the base
    assert dispatched(policy.decide(0.0, queue[:1], [worker("g", "gpu")])) == {"0": "g"}


def test_clockwork_commits_each_query_to_one_instance_queue():
    policy = ClockworkDispatch(PROFILES)
    # GPU busy for 50 ms: large query finishes at 90 on the GPU (meets QoS) vs 200 on the idle CPU
    fleet = [worker("g", "gpu", 50.0), worker("c", "cpu")]
    assert policy.decide(0.0, [query(0, 100)], fleet).assignments == ()
    # a small query arriving next: GPU tail is now 90 -> 100 (late); CPU 20 -> goes to the CPU
    decision = policy.decide(0.001, [query(0, 100), query(1, 10)], fleet)
    assert dispatched(decision) == {"1": "c"}
    # the committed large query stays with the GPU even when the CPU is idle again
    assert policy.decide(0.03, [query(0, 100)], [worker("g", "gpu", 20.0), worker("c", "cpu")]).assignments == ()
    assert dispatched(policy.decide(0.05, [query(0, 100)], [worker("g", "gpu"), worker("c", "cpu")])) == {"0": "g"}


def test_clockwork_falls_back_to_earliest_completion_when_nothing_meets_qos():
    policy = ClockworkDispatch(PROFILES)
    fleet = [worker("g", "gpu", 95.0), worker("c", "cpu", 30.0)]
    policy.decide(0.0, [query(0, 100)], fleet)  # GPU 135 vs CPU 230: both late -> GPU, the earliest
    assert dispatched(policy.decide(0.1, [query(0, 100)], [worker("g", "gpu"), worker("c", "cpu")])) == {"0": "g"}


def test_baselines_run_on_the_simulator():
    load = Workload(np.linspace(0, 0.5, 40), np.tile([10, 100], 20), "m", QOS, ("m",))
    fleet = make_fleet({"gpu": 1, "cpu": 2}, ["m"], max_batch=100)
    for policy in (RibbonDispatch(preferred_devices=["gpu"]), DrsDispatch(threshold=50, base_devices={"gpu"}),
                   ClockworkDispatch(PROFILES)):
        result = simulate(load, fleet, policy, PROFILES)
        # the core drops what can no longer finish in time; everything else is served
        assert result.success and result.num_served + len(result.dropped) == 40 and result.num_served >= 30


def test_oracle_serves_sorted_sequence_without_waiting():
    table = LatencyTable.from_profiles(PROFILES, "m")
    # sizes sorted: 10, 10, 100, 100. GPU takes 100 (40) then 100 (40) = 80 ms; the CPU takes 10 (20) and 10
    # (20) = 40 ms; the CPU never takes a 100 (200 ms > QoS)
    result = oracle_throughput(np.array([100, 10, 100, 10]), {"gpu": 1, "cpu": 1}, table, qos_ms=QOS,
                               base_devices={"gpu"})
    assert result.makespan_s == pytest.approx(0.080)
    assert result.throughput_qps == pytest.approx(4 / 0.080)
    assert result.num_on_auxiliary == 2
    # with only large queries the CPU retires at once and the GPU serves everything
    only_large = oracle_throughput(np.array([100] * 3), {"gpu": 1, "cpu": 1}, table, qos_ms=QOS, base_devices={"gpu"})
    assert only_large.num_on_auxiliary == 0 and only_large.makespan_s == pytest.approx(0.120)


def test_hill_climb_finds_the_peak_on_the_grid():
    seen = []

    def value(t):
        seen.append(t)
        return -abs(t - 430)

    result = hill_climb_threshold(value, start=200)
    assert result.threshold == 430 and result.value == 0
    assert len(seen) == len(set(seen)) < 20  # each point once, far fewer than the 101-point grid


def test_homogeneous_reference_scales_to_the_budget():
    fleet = homogeneous_fleet(0.526, 2.5)
    assert fleet.count == 4 and fleet.scale == pytest.approx(2.5 / 2.104)
    with pytest.raises(ValueError, match="budget"):
        homogeneous_fleet(0.526, 0.5)
