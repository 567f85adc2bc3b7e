"""The greedy Model-Autoscaler (INFaaS §4.2.2): slack threshold, replicate vs upgrade, T_v, resources, mitigation."""
import pytest

from shared.autoscale import (
    Application,
    AutoscaleState,
    GreedyConfig,
    GreedyModelAutoscaler,
    InfaasAutoscaler,
    InstanceStatus,
    MachineCatalogue,
    SmPlusAutoscaler,
    StartWorker,
    VariantOption,
    WorkerStatus,
    WorkerType,
    milp_autoscale,
    milp_problem,
)
from shared.autoscale.fluid import settle
from shared.infaas.records import VariantRecord
from shared.infaas.state import InstanceState
from shared.settings import Settings

CPU, GPU = ("m", "cpu-vm"), ("m", "gpu-vm")


def catalogue(*, vcpus=16, gpu_price=0.526, cpu_load_ms=3000.0, gpu_load_ms=1000.0):
    """m on one vCPU (Q = 100 rows/s at SLO 50 ms, $0.04/h) and on a whole GPU (Q = 1000, `gpu_price`)."""
    cpu = WorkerType("cpu-vm", "cpu", 0.04 * vcpus, {"vcpu": vcpus}, startup_s=20)
    gpu = WorkerType("gpu-vm", "gpu", gpu_price, {"vcpu": 4, "gpu": 1}, startup_s=20)
    options = (
        VariantOption(VariantRecord("m", "f", "cpu-vm", batch_latency_ms=((1, 10.0),), load_latency_ms=cpu_load_ms),
                      "m", {"vcpu": 1}, 0.04),
        VariantOption(VariantRecord("m", "f", "gpu-vm", batch_latency_ms=((1, 2.0), (8, 8.0)), max_batch=8,
                                    load_latency_ms=gpu_load_ms), "m", {"gpu": 1}, gpu_price),
    )
    return MachineCatalogue((cpu, gpu), options, (Application("app", "f", 50.0),))


def worker(worker_id, n, load, *, device="cpu-vm", ready=True, states=(), utilization=0.5, variant="m"):
    states = list(states) + [InstanceState.ACTIVE] * (n - len(states))
    return WorkerStatus(worker_id, device, ready=True, utilization=utilization, instances=tuple(
        InstanceStatus(variant, "app", ready=ready, state=s, load_qps=load / n) for s in states))


def state(*workers, now=0.0, demand=None):
    total = sum(i.load_qps for w in workers for i in w.instances)
    return AutoscaleState(now, tuple(workers), {"app": total if demand is None else demand})


def test_scales_up_exactly_when_headroom_falls_below_the_slack_threshold():
    scaler = GreedyModelAutoscaler(catalogue())
    calm = scaler.decide(state(worker("w1", 1, 95.2)), 0.0)  # headroom 100 / 95.2 = 1.0504
    assert not calm.actions.loads and calm.headroom["w1"] == pytest.approx(1.0504, abs=1e-4)
    tight = scaler.decide(state(worker("w1", 1, 95.3)), 1.0)  # 1.0493 < 1.05
    assert [(a.worker_id, a.variant) for a in tight.actions.loads] == [("w1", "m")]
    assert tight.actions.loads[0].reason.startswith("replicate")


def test_headroom_counts_the_queries_waiting_for_a_saturated_instance():
    """Spec §12.23: incoming load. The instance is routed only what it serves (95 of Q = 100 rows/s:
    headroom 1.05), but the application's queries arrive at 350 rows/s: 3 more replicas."""
    decision = GreedyModelAutoscaler(catalogue()).decide(state(worker("w1", 1, 95.0), demand=350.0), 0.0)
    assert decision.headroom["w1"] == pytest.approx(100 / 350)
    assert [(a.worker_id, a.variant) for a in decision.actions.loads] == [("w1", "m")] * 3


