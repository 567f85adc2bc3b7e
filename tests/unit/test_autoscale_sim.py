"""INFaaS autoscaling on the one engine: machine and model delays, the metadata path to the dispatch,
accounting, and INFaaS, SM+ and Clipper+ run through the autoscaler service's loop."""
import math

import numpy as np
import pytest

from shared.autoscale import (
    Application,
    BaseAutoscaler,
    InfaasAutoscaler,
    InstanceSpec,
    LoadInstance,
    MachineCatalogue,
    ScaleActions,
    SmPlusAutoscaler,
    StartWorker,
    StaticAutoscaler,
    UnloadInstance,
    VariantOption,
    WorkerType,
    pin,
    provision_for_peak,
)
from shared.infaas.records import VariantRecord
from shared.policy.registry import make_autoscaler
from shared.serving.core import CoreConfig
from shared.sim.scenarios.autoscaling import Slowdown, serving_profiles, simulate_autoscaling

CPU, GPU = ("m", "cpu-vm"), ("m", "gpu-vm")
#: queries wait for a machine however long it takes
PATIENT = CoreConfig(drop_after_slo_multiple=math.inf)


def catalogue(vcpus=1):
    """A one-vCPU machine is one worker process holding one instance (the live service's default)."""
    cpu = WorkerType("cpu-vm", "cpu", 0.04 * vcpus, {"vcpu": vcpus}, startup_s=20.0)
    gpu = WorkerType("gpu-vm", "gpu", 0.526, {"vcpu": 4, "gpu": 1}, startup_s=20.0)
    options = (
        VariantOption(VariantRecord("m", "f", "cpu-vm", batch_latency_ms=((1, 10.0), (2, 19.0)), max_batch=2,
                                    load_latency_ms=500.0), "m", {"vcpu": 1}, 0.04),
        VariantOption(VariantRecord("m", "f", "gpu-vm", batch_latency_ms=((1, 2.0), (8, 8.0)), max_batch=8,
                                    load_latency_ms=800.0), "m", {"gpu": 1}, 0.526),
    )
    return MachineCatalogue((cpu, gpu), options, (Application("app", "f", 100.0),))


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


def start(worker_id="w1", device="cpu-vm", variants=("m",)):
    return StartWorker(worker_id, device, tuple(InstanceSpec(v, "app") for v in variants))


def test_the_catalogue_becomes_the_profiles_the_engine_and_dispatch_read():
    profiles = serving_profiles(pin(catalogue(), {"app": GPU}), 0.5)
    assert [(p.variant, p.device, p.max_batch) for p in profiles.variants] == [("m", "gpu-vm", 8)], \
        "a baseline's unpinned options are left out, so the dispatch never loads them"
    assert {d.name: (d.price_per_hour, d.startup_s) for d in profiles.devices} == {
        "cpu-vm": (0.04, 20.0), "gpu-vm": (0.526, 20.0)}
    assert profiles.slo_ms == {"f": 100.0}


def test_new_machines_serve_after_startup_plus_load_latency_and_bill_from_the_request():
    cat = catalogue()
    result = simulate_autoscaling({"app": np.array([1.0, 30.0])}, Script(cat, {0.0: ScaleActions(start=(start(),))}),
                                  initial_fleet=(), duration_s=40.0, core=PATIENT)
    # the first query waits for the machine (20 s) and the variant (0.5 s), then runs 10 ms
    assert result.finish_s.tolist() == pytest.approx([20.51, 30.01])
    assert result.slo_violation_ratio == pytest.approx(0.5)
    assert result.cost().dollars == pytest.approx(0.04 * 40.0 / 3600.0)
    impatient = simulate_autoscaling({"app": np.array([1.0, 30.0])},
                                     Script(cat, {0.0: ScaleActions(start=(start(),))}), initial_fleet=(),
                                     duration_s=40.0)
    assert impatient.dropped.tolist() == [True, False], "the core's drop rule: past its SLO while queued"


def test_loads_and_unloads_take_their_profiled_latency_and_the_dispatch_loads_what_it_needs():
    cat = catalogue()
    script = Script(cat, {1.0: ScaleActions(loads=(LoadInstance("w1", "m", "app"),)),
                          3.0: ScaleActions(unloads=(UnloadInstance("w1", "m", "app"),))})
    arrivals = np.array([1.6, 1.6, 1.7, 3.5])
    result = simulate_autoscaling({"app": arrivals}, script, initial_fleet=[start(variants=())], duration_s=5.0,
                                  core=PATIENT)
    # loaded at 1.5 s, it serves the pair at 1.6 s one after the other (the core steps on each arrival); after
    # the unload at 3 s, getVariant finds m Inactive and asks the worker to load it again (0.5 s)
    assert result.finish_s.tolist() == pytest.approx([1.61, 1.62, 1.71, 4.01])
    assert result.actions == {"load": 1, "unload": 1}


class Watching(Script):
    """Records the demand each poll sees."""

    def __init__(self, catalogue):
        super().__init__(catalogue, {})
        self.seen = []

    def step(self, state, now_s):
        self.seen.append((now_s, state.demand_qps.get("app")))
        return ScaleActions()


