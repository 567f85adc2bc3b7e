"""The autoscaling simulator: machine and model delays, accounting, and INFaaS, SM+ and Clipper+ run in it."""
import numpy as np
import pytest

from shared.autoscale import (
    Application,
    BaseAutoscaler,
    Catalogue,
    InfaasAutoscaler,
    InstanceSpec,
    LoadInstance,
    ScaleActions,
    SmPlusAutoscaler,
    StartWorker,
    StaticAutoscaler,
    VariantOption,
    WorkerType,
    make_autoscaler,
    pin,
    provision_for_peak,
)
from shared.infaas.records import VariantRecord
from shared.sim.autoscaling import Slowdown, simulate_autoscaling

CPU, GPU = ("m", "cpu-vm"), ("m", "gpu-vm")


def catalogue():
    cpu = WorkerType("cpu-vm", "cpu", 0.32, {"vcpu": 8}, startup_s=20.0)
    gpu = WorkerType("gpu-vm", "gpu", 0.526, {"vcpu": 4, "gpu": 1}, startup_s=20.0)
    options = (
        VariantOption(VariantRecord("m", "f", "cpu-vm", batch_latency_ms=((1, 10.0), (2, 19.0)), max_batch=2,
                                    load_latency_ms=500.0), "m", {"vcpu": 1}, 0.04),
        VariantOption(VariantRecord("m", "f", "gpu-vm", batch_latency_ms=((1, 2.0), (8, 8.0)), max_batch=8,
                                    load_latency_ms=800.0), "m", {"gpu": 1}, 0.526),
    )
    return Catalogue((cpu, gpu), options, (Application("app", "f", 100.0),))


def poisson(rate, duration, seed=0):
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.exponential(1.0 / rate, int(rate * duration * 1.2)))
    return times[times < duration]


class Script(BaseAutoscaler):
    """Returns the actions planned for each poll time."""

    name = "script"

    def __init__(self, catalogue, plan):
        super().__init__(catalogue)
        self.plan = dict(plan)

    def step(self, state, now_s):
        return self.plan.pop(now_s, ScaleActions())


def test_new_machines_serve_after_startup_plus_load_latency_and_bill_from_the_request():
    cat = catalogue()
    script = Script(cat, {0.0: ScaleActions(start=(StartWorker("w1", "cpu-vm", (InstanceSpec("m", "app"),)),))})
    result = simulate_autoscaling(cat, {"app": np.array([1.0, 30.0])}, script, initial_fleet=(), duration_s=40.0,
                                  timeout_factor=1000.0)
    # the first query waits for the machine (20 s) and the variant (0.5 s), then runs 10 ms
    assert result.finish_s.tolist() == pytest.approx([20.51, 30.01])
    assert result.slo_violation_ratio == pytest.approx(0.5)
    assert result.cost().dollars == pytest.approx(0.32 * 40.0 / 3600.0)
    script = Script(cat, {0.0: ScaleActions(start=(StartWorker("w1", "cpu-vm", (InstanceSpec("m", "app"),)),))})
    impatient = simulate_autoscaling(cat, {"app": np.array([1.0, 30.0])}, script, initial_fleet=(), duration_s=40.0)
    assert impatient.dropped.tolist() == [True, False]  # waited past 4 x the 100 ms SLO


def test_loads_and_unloads_take_effect_with_the_profiled_latency():
    cat = catalogue()
    fleet = [StartWorker("w1", "cpu-vm", (InstanceSpec("m", "app"),))]
    script = Script(cat, {1.0: ScaleActions(loads=(LoadInstance("w1", "m", "app"),))})
    arrivals = np.array([1.2, 1.2, 1.6, 1.6])
    result = simulate_autoscaling(cat, {"app": arrivals}, script, initial_fleet=fleet, duration_s=5.0)
    # at 1.2 s one instance serves both in turn (no waiting to batch); at 1.6 s the second one, ready at
    # 1.5 s, takes one of the pair
    assert result.finish_s.tolist() == pytest.approx([1.21, 1.22, 1.61, 1.61])