def test_threshold_is_configurable():
    scaler = GreedyModelAutoscaler(catalogue(), config=GreedyConfig(slack_threshold=1.2))
    assert scaler.decide(state(worker("w1", 1, 85.0)), 0.0).actions.loads  # 1.18 < 1.2


@pytest.mark.parametrize("lam, expected", [(0.0, "upgrade"), (1.0, "replicate")])
def test_replicate_or_upgrade_is_chosen_by_the_ilp_cost_with_lambda(lam, expected):
    # 10 CPU instances see 3000 rows/s: 22 more CPU replicas (0.88 $/h) or 4 GPUs (4 x 0.3 - 10 x 0.04 = 0.8 $/h);
    # loading a GPU variant takes 10 s, a CPU one 0.1 s, so lambda = 1 s^-1 makes the upgrade the dearer one
    cat = catalogue(vcpus=64, gpu_price=0.3, cpu_load_ms=100.0, gpu_load_ms=10_000.0)
    decision = GreedyModelAutoscaler(cat, config=GreedyConfig(lam=lam)).decide(state(worker("w1", 10, 3000.0)), 0.0)
    loaded = [(a.variant, a.worker_id) for a in decision.actions.loads] + [(s.variant, d) for d, s in decision.requests]
    if expected == "upgrade":
        assert loaded == [("m", "gpu-vm")] * 4  # no GPU worker yet: all four are requests for machines
    else:
        assert loaded == [("m", "w1")] * 22
    assert all(a.reason.startswith(expected) for a in decision.actions.loads)


def test_upgrade_unloads_the_old_instances_only_once_the_new_ones_serve():
    cat = catalogue(vcpus=64, gpu_price=0.3, cpu_load_ms=100.0, gpu_load_ms=10_000.0)
    scaler = GreedyModelAutoscaler(cat, config=GreedyConfig(lam=0.0))
    cpu = worker("w1", 10, 3000.0)
    first = scaler.decide(state(cpu, worker("g1", 0, 0.0, device="gpu-vm"), worker("g2", 0, 0.0, device="gpu-vm"),
                                worker("g3", 0, 0.0, device="gpu-vm"), worker("g4", 0, 0.0, device="gpu-vm")), 0.0)
    assert sorted(a.worker_id for a in first.actions.loads) == ["g1", "g2", "g3", "g4"] and not first.actions.unloads
    gpus = [WorkerStatus(f"g{k}", "gpu-vm", instances=(InstanceStatus("m", "app", ready=False),)) for k in range(1, 5)]
    loading = scaler.decide(state(cpu, *gpus, demand=3000.0), 1.0)
    assert not loading.actions.unloads and not loading.actions.loads
    served = [WorkerStatus(f"g{k}", "gpu-vm", instances=(InstanceStatus("m", "app"),)) for k in range(1, 5)]
    done = scaler.decide(state(cpu, *served, demand=3000.0), 2.0)
    assert [(u.worker_id, u.variant) for u in done.actions.unloads] == [("w1", "m")] * 10


#: the paper's rule alone: T_v = the loading latency, without the authors' code's consecutive checks
PAPER_T_V = GreedyConfig(scale_down_checks={})


def test_scale_down_waits_t_v_equal_to_the_loading_latency():
    scaler = GreedyModelAutoscaler(catalogue(cpu_load_ms=3000.0), config=PAPER_T_V)  # T_v = 3 s
    quiet = state(worker("w1", 3, 50.0))
    assert [bool(scaler.decide(quiet, t).actions.unloads) for t in (0.0, 1.0, 2.0)] == [False] * 3
    removed = scaler.decide(quiet, 3.0).actions.unloads
    assert [(u.worker_id, u.variant) for u in removed] == [("w1", "m")]
    assert removed[0].reason.startswith("remove a replica")
    # the next replica waits its own T_v
    assert [bool(scaler.decide(quiet, t).actions.unloads) for t in (4.0, 5.0, 6.0, 7.0)] == [False] * 3 + [True]


