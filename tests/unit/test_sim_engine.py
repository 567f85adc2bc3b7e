"""The event engine: when policies are called, what it records, and that runs reproduce."""
import numpy as np
import pytest

from shared.kairos import KairosDispatch
from shared.policy.base import (
    Assignment,
    DispatchDecision,
    DispatchPolicy,
    FleetCommands,
    FleetController,
    FleetPlan,
    Placement,
    PlanStatus,
)
from shared.policy.fcfs import FcfsDispatch
from shared.profiles.format import DeviceType, ProfileSet, VariantProfile
from shared.profiles.kairos import load_kairos_profiles
from shared.serving import ProfileServiceTime
from shared.settings import Settings
from shared.sim import (
    SimStatus,
    StopRule,
    Workload,
    deeprecsys_sizes,
    make_fleet,
    poisson_arrivals,
    simulate,
)


def constant_profiles(latency_ms=10.0, devices=("d",), samples=None):
    return ProfileSet(
        source="test",
        devices=[DeviceType(name=d, kind="cpu", price_per_hour=1.0) for d in devices],
        slo_ms={"m": 100.0},
        variants=[
            VariantProfile(
                variant="m", family="m", device=d, batch_latency_ms={1000: latency_ms},
                latency_samples_ms=samples, max_batch=1000,
            )
            for d in devices
        ],
    )


def workload(arrivals, sizes=None, slo_ms=100.0):
    arrivals = np.asarray(arrivals, dtype=float)
    sizes = np.ones(len(arrivals), dtype=np.int64) if sizes is None else np.asarray(sizes)
    return Workload(arrivals, sizes, "m", slo_ms, ("m",))


class OneEach(DispatchPolicy):
    """Queue head to the first idle worker, one query per batch; records every call."""

    name = "one-each"

    def __init__(self):
        self.calls, self.observed = [], []

    def decide(self, now_s, queue, workers):
        self.calls.append((now_s, len(queue), sum(w.idle for w in workers), [w.busy_remaining_ms for w in workers]))
        idle = [w for w in workers if w.idle]
        pairs = zip(idle, queue)
        return DispatchDecision(tuple(Assignment(w.worker_id, "m", (q.query_id,)) for w, q in pairs))

    def on_batch_finished(self, device, variant, batch_size, latency_ms):
        self.observed.append((device, variant, batch_size, latency_ms))


def test_latency_is_wait_plus_service_one_batch_at_a_time():
    policy = OneEach()
    result = simulate(workload([0.0, 0.001, 0.002]), make_fleet({"d": 1}, ["m"], max_batch=1000), policy,
                      constant_profiles(10.0))
    assert result.success
    np.testing.assert_allclose(result.start_s, [0.0, 0.010, 0.020])
    np.testing.assert_allclose(result.latency_ms, [10.0, 19.0, 28.0])
    assert result.latency_quantile_ms(0.5) == pytest.approx(19.0)
    assert result.latency_quantile_ms(0.99) == pytest.approx(28.0)
    assert policy.observed == [("d", "m", 1, pytest.approx(10.0))] * 3


def test_policy_called_on_arrivals_and_completions_only_when_useful():
    policy = OneEach()
    simulate(workload([0.0, 0.001, 0.030]), make_fleet({"d": 1}, ["m"], max_batch=1000), policy,
             constant_profiles(10.0))
    # t=0 arrival (idle); t=0.001 arrival finds the worker busy -> no call; t=0.010 completion with a queued
    # query -> call; t=0.020 completion with an empty queue -> no call; t=0.030 arrival -> call
    assert [(round(t, 6), q, i) for t, q, i, _ in policy.calls] == [(0.0, 1, 1), (0.01, 1, 1), (0.03, 1, 1)]


def test_completion_precedes_a_simultaneous_arrival():
    policy = OneEach()
    result = simulate(workload([0.0, 0.010]), make_fleet({"d": 1}, ["m"], max_batch=1000), policy,
                      constant_profiles(10.0))
    np.testing.assert_allclose(result.latency_ms, [10.0, 10.0])