def test_every_policy_runs_in_the_simulator_and_is_accounted():
    cat = catalogue()
    arrivals = {"app": np.concatenate([poisson(80, 60, seed=1), 60 + poisson(400, 60, seed=2)])}
    start = [StartWorker("w0", "cpu-vm", (InstanceSpec("m", "app"),))]
    runs = {
        "infaas": simulate_autoscaling(cat, arrivals, make_autoscaler("infaas", cat), initial_fleet=start,
                                       duration_s=120.0),
        "sm_plus": simulate_autoscaling(cat, arrivals, SmPlusAutoscaler(cat, {"app": CPU}), initial_fleet=start,
                                        duration_s=120.0),
        "clipper_plus": simulate_autoscaling(cat, arrivals, StaticAutoscaler(pin(cat, {"app": GPU})),
                                             initial_fleet=provision_for_peak(pin(cat, {"app": GPU}), {"app": 400}),
                                             duration_s=120.0),
    }
    offered = len(arrivals["app"]) / 120.0
    for name, result in runs.items():
        assert result.num_queries == len(arrivals["app"])
        assert result.throughput_qps == pytest.approx(offered, rel=0.05), name
        assert 0.0 <= result.slo_violation_ratio < 0.2, name
        assert len(result.decision_ms) == 121
    assert runs["clipper_plus"].cost().dollars == pytest.approx(0.526 * 120 / 3600)
    assert not runs["clipper_plus"].actions
    assert runs["infaas"].actions["load"] > 0 and runs["sm_plus"].actions["load"] > 0
    gpu_loads = [w for _, device, w in runs["sm_plus"].workers if device == "gpu-vm"]
    assert not gpu_loads  # SM+ never leaves its pinned CPU variant
    assert runs["infaas"].cost().dollars < runs["clipper_plus"].cost().dollars


def test_a_noisy_neighbour_is_detected_and_its_instances_moved():
    cat = catalogue()
    arrivals = {"app": poisson(120, 60, seed=3)}
    start = [StartWorker("w0", "cpu-vm", (InstanceSpec("m", "app"),) * 3)]
    noisy = Slowdown("cpu-vm", 20.0, 40.0, 3.0)
    result = simulate_autoscaling(cat, arrivals, InfaasAutoscaler(cat), initial_fleet=start, duration_s=60.0,
                                  slowdowns=[noisy])
    assert result.actions["load:interfered"] > 0
    calm = simulate_autoscaling(cat, arrivals, InfaasAutoscaler(cat), initial_fleet=start, duration_s=60.0)
    assert calm.actions["load:interfered"] == 0


def test_runs_are_deterministic():
    cat = catalogue()
    arrivals = {"app": poisson(150, 30, seed=4)}
    start = [StartWorker("w0", "cpu-vm", (InstanceSpec("m", "app"),))]
    first, second = (simulate_autoscaling(cat, arrivals, InfaasAutoscaler(cat), initial_fleet=start, duration_s=30.0)
                     for _ in range(2))
    np.testing.assert_array_equal(first.finish_s, second.finish_s)
    assert first.workers == second.workers


def test_bad_actions_and_inputs_raise():
    cat = catalogue()
    full = [StartWorker("w0", "gpu-vm", (InstanceSpec("m", "app"),))]
    script = Script(cat, {0.0: ScaleActions(loads=(LoadInstance("w0", "m", "app"),))})
    with pytest.raises(ValueError, match="lacks resources"):
        simulate_autoscaling(cat, {"app": np.array([1.0])}, script, initial_fleet=full, duration_s=2.0)
    with pytest.raises(ValueError, match="`workloads`"):
        simulate_autoscaling(cat, {"other": np.array([1.0])}, StaticAutoscaler(cat), initial_fleet=full)
