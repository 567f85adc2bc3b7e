"""Cost accounting, instance prices, the plan view of a fleet, and interference detection."""
import pytest

from shared.autoscale import (
    Application,
    AutoscaleState,
    InstanceSpec,
    InstanceStatus,
    LoadInstance,
    MachineCatalogue,
    ScaleActions,
    StartWorker,
    StopWorker,
    UnloadInstance,
    WorkerInterval,
    WorkerStatus,
    WorkerType,
    fleet_cost_per_hour,
    latency_ratio,
    observe,
    period_cost,
    serving_catalogue,
    to_fleet_plan,
)
from shared.autoscale.ledger import FleetLedger
from shared.infaas.state import InstanceState, StateThresholds
from shared.policy.base import PlanStatus
from shared.profiles.format import DeviceType, ProfileSet, VariantProfile


def catalogue():
    profiles = ProfileSet(
        source="test", devices=[DeviceType(name="cpu-vm", kind="cpu", price_per_hour=0.32),
                                DeviceType(name="gpu-vm", kind="gpu", price_per_hour=0.5)],
        variants=[VariantProfile(variant="m", family="f", device="cpu-vm", batch_latency_ms={1: 10.0, 4: 20.0},
                                 peak_memory_mb=4096.0, max_batch=4),
                  VariantProfile(variant="m", family="f", device="gpu-vm", batch_latency_ms={1: 2.0, 8: 4.0},
                                 peak_memory_mb=1000.0, max_batch=8)])
    workers = [WorkerType("cpu-vm", "cpu", 0.32, {"vcpu": 8, "memory_mb": 16384}),
               WorkerType("gpu-vm", "gpu", 0.5, {"vcpu": 4, "memory_mb": 16384, "gpu": 1})]
    return MachineCatalogue.from_profiles(profiles, workers, [Application("app", "f", 50.0)])


def test_period_cost_bills_overlaps_and_running_workers():
    intervals = [WorkerInterval(0.36, 0.0, 1800.0), WorkerInterval(0.72, 900.0), WorkerInterval(1.0, -600.0, 600.0)]
    report = period_cost(intervals, start_s=0.0, end_s=3600.0, num_queries=2000)
    # 0.36 x 0.5 h + 0.72 x 0.75 h + 1.0 x (10 min inside the period)
    assert report.dollars == pytest.approx(0.18 + 0.54 + 1.0 / 6.0)
    assert report.worker_hours == pytest.approx(0.5 + 0.75 + 1.0 / 6.0)
    assert report.dollars_per_1k_queries == pytest.approx(report.dollars / 2.0)
    assert report.dollars_per_hour == pytest.approx(report.dollars)
    assert period_cost([], start_s=0.0, end_s=10.0, num_queries=0).dollars_per_1k_queries is None
    with pytest.raises(ValueError, match="`start_s`"):
        period_cost([], start_s=5.0, end_s=1.0, num_queries=0)


def test_instance_cost_is_the_dominant_share_of_its_worker():
    cat = catalogue()
    assert cat.option[("m", "cpu-vm")].cost_per_hour == pytest.approx(0.32 * 4096 / 16384)  # memory dominates 1/8
    assert cat.option[("m", "gpu-vm")].cost_per_hour == pytest.approx(0.5)
    assert dict(cat.option[("m", "cpu-vm")].needs) == {"vcpu": 1.0, "memory_mb": 4096.0}


def fleet():
    return AutoscaleState(0.0, (
        WorkerStatus("c1", "cpu-vm", instances=(InstanceStatus("m", "app"), InstanceStatus("m", "app"))),
        WorkerStatus("g1", "gpu-vm", ready=False, instances=(InstanceStatus("m", "app", ready=False),)),
    ), {"app": 100.0})


def test_fleet_cost_counts_booting_workers_and_actions():
    cat = catalogue()
    assert fleet_cost_per_hour(fleet(), cat) == pytest.approx(0.82)
    actions = ScaleActions(start=(StartWorker("c2", "cpu-vm"),), stop=(StopWorker("g1"),))
    assert fleet_cost_per_hour(fleet(), cat, actions) == pytest.approx(0.64)


