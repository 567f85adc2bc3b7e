"""The VM-Autoscaler (INFaaS §4.2.3): each rule fires exactly when it should; requests; idle scale-down."""
from dataclasses import replace

import pytest

from shared.autoscale import (
    Application,
    AutoscaleState,
    InstanceSpec,
    InstanceStatus,
    MachineCatalogue,
    ScaleActions,
    VariantOption,
    VmAutoscaler,
    VmConfig,
    WorkerStatus,
    WorkerType,
)
from shared.infaas.records import VariantRecord
from shared.infaas.state import InstanceState

A, O, X = InstanceState.ACTIVE, InstanceState.OVERLOADED, InstanceState.INTERFERED


def catalogue():
    cpu = WorkerType("cpu-vm", "cpu", 0.32, {"vcpu": 8})
    big_cpu = WorkerType("cpu-big", "cpu", 0.64, {"vcpu": 16})
    gpu = WorkerType("gpu-vm", "gpu", 0.526, {"vcpu": 4, "gpu": 1})
    options = (VariantOption(VariantRecord("m", "f", "cpu-vm", batch_latency_ms=((1, 10.0),)), "m", {"vcpu": 3}, 0.12),
               VariantOption(VariantRecord("m", "f", "gpu-vm", batch_latency_ms=((1, 2.0),)), "m", {"gpu": 1}, 0.526))
    return MachineCatalogue((cpu, big_cpu, gpu), options, (Application("app", "f", 50.0),))


def w(worker_id, utilization=0.5, states=(A,), device="cpu-vm", ready=True):
    return WorkerStatus(worker_id, device, ready=ready, utilization=utilization,
                        instances=tuple(InstanceStatus("m", "app", state=s) for s in states))


def started(actions):
    return [(s.device, s.reason.split(":")[0]) for s in actions.start]


@pytest.mark.parametrize("utilizations, fires", [((0.81, 0.85), True), ((0.81, 0.79), False), ((0.8, 0.9), False)])
def test_rule1_utilization_above_80_percent_on_every_worker_of_the_kind(utilizations, fires):
    vm = VmAutoscaler(catalogue())
    workers = [w(f"c{k}", u) for k, u in enumerate(utilizations)] + [w("g0", 0.1, device="gpu-vm")]
    assert started(vm.decide(AutoscaleState(0.0, tuple(workers)))) == ([("cpu-vm", "rule 1")] if fires else [])


def test_rule1_starts_the_configured_type_else_the_cheapest_of_the_kind():
    busy = AutoscaleState(0.0, (w("c0", 0.9),))
    assert started(VmAutoscaler(catalogue()).decide(busy)) == [("cpu-vm", "rule 1")]
    big = VmAutoscaler(catalogue(), config=VmConfig(scale_out={"cpu": "cpu-big"}))
    assert started(big.decide(busy)) == [("cpu-big", "rule 1")]


@pytest.mark.parametrize("states, fires", [(((X,), (A, X)), True), (((X,), (A,)), False)])
def test_rule2_interfered_variants_on_every_worker_of_the_kind(states, fires):
    vm = VmAutoscaler(catalogue())
    workers = tuple(w(f"c{k}", 0.3, s) for k, s in enumerate(states))
    assert started(vm.decide(AutoscaleState(0.0, workers))) == ([("cpu-vm", "rule 2")] if fires else [])


@pytest.mark.parametrize("num_overloaded, fires", [(4, False), (5, True)])
def test_rule3_more_than_80_percent_of_workers_overloaded(num_overloaded, fires):
    vm = VmAutoscaler(catalogue())
    workers = [w("g0", 0.5, (O, O), device="gpu-vm")] + [w(f"c{k}", 0.5, (O,)) for k in range(num_overloaded - 1)]
    workers += [w(f"c{k}", 0.5, (A,)) for k in range(num_overloaded - 1, 4)]
    assert len(workers) == 5
    # 4 of 5 is exactly 80%: not more; with 5 of 5 the CPU workers hold 4 Overloaded instances, the GPU 2
    expected = [("cpu-vm", "rule 3")] if fires else []
    assert started(vm.decide(AutoscaleState(0.0, tuple(workers)))) == expected


