"""The autoscaler's view of the fleet (from worker events and load statistics) and its loop."""
from __future__ import annotations

import pytest

from schemas import BatchFinished, LoadStatistics, VariantUnloaded, WorkerHeartbeat, WorkerStopped
from shared.autoscale.tracker import FleetTracker
from shared.autoscale import Application, BaseAutoscaler, InstanceSpec, MachineCatalogue, ScaleActions, StartWorker, WorkerType
from shared.autoscale.loop import AutoscaleLoop
from shared.infaas.monitor import MonitorConfig
from shared.infaas.state import InstanceState
from shared.profiles.format import ProfileSet
from shared.settings import REPO_ROOT


@pytest.fixture
def tracker() -> FleetTracker:
    profiles = ProfileSet.load(REPO_ROOT / "profiles" / "efficientnet-lite.json")
    catalogue = MachineCatalogue.from_profiles(profiles, [WorkerType("cpu-1t", "cpu", 0.0425, {"vcpu": 2}, 5.0)],
                                        [Application("vision", "efficientnet-lite", 500.0)])
    return FleetTracker(catalogue, config=MonitorConfig(window_s=2.0), silent_after_s=10.0)


def heartbeat(worker_id: str, variants: list[str], busy: float = 0.5, device: str = "cpu-1t") -> WorkerHeartbeat:
    return WorkerHeartbeat(worker_id=worker_id, device=device, emulated=True, variants=variants, max_batch=8,
                           inflight=0, busy_fraction=busy, price_per_hour=0.0425, at=0.0)


def test_demand_is_rows_per_second(tracker) -> None:
    tracker.on_load_statistics(LoadStatistics(application="vision", window_s=2.0, arrival_rate_qps=10.0,
                                              queue_depth=0, batch_sizes=[1, 3], at=0.0))
    tracker.on_load_statistics(LoadStatistics(application="other", window_s=2.0, arrival_rate_qps=5.0,
                                              queue_depth=0, at=0.0))
    assert tracker.state(0.0).demand_qps == {"vision": 20.0}


def test_instances_carry_their_served_rate_and_workers_their_utilization(tracker) -> None:
    tracker.on_worker_event(heartbeat("w1", ["efficientnet-lite0"], busy=0.6), 0.0)
    for k in range(10):
        tracker.on_worker_event(BatchFinished(worker_id="w1", batch_id=f"b{k}", variant="efficientnet-lite0",
                                              device="cpu-1t", rows=2, compute_ms=18.0, ok=True, at=0.0), 0.5)
    (worker,) = tracker.state(1.0).workers
    assert worker.utilization == 0.6 and worker.ready
    (instance,) = worker.instances
    assert (instance.variant, instance.application, instance.load_qps) == ("efficientnet-lite0", "vision", 10.0)
    assert tracker.state(3.0).workers[0].instances[0].load_qps == 0.0, "the window has passed"


def test_asked_for_workers_count_as_booting_until_they_report(tracker) -> None:
    spec = InstanceSpec("efficientnet-lite1", "vision")
    tracker.expect(ScaleActions(start=(StartWorker("as-1", "cpu-1t", (spec,)),)), 0.0)
    (booting,) = tracker.state(0.0).workers
    assert not booting.ready and not booting.instances[0].ready
    assert booting.instances[0].variant == spec.variant
    tracker.on_worker_event(heartbeat("as-1", ["efficientnet-lite1"]), 1.0)
    (up,) = tracker.state(1.0).workers
    assert up.ready and up.instances[0].ready


def test_workers_leave_when_stopped_unloaded_or_silent(tracker) -> None:
    tracker.on_worker_event(heartbeat("w1", ["efficientnet-lite0", "efficientnet-lite1"]), 0.0)
    tracker.on_worker_event(VariantUnloaded(worker_id="w1", variant="efficientnet-lite1", at=0.0), 0.0)
    assert [i.variant for i in tracker.state(0.0).workers[0].instances] == ["efficientnet-lite0"]
    tracker.on_worker_event(heartbeat("w2", []), 0.0)
    tracker.on_worker_event(WorkerStopped(worker_id="w2", at=0.0), 0.0)
    assert [w.worker_id for w in tracker.state(0.0).workers] == ["w1"]
    assert tracker.expire(11.0) == ["w1"] and tracker.state(11.0).workers == (), "silent for longer than 10 s"