def test_scale_down_timer_resets_when_the_condition_breaks():
    scaler = GreedyModelAutoscaler(catalogue(cpu_load_ms=3000.0), config=PAPER_T_V)
    quiet, busy = state(worker("w1", 3, 50.0)), state(worker("w1", 3, 250.0))
    assert not scaler.decide(quiet, 0.0).actions
    assert not scaler.decide(busy, 1.0).actions.unloads
    assert [bool(scaler.decide(quiet, t).actions.unloads) for t in (2.0, 3.0, 4.0, 5.0)] == [False] * 3 + [True]


def test_scale_down_keeps_the_scale_down_threshold_of_headroom():
    """Hysteresis: 3 replicas (Q = 300) at 160 rows/s. Removing one leaves 200 / 160 = 1.25 of headroom:
    enough for the paper's one threshold (1.05), not for a scale-down threshold of 1.3."""
    busy = state(worker("w1", 3, 160.0))
    paper = GreedyModelAutoscaler(catalogue(cpu_load_ms=0.0), config=PAPER_T_V)
    assert [(u.worker_id, u.variant) for u in paper.decide(busy, 0.0).actions.unloads] == [("w1", "m")]
    held = GreedyModelAutoscaler(catalogue(cpu_load_ms=0.0), config=GreedyConfig(
        scale_down_checks={}, scale_down_threshold=1.3))
    assert not held.decide(busy, 0.0).actions
    assert held.decide(state(worker("w1", 3, 150.0)), 1.0).actions.unloads  # 200 / 150 = 1.33
    with pytest.raises(ValueError, match="`scale_down_threshold`"):
        GreedyConfig(slack_threshold=1.2, scale_down_threshold=1.1)


def test_the_scale_down_threshold_comes_from_the_settings_and_is_checked_there():
    config = GreedyConfig.from_settings(Settings(infaas_slack_threshold=1.15, infaas_scale_down_threshold=1.25))
    assert (config.slack_threshold, config.scale_down_threshold) == (1.15, 1.25)
    assert GreedyConfig.from_settings(Settings(infaas_slack_threshold=1.15)).scale_down_threshold == 1.15
    with pytest.raises(ValueError, match="infaas_scale_down_threshold .1. must be at least infaas_slack_threshold"):
        Settings(infaas_scale_down_threshold=1.0)


def test_the_last_instance_of_an_application_stays():
    scaler = GreedyModelAutoscaler(catalogue(cpu_load_ms=0.0))
    assert not scaler.decide(state(worker("w1", 1, 0.0)), 0.0).actions
    assert not scaler.decide(state(worker("w1", 1, 0.0)), 5.0).actions


def test_scale_down_also_holds_for_the_reference_codes_checks_per_hardware():
    """Appendix A: 10 consecutive checks on CPU, 20 on GPU (1 s polls), when T_v is shorter."""
    scaler = GreedyModelAutoscaler(catalogue(cpu_load_ms=300.0))
    quiet = state(worker("w1", 3, 50.0))
    assert [bool(scaler.decide(quiet, float(t)).actions.unloads) for t in range(11)] == [False] * 10 + [True]
    gpu = GreedyModelAutoscaler(catalogue(gpu_load_ms=500.0))
    low = state(worker("g1", 1, 150.0, device="gpu-vm"), worker("c1", 0, 0.0))
    assert [bool(gpu.decide(low, float(t)).actions.loads) for t in range(21)] == [False] * 20 + [True]
    assert GreedyConfig().scale_down_wait_s(30.0, "cpu") == 30.0, "a longer T_v still rules"


def test_downgrade_to_cheaper_hardware_after_t_v():
    scaler = GreedyModelAutoscaler(catalogue(gpu_load_ms=2000.0), config=PAPER_T_V)
    low = state(worker("g1", 1, 150.0, device="gpu-vm"), worker("c1", 0, 0.0))
    assert not scaler.decide(low, 0.0).actions and not scaler.decide(low, 1.0).actions
    down = scaler.decide(low, 2.0).actions  # 2 CPU replicas (0.08 $/h) replace the GPU (0.526 $/h)
    assert [(a.worker_id, a.reason.split(":")[0]) for a in down.loads] == [("c1", "downgrade")] * 2
    assert not down.unloads