def test_busy_workers_report_predicted_remaining_time():
    policy = OneEach()
    simulate(workload([0.0, 0.004]), make_fleet({"d": 2}, ["m"], max_batch=1000), policy,
             constant_profiles(10.0))
    assert policy.calls[1][3] == [pytest.approx(6.0), 0.0]


def test_assigning_a_busy_worker_is_rejected():
    class Greedy(DispatchPolicy):
        name = "bad"

        def decide(self, now_s, queue, workers):
            return DispatchDecision((Assignment(workers[0].worker_id, "m", (queue[0].query_id,)),))

    with pytest.raises(ValueError, match="busy"):
        simulate(workload([0.0, 0.001]), make_fleet({"d": 2}, ["m"], max_batch=1000), Greedy(),
                 constant_profiles(10.0))


def test_dropped_queries_count_as_misses():
    class DropAll(DispatchPolicy):
        name = "drop"

        def decide(self, now_s, queue, workers):
            return DispatchDecision(dropped=tuple((q.query_id, "no") for q in queue))

    result = simulate(workload([0.0, 1.0]), make_fleet({"d": 1}, ["m"], max_batch=1000), DropAll(),
                      constant_profiles())
    assert result.dropped == {0: "no", 1: "no"} and result.num_within_slo == 0 and result.num_served == 0


def test_stop_rules_end_hopeless_runs_early():
    arrivals = np.arange(200) * 0.001  # 1000 qps into a 100 qps worker
    profiles = constant_profiles(10.0)
    fleet = make_fleet({"d": 1}, ["m"], max_batch=1000)
    diverged = simulate(workload(arrivals), fleet, OneEach(), profiles, stop=StopRule(max_queue=20))
    assert diverged.status is SimStatus.DIVERGED and not diverged.success
    aborted = simulate(workload(arrivals, slo_ms=15.0), fleet, OneEach(), profiles, stop=StopRule(max_misses=3))
    assert aborted.status is SimStatus.ABORTED and np.isnan(aborted.finish_s[-1])


def test_same_seed_same_run_different_seed_different_run():
    profiles = load_kairos_profiles(Settings().kairos_data_dir, samples=True)
    service = ProfileServiceTime(profiles, sampled=True)
    fleet = make_fleet({"g4dn.xlarge": 1, "r5n.large": 4}, ["rm2"], max_batch=1000)
    rng = np.random.default_rng(0)
    sizes = deeprecsys_sizes(400, rng)
    load = Workload(poisson_arrivals(25.0, 400, rng), sizes, "rm2", 350.0, ("rm2",))
    runs = [simulate(load, fleet, KairosDispatch(profiles), profiles, service=service, seed=s) for s in (1, 1, 2)]
    np.testing.assert_array_equal(runs[0].finish_s, runs[1].finish_s)
    np.testing.assert_array_equal(runs[0].worker, runs[1].worker)
    assert not np.array_equal(runs[0].finish_s, runs[2].finish_s)
    for run in runs:  # every worker serves one batch at a time
        for j in range(len(fleet)):
            mine = run.worker == j
            order = np.argsort(run.start_s[mine])
            assert np.all(run.start_s[mine][order][1:] >= run.finish_s[mine][order][:-1] - 1e-12)


class Scripted(FleetController):
    """Answers one scripted plan or commands per control call (then nothing) and hears every worker event."""

    def __init__(self, *answers):
        self.answers, self.events = list(answers), []

    def control(self, now_s, arrivals):
        return self.answers.pop(0) if self.answers else None

    def on_worker_event(self, event):
        self.events.append(event)


def two_variant_profiles(startup_s=1.0, load_ms=500.0):
    return ProfileSet(
        source="test", devices=[DeviceType(name="d", kind="cpu", price_per_hour=1.0, startup_s=startup_s)],
        variants=[VariantProfile(variant=v, family=v, device="d", batch_latency_ms={10: 10.0}, load_latency_ms=load_ms,
                                 max_batch=10) for v in ("m", "n")])