def test_a_worker_that_never_reports_is_given_up_after_its_startup_time(tracker) -> None:
    tracker.expect(ScaleActions(start=(StartWorker("as-1", "cpu-1t", ()),)), 0.0)
    assert tracker.expire(14.0) == [], "5 s to start plus 10 s of silence have not passed"
    assert tracker.expire(15.5) == ["as-1"] and tracker.state(15.5).workers == ()


def test_devices_it_does_not_manage_and_other_policies_workers_are_ignored(tracker) -> None:
    tracker.on_worker_event(heartbeat("g1", ["x"], device="g4dn.xlarge"), 0.0)
    tracker.on_worker_event(heartbeat("digits-1", ["digits-cnn-s"]), 0.0)
    assert tracker.state(0.0).workers == (), "a cpu-1t it did not start, serving none of its applications"


def test_instance_states_come_from_the_monitor_once_per_window(tracker) -> None:
    tracker.on_worker_event(heartbeat("w1", ["efficientnet-lite0"]), 0.0)
    profiled = tracker.catalogue.option[("efficientnet-lite0", "cpu-1t")].record.latency_ms(1)
    tracker.on_worker_event(BatchFinished(worker_id="w1", batch_id="slow", variant="efficientnet-lite0",
                                          device="cpu-1t", rows=1, compute_ms=3 * profiled, ok=True, at=0.0), 1.5)
    assert tracker.state(1.6).workers[0].instances[0].state is InstanceState.ACTIVE, "the window has not ended"
    assert tracker.state(2.0).workers[0].instances[0].state is InstanceState.INTERFERED
    assert tracker.monitor.state(("w1", "efficientnet-lite0")) is InstanceState.INTERFERED
    tracker.on_worker_event(VariantUnloaded(worker_id="w1", variant="efficientnet-lite0", at=0.0), 2.5)
    assert tracker.monitor.state(("w1", "efficientnet-lite0")) is InstanceState.INACTIVE


def test_an_instance_serves_the_application_it_was_loaded_for() -> None:
    profiles = ProfileSet.load(REPO_ROOT / "profiles" / "efficientnet-lite.json")
    apps = [Application("vision", "efficientnet-lite", 500.0), Application("vision-hq", "efficientnet-lite", 500.0,
                                                                           accuracy_floor=0.775)]
    tracker = FleetTracker(MachineCatalogue.from_profiles(profiles, [WorkerType("cpu-1t", "cpu", 0.0425, {"vcpu": 2}, 5.0)],
                                                   apps))
    tracker.expect(ScaleActions(start=(StartWorker("as-1", "cpu-1t", (InstanceSpec("efficientnet-lite2",
                                                                                   "vision-hq"),)),)), 0.0)
    tracker.on_worker_event(heartbeat("as-1", ["efficientnet-lite2"]), 1.0)
    tracker.on_worker_event(heartbeat("w2", ["efficientnet-lite2", "efficientnet-lite0"]), 1.0)
    served = {w.worker_id: [(i.variant, i.application) for i in w.instances] for w in tracker.state(1.0).workers}
    assert served == {"as-1": [("efficientnet-lite2", "vision-hq")],
                      "w2": [("efficientnet-lite0", "vision"), ("efficientnet-lite2", "vision")]}, \
        "asked for: its application; loaded unasked: the first it may serve"


class Once(BaseAutoscaler):
    name = "once"

    def step(self, state, now_s):
        return ScaleActions(start=(StartWorker("as-1", "cpu-1t", ()),)) if not state.workers else ScaleActions()


def test_the_loop_expects_what_it_asked_for_and_gives_up_on_workers_that_never_come(tracker) -> None:
    ticks = iter(range(100))
    loop = AutoscaleLoop(Once(tracker.catalogue), silent_after_s=10.0, timer=lambda: next(ticks))
    first = loop.poll(0.0)
    assert [s.worker_id for s in first.actions.start] == ["as-1"] and first.decision_s == 1
    assert first.plan is not None and first.plan.cost_per_hour == pytest.approx(0.0425)
    second = loop.poll(1.0)
    assert not second.actions and second.plan is None, "the booting worker counts: nothing asked twice"
    assert loop.poll(16.0).expired == ("as-1",), "5 s to start plus 10 s of silence"