def test_rule3_adds_the_kind_with_the_most_overloaded_instances():
    vm = VmAutoscaler(catalogue())
    workers = (w("g0", 0.5, (O, O, O), device="gpu-vm"), w("c0", 0.5, (O,)))
    assert started(vm.decide(AutoscaleState(0.0, workers))) == [("gpu-vm", "rule 3")]


def test_no_rule_fires_for_a_kind_while_one_of_its_workers_boots():
    vm = VmAutoscaler(catalogue())
    workers = (w("c0", 0.95, (X, O)), w("c1", 0.0, (), ready=False))
    assert started(vm.decide(AutoscaleState(0.0, workers))) == []


def test_requests_become_machines_packed_first_fit():
    vm = VmAutoscaler(catalogue(), config=VmConfig(max_workers=10))
    requests = [("cpu-vm", InstanceSpec("m", "app"))] * 5 + [("gpu-vm", InstanceSpec("m", "app"))]
    actions = vm.decide(AutoscaleState(0.0, (w("c0", 0.2),)), requests=requests)
    assert [(s.device, len(s.instances)) for s in actions.start] == [("cpu-vm", 2), ("cpu-vm", 2), ("cpu-vm", 1),
                                                                     ("gpu-vm", 1)]
    assert len({s.worker_id for s in actions.start} | {"c0"}) == 5
    capped = VmAutoscaler(catalogue(), config=VmConfig(max_workers=2)).decide(
        AutoscaleState(0.0, (w("c0", 0.2),)), requests=requests)
    assert len(capped.start) == 1


def test_idle_worker_stops_after_idle_stop_s_never_below_min_workers():
    vm = VmAutoscaler(catalogue(), config=VmConfig(idle_stop_s=6.0, min_workers=1))  # 3 polls of 2 s
    fleet = AutoscaleState(0.0, (w("c0", 0.3), w("c1", 0.0, ()), w("c2", 0.0, ())))
    assert [vm.decide(fleet).stop for _ in range(2)] == [(), ()]
    assert sorted(s.worker_id for s in vm.decide(fleet).stop) == ["c1", "c2"]
    alone = VmAutoscaler(catalogue(), config=VmConfig(idle_stop_s=0.0, min_workers=1))
    assert alone.decide(AutoscaleState(0.0, (w("c0", 0.0, ()),))).stop == ()
    both = alone.decide(AutoscaleState(0.0, (w("c0", 0.0, ()), w("c1", 0.0, ()))), loading=["c1"])
    assert [s.worker_id for s in both.stop] == ["c0"]  # c1 just got a load


def test_an_idle_worker_stays_while_every_other_worker_of_its_kind_is_busy():
    """Stopping it would fire rule 1 at the next poll: the machine given back would boot again."""
    vm = VmAutoscaler(catalogue(), config=VmConfig(idle_stop_s=0.0))
    busy = AutoscaleState(0.0, (w("c0", 0.9), w("c1", 0.85), w("spare", 0.0, ())))
    assert vm.decide(busy) == ScaleActions()
    eased = AutoscaleState(0.0, (w("c0", 0.9), w("c1", 0.5), w("spare", 0.0, ())))
    assert [s.worker_id for s in vm.decide(eased).stop] == ["spare"]


@pytest.mark.parametrize(("startup_s", "polls"), [(25.0, 13), (10.0, 5), (0.0, 1)])
def test_idle_worker_waits_as_long_as_its_type_boots_by_default(startup_s, polls):
    """The VM-level T_v: a machine idle for as long as a new one takes to boot is given back."""
    cat = catalogue()
    cat = MachineCatalogue(tuple(replace(t, startup_s=startup_s) for t in cat.worker_types), cat.options,
                           cat.applications)
    vm = VmAutoscaler(cat)
    fleet = AutoscaleState(0.0, (w("c0", 0.3), w("c1", 0.0, ())))
    stops = [vm.decide(fleet).stop for _ in range(polls)]
    assert stops[:-1] == [()] * (polls - 1)
    assert [s.worker_id for s in stops[-1]] == ["c1"]


def test_config_is_validated():
    with pytest.raises(ValueError, match="`utilization_threshold`"):
        VmConfig(utilization_threshold=1.5)
    with pytest.raises(ValueError, match="`idle_stop_s`"):
        VmConfig(idle_stop_s=-1.0)
    with pytest.raises(ValueError, match="`scale_out`"):
        VmAutoscaler(catalogue(), config=VmConfig(scale_out={"cpu": "nope"}))