def test_a_plan_starts_workers_after_startup_and_load_and_stops_the_old_ones_once_they_joined():
    plan = FleetPlan(PlanStatus.OPTIMAL, "m on one d", placements=(Placement("d", ("m",)),))
    controller = Scripted(plan)
    load = Workload(np.array([0.1, 0.2, 2.0]), np.ones(3, dtype=np.int64), "app", 5000.0, ("m",))
    result = simulate(load, make_fleet({"d": 1}, ["n"], max_batch=10), FcfsDispatch(), two_variant_profiles(),
                      controller=controller)
    old, new = result.lifetimes
    assert (old.worker_id, old.stopped_s) == ("d-0", 1.5), "make-before-break: stops when the new one joins"
    assert (new.requested_s, new.joined_s, new.stopped_s) == (0.0, 1.5, None), "start-up 1 s + load 0.5 s"
    np.testing.assert_allclose(result.start_s, [1.5, 1.5, 2.0])
    assert [type(e).__name__ for e in controller.events][:3] == ["WorkerHeartbeat", "WorkerHeartbeat",
                                                                 "WorkerStopped"]
    assert len(result.plans) == 1


def test_commands_load_and_unload_variants_on_named_workers_in_their_job_order():
    controller = Scripted(FleetCommands(start=(("w", Placement("d", ("n",))),)),  # t = 0
                          FleetCommands(load=(("w", "m"),), unload=(("w", "n"),)))  # t = 1
    load = Workload(np.array([3.0]), np.ones(1, dtype=np.int64), "app", 5000.0, ("m",))
    result = simulate(load, [], FcfsDispatch(), two_variant_profiles(startup_s=0.0), controller=controller)
    assert result.num_served == 1 and result.variant[0] == "m" and result.worker_ids == ("w",)
    kinds = [(type(e).__name__, getattr(e, "variant", None), e.at) for e in controller.events]
    assert kinds == [("WorkerHeartbeat", None, 0.5), ("VariantUnloaded", "n", 1.0), ("VariantLoaded", "m", 1.5),
                     ("BatchFinished", "m", 3.01)]


def test_a_batch_sent_for_a_variant_unloaded_on_its_way_is_handed_back_and_served_once_it_is_loaded_again():
    controller = Scripted(FleetCommands(start=(("w", Placement("d", ("n",))),)), None,  # t = 0: joins at 0.8
                          FleetCommands(load=(("w", "m"),)),  # t = 1: busy loading until 1.8
                          FleetCommands(unload=(("w", "n"),)),  # t = 1.5: waits behind the load
                          FleetCommands(load=(("w", "n"),)))  # t = 2: loaded again at 2.8
    load = Workload(np.array([1.6]), np.ones(1, dtype=np.int64), "app", 5000.0, ("n",))
    result = simulate(load, [], FcfsDispatch(), two_variant_profiles(startup_s=0.0, load_ms=800.0),
                      controller=controller, control_interval_s=0.5)
    kinds = [(type(e).__name__, getattr(e, "variant", None), e.at) for e in controller.events]
    assert ("BatchRefused", "n", pytest.approx(1.8)) in kinds, "dispatched at 1.6, behind the unload"
    assert result.num_served == 1 and result.variant[0] == "n" and result.start_s[0] == pytest.approx(2.8)


def test_workers_heartbeat_their_busy_share_until_the_last_control():
    controller = Scripted()
    # 10 ms batches: one in the first second, three in the second
    load = Workload(np.array([0.5, 1.2, 1.4, 1.6]), np.ones(4, dtype=np.int64), "app", 5000.0, ("m",))
    simulate(load, make_fleet({"d": 1}, ["m"], max_batch=10), FcfsDispatch(), two_variant_profiles(),
             controller=controller, heartbeat_interval_s=1.0)
    beats = [(e.at, e.busy_fraction, e.variants) for e in controller.events if type(e).__name__ == "WorkerHeartbeat"]
    assert beats == [(0.0, 0.0, ["m"]), (1.0, pytest.approx(0.01), ["m"]), (2.0, pytest.approx(0.03), ["m"])], \
        "one on joining, then one per second until the last control (1.6 s + 1 s)"