@pytest.mark.parametrize(("interval_s", "expected"), [
    (1.0, [(1.0, 10.0), (2.0, 20.0), (3.0, 10.0), (4.0, 20.0)]),
    (2.0, [(1.0, None), (2.0, 15.0), (3.0, 15.0), (4.0, 15.0)]),
])
def test_load_statistics_reach_the_autoscaler_at_the_schedulers_interval(interval_s, expected):
    """As the live scheduler publishes them: each interval's arrivals over its span."""
    arrivals = np.concatenate([k + np.linspace(0.05, 0.95, 10 if k % 2 == 0 else 20) for k in range(4)])
    watching = Watching(catalogue())
    simulate_autoscaling({"app": arrivals}, watching, initial_fleet=[start()], duration_s=4.5,
                         load_stats_interval_s=interval_s)
    assert [(t, d) for t, d in watching.seen if 1.0 <= t <= 4.0] == [(t, pytest.approx(d) if d else d)
                                                                     for t, d in expected]


def test_every_policy_runs_and_is_accounted():
    cat = catalogue()
    arrivals = {"app": np.concatenate([poisson(80, 60, seed=1), 60 + poisson(400, 60, seed=2)])}
    runs = {
        "infaas": simulate_autoscaling(arrivals, make_autoscaler("infaas", cat), initial_fleet=[start("w0")],
                                       duration_s=120.0),
        "sm_plus": simulate_autoscaling(arrivals, SmPlusAutoscaler(cat, {"app": CPU}), initial_fleet=[start("w0")],
                                        duration_s=120.0),
        "clipper_plus": simulate_autoscaling(arrivals, StaticAutoscaler(pin(cat, {"app": GPU})),
                                             initial_fleet=provision_for_peak(pin(cat, {"app": GPU}), {"app": 400}),
                                             duration_s=120.0),
    }
    for name, result in runs.items():
        assert result.num_queries == len(arrivals["app"])
        assert len(result.decision_ms) == 121, "polled every second from 0 to 120 s"
    clipper = runs["clipper_plus"]
    assert clipper.slo_violation_ratio < 0.01 and clipper.throughput_qps == pytest.approx(
        len(arrivals["app"]) / 120.0, rel=0.01)
    assert clipper.cost().dollars == pytest.approx(0.526 * 120 / 3600) and not clipper.actions
    demand = runs["infaas"].timeline["demand_qps"]  # the scheduler's load statistics, every 2 s
    assert demand[30] == pytest.approx(80, rel=0.3) and demand[100] == pytest.approx(400, rel=0.15)
    for name in ("infaas", "sm_plus"):
        assert runs[name].actions["start"] > 0 and max(c.get("cpu-vm", 0) for c in runs[name].timeline["workers"]) > 2
        assert runs[name].cost().dollars < clipper.cost().dollars, name
    assert not [w for _, device, w in runs["sm_plus"].workers if device == "gpu-vm"], "SM+ keeps its CPU variant"


def test_a_noisy_neighbour_reaches_the_dispatch_through_the_metadata_store():
    arrivals = {"app": poisson(40, 60, seed=3)}
    noisy = Slowdown("cpu-vm", 20.0, 40.0, 3.0)
    result = simulate_autoscaling(arrivals, StaticAutoscaler(catalogue()), initial_fleet=[start("w0"), start("w1")],
                                  duration_s=60.0, slowdowns=[noisy])
    serving, victim = result.serving, result.serving.worker_ids.index("w0")

    def share(first_s, last_s):
        sel = (serving.arrival_s >= first_s) & (serving.arrival_s < last_s)
        return np.mean(serving.worker[sel] == victim)

    # w0 (the oldest) is Interfered from the first window that saw it slow (22 s) and the dispatch reads so
    # from the store: queries go to w1. Avoided, it is Active again a window later, gets queries and is
    # Interfered again, until the episode ends
    assert share(10.0, 20.0) > 0.4 and share(22.0, 26.0) == 0.0 and share(22.0, 40.0) < 0.25
    assert share(44.0, 60.0) > 0.4


def test_the_autoscaler_moves_an_interfered_instance():
    arrivals = {"app": poisson(40, 60, seed=3)}
    noisy = Slowdown("cpu-vm", 20.0, 40.0, 3.0)
    result = simulate_autoscaling(arrivals, InfaasAutoscaler(catalogue()), initial_fleet=[start("w0")],
                                  duration_s=60.0, slowdowns=[noisy])
    # a one-vCPU machine has no room for a second instance: a new machine gets it, then the old one goes
    assert result.actions["start:no"] == 1 and result.actions["unload:replaced"] == 1
    assert result.serving.worker_ids[1].startswith("as-") and result.serving.variant[-1] == "m"
    calm = simulate_autoscaling(arrivals, InfaasAutoscaler(catalogue()), initial_fleet=[start("w0")],
                                duration_s=60.0)
    assert not calm.actions


def test_runs_are_deterministic():
    cat = catalogue()
    arrivals = {"app": poisson(150, 30, seed=4)}
    first, second = (simulate_autoscaling(arrivals, InfaasAutoscaler(cat), initial_fleet=[start("w0")],
                                          duration_s=30.0) for _ in range(2))
    np.testing.assert_array_equal(first.finish_s, second.finish_s)
    assert first.workers == second.workers


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="`workloads`"):
        simulate_autoscaling({"other": np.array([1.0])}, StaticAutoscaler(catalogue()), initial_fleet=[start()])
    with pytest.raises(ValueError, match="`duration_s`"):
        simulate_autoscaling({"app": np.array([])}, StaticAutoscaler(catalogue()), initial_fleet=[start()])