def test_fleet_plan_has_one_placement_per_worker_routing_by_capacity_and_the_price():
    cat = catalogue()
    actions = ScaleActions(loads=(LoadInstance("c2", "m", "app"),), unloads=(UnloadInstance("c1", "m", "app"),),
                           start=(StartWorker("c2", "cpu-vm", (InstanceSpec("m", "app"),)),))
    plan = to_fleet_plan(fleet(), cat, actions)
    assert plan.status is PlanStatus.FEASIBLE and plan.cost_per_hour == pytest.approx(1.14)
    assert plan.device_counts() == {"cpu-vm": 2, "gpu-vm": 1}
    assert [p.variants for p in plan.placements] == [("m",), ("m",), ("m",)]
    # Q: CPU 4 rows / 20 ms = 200 rows/s (x3 instances), GPU 8 / 4 ms = 2000 rows/s; one variant name
    assert plan.routing == {"app": {"m": pytest.approx(1.0)}}
    empty = to_fleet_plan(AutoscaleState(0.0, (WorkerStatus("c1", "cpu-vm"),), {"app": 5.0}), cat)
    assert empty.status is PlanStatus.DEGRADED and "app" in empty.message


def test_observed_latency_above_profile_marks_interference_with_hysteresis():
    assert observe(InstanceState.ACTIVE, qps=50, peak_qps=100, busy_fraction=0.5, latency_ratio=1.6) \
        is InstanceState.INTERFERED
    assert observe(InstanceState.ACTIVE, qps=50, peak_qps=100, busy_fraction=0.5, latency_ratio=1.4) \
        is InstanceState.ACTIVE
    assert observe(InstanceState.INTERFERED, qps=50, peak_qps=100, busy_fraction=0.5, latency_ratio=1.3) \
        is InstanceState.INTERFERED
    assert observe(InstanceState.INTERFERED, qps=50, peak_qps=100, busy_fraction=0.5, latency_ratio=1.2) \
        is InstanceState.ACTIVE
    # slow because saturated is Overloaded, not Interfered
    assert observe(InstanceState.ACTIVE, qps=100, peak_qps=100, busy_fraction=1.0, latency_ratio=3.0) \
        is InstanceState.OVERLOADED
    strict = StateThresholds(interfered_ratio=1.2, mitigated_ratio=1.1)
    assert observe(InstanceState.ACTIVE, qps=5, peak_qps=100, busy_fraction=0.1, latency_ratio=1.3,
                   thresholds=strict) is InstanceState.INTERFERED


def test_latency_ratio_uses_the_profiled_batch_that_covers_the_mean():
    option = catalogue().option[("m", "cpu-vm")]
    assert latency_ratio(option, mean_latency_ms=30.0, mean_rows=2.5) == pytest.approx(1.5)  # vs the batch-4 20 ms
    assert latency_ratio(option, mean_latency_ms=30.0, mean_rows=5.0) is None  # past max batch
    with pytest.raises(ValueError, match="`mean_rows`"):
        latency_ratio(option, mean_latency_ms=1.0, mean_rows=0.0)


def test_catalogue_rejects_bad_input_naming_it():
    with pytest.raises(ValueError, match="`price_per_hour`"):
        WorkerType("x", "cpu", -1.0, {"vcpu": 1})
    with pytest.raises(ValueError, match="`capacity`"):
        WorkerType("x", "gpu", 1.0, {"vcpu": 4})
    with pytest.raises(ValueError, match="`slo_ms`"):
        Application("a", "f", 0.0)
    cat = catalogue()
    with pytest.raises(ValueError, match="`applications`"):
        cat.with_applications([Application("a", "f", 5.0), Application("a", "f", 6.0)])


def test_the_serving_catalogue_prices_an_instance_as_its_whole_machine():
    """A worker process runs one batch at a time, so the live and simulated autoscalers hold one instance per
    machine (several one-vCPU instances on one process were the churn bench-autoscale measured)."""
    profiles = ProfileSet(
        source="test", devices=[DeviceType(name="cpu-vm", kind="cpu", price_per_hour=0.32, startup_s=20.0),
                                DeviceType(name="gpu-vm", kind="gpu", price_per_hour=0.5)],
        variants=[VariantProfile(variant=v, family="f", device=d, batch_latency_ms={1: 10.0}, max_batch=1)
                  for v in ("m", "n") for d in ("cpu-vm", "gpu-vm")])
    cat = serving_catalogue(profiles, [Application("app", "f", 50.0)], startup_s=5.0)
    assert {o.key: o.cost_per_hour for o in cat.options} == {
        ("m", "cpu-vm"): 0.32, ("n", "cpu-vm"): 0.32, ("m", "gpu-vm"): 0.5, ("n", "gpu-vm"): 0.5}
    assert {w.name: w.startup_s for w in cat.worker_types} == {"cpu-vm": 20.0, "gpu-vm": 5.0}
    state = AutoscaleState(0.0, (WorkerStatus("w1", "cpu-vm", instances=(InstanceStatus("m", "app"),)),))
    # the machine is full: a second variant needs another machine
    assert not FleetLedger(state, cat).fits("w1", cat.option[("n", "cpu-vm")])