def test_no_room_on_the_worker_goes_to_another_worker_or_a_new_machine():
    cat = catalogue(vcpus=2)
    scaler = GreedyModelAutoscaler(cat)
    full = worker("w1", 2, 200.0)
    spare = worker("w2", 1, 90.0, utilization=0.1)
    decision = scaler.decide(state(full, spare), 0.0)  # 290 rows/s x 1.05 > 300: one more, w2 has the room
    assert [a.worker_id for a in decision.actions.loads] == ["w2"] and not decision.requests
    autoscaler = InfaasAutoscaler(cat)
    actions = autoscaler.step(state(worker("w1", 2, 200.0), worker("w2", 2, 190.0)), 0.0)  # both full
    assert [(s.device, [i.variant for i in s.instances]) for s in actions.start] == [("cpu-vm", ["m"])]
    assert actions.start[0].reason == "no running worker has room"
    assert actions.cost_per_hour == pytest.approx(3 * 0.08)


def test_cold_start_picks_the_cheapest_option_that_carries_the_demand():
    scaler = GreedyModelAutoscaler(catalogue())
    decision = scaler.decide(AutoscaleState(0.0, (worker("w1", 0, 0.0),), {"app": 250.0}), 0.0)
    assert [(a.worker_id, a.variant) for a in decision.actions.loads] == [("w1", "m")] * 3


def test_interfered_instance_moves_to_free_cores_then_to_another_worker():
    scaler = GreedyModelAutoscaler(catalogue(vcpus=4))
    sick = worker("w1", 2, 40.0, states=[InstanceState.INTERFERED])
    other = worker("w2", 1, 10.0, utilization=0.1)
    first = scaler.decide(state(sick, other), 0.0)
    assert [(a.worker_id, a.reason) for a in first.actions.loads] == [("w1", "interfered on w1")]
    healed = WorkerStatus("w1", "cpu-vm", instances=sick.instances + (InstanceStatus("m", "app"),))
    swap = scaler.decide(state(healed, other), 1.0)
    assert [(u.worker_id, u.variant) for u in swap.actions.unloads] == [("w1", "m")]
    again = scaler.decide(state(worker("w1", 2, 40.0, states=[InstanceState.INTERFERED]), other), 5.0)
    assert [a.worker_id for a in again.actions.loads] == ["w2"]  # same cores just tried: elsewhere


@pytest.mark.parametrize("demand", [30.0, 180.0, 950.0, 1500.0, 2600.0, 4000.0])
def test_settled_greedy_is_within_the_papers_bound_of_the_ilp(demand):
    """ILP optimum <= greedy <= replicating the running (CPU) variant; equal where no mixed fleet is needed."""
    cat = catalogue(gpu_price=0.526)
    config = GreedyConfig(lam=0.0)
    greedy = settle(cat, {"app": demand}, initial_fleet=[StartWorker("w0", "cpu-vm")], config=config)
    greedy_cost = sum(cat.option[(i.variant, w.device)].cost_per_hour for w in greedy.workers for i in w.instances)
    problem, _ = milp_problem(cat, {"app": demand})
    optimum = milp_autoscale(problem, lam=0.0, slack=0.05 * demand).cost_per_s_after * 3600.0
    replicate_only = settle(SmPlusAutoscaler(cat, {"app": CPU}).catalogue, {"app": demand}, config=config)
    replicate_cost = sum(cat.option[(i.variant, w.device)].cost_per_hour
                         for w in replicate_only.workers for i in w.instances)
    assert optimum - 1e-9 <= greedy_cost <= replicate_cost + 1e-9
    assert greedy_cost <= optimum + 0.04 + 1e-9  # here: at most one CPU replica above the optimum
