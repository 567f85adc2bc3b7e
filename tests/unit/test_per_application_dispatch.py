"""`PerApplicationDispatch`: each application's queries reach only its policy, a worker goes to one policy
per decision, and a switch hands every queued query over exactly once, leaving other applications alone."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from schemas import Query, WorkerHeartbeat, WorkerStopped
from shared.catalogue import Catalogue
from shared.policy.base import DispatchDecision, DispatchPolicy, FleetPlan, PendingQuery, PlanStatus, WorkerView
from shared.policy.fcfs import FcfsDispatch
from shared.policy.per_application import PerApplicationDispatch
from shared.policy.registry import make_dispatch
from shared.profiles import DeviceType, ProfileSet, VariantProfile
from shared.proteus.dispatch import ProteusDispatch
from shared.serving import CoreConfig, SchedulerCore

PROFILES = ProfileSet(
    source="test", devices=[DeviceType(name="cpu", kind="cpu", price_per_hour=0.1)], slo_ms={"fam": 1000.0},
    variants=[VariantProfile(variant="small", family="fam", device="cpu", accuracy=0.9,
                             batch_latency_ms={1: 1.0, 2: 1.5, 4: 2.5, 8: 4.0}, max_batch=8)])


class Recorder(FcfsDispatch):
    """FCFS that writes down what it is told and what it is shown."""

    def __init__(self) -> None:
        super().__init__()
        self.added: list[str] = []
        self.removed: list[str] = []
        self.joined: list[str] = []
        self.plans: list[FleetPlan] = []
        #: per decide: (queue ids, (worker id, inflight) of each worker)
        self.shown: list[tuple[list[str], list[tuple[str, int]]]] = []

    def on_query_added(self, query: PendingQuery) -> None:
        self.added.append(query.query_id)

    def on_query_removed(self, query_id: str) -> None:
        self.removed.append(query_id)

    def on_worker_joined(self, worker: WorkerView) -> None:
        self.joined.append(worker.worker_id)

    def on_plan(self, plan: FleetPlan) -> None:
        self.plans.append(plan)

    def decide(self, now_s, queue, workers) -> DispatchDecision:
        self.shown.append(([q.query_id for q in queue], [(w.worker_id, w.inflight) for w in workers]))
        return super().decide(now_s, queue, workers)


class Waking(FcfsDispatch):
    def __init__(self, at: float | None) -> None:
        super().__init__()
        self.at = at

    def next_wakeup_s(self) -> float | None:
        return self.at


def pending(query_id: str, application: str) -> PendingQuery:
    return PendingQuery(query_id, application, 1, 0.0, 1000.0, ("small",))


def view(worker_id: str, inflight: int = 0) -> WorkerView:
    return WorkerView(worker_id, "cpu", ("small",), inflight, 0.0, 0.0, 8)


class Live:
    """A core with two applications on a hand-moved clock, its workers emulated and batches finished on time."""

    def __init__(self, policy: DispatchPolicy, *, max_batch: int = 2) -> None:
        self.now = 0.0
        self.core = SchedulerCore(policy, Catalogue(PROFILES, {"a": ["fam"], "b": ["fam"], "c": ["fam"]}),
                                  CoreConfig(drop_after_slo_multiple=100.0), clock=lambda: self.now)
        self.max_batch = max_batch
        self.dispatched: list[str] = []
        self.dropped: list[str] = []

    def worker(self, worker_id: str) -> None:
        self.core.on_worker_event(WorkerHeartbeat(
            worker_id=worker_id, device="cpu", emulated=True, variants=["small"], max_batch=self.max_batch,
            inflight=0, busy_fraction=0.0, price_per_hour=0.1, at=self.now))

    def admit(self, query_id: str, application: str) -> None:
        query = Query(query_id=query_id, application=application, model="fam", slo_ms=1000.0, batch_size=1,
                      sent_at=self.now)
        assert self.core.admit(query, payload=query) is None

    def step(self) -> None:
        step = self.core.step()
        self.dispatched += [i.pending.query_id for d in step.dispatches for i in d.items]
        self.dropped += [item.pending.query_id for item, _ in step.dropped]

    def finish_all(self) -> None:
        for worker in list(self.core.workers.values()):
            for batch_id in list(worker.inflight):
                self.core.batch_finished(worker.worker_id, batch_id, 1.0)

    def run_until_empty(self, *, step_s: float = 0.01, limit_s: float = 60.0) -> None:
        while self.core.queue.items and self.now < limit_s:
            self.now += step_s
            self.finish_all()
            self.step()


def test_each_application_s_queries_reach_only_its_policy() -> None:
    default, own = Recorder(), Recorder()
    policy = PerApplicationDispatch(default, {"b": own})
    for query in (pending("a1", "a"), pending("b1", "b"), pending("c1", "c"), pending("b2", "b")):
        policy.on_query_added(query)
    policy.on_query_removed("b1")
    queue = [pending("a1", "a"), pending("c1", "c"), pending("b2", "b")]
    policy.decide(0.0, queue, [view("w", inflight=1)])
    assert (default.added, own.added, own.removed, default.removed) == (["a1", "c1"], ["b1", "b2"], ["b1"], [])
    assert default.shown[0][0] == ["a1", "c1"] and own.shown[0][0] == ["b2"]
    assert (policy.policy_of("a"), policy.policy_of("b"), policy.policy_of("new")) == ("fcfs",) * 3


def test_a_policy_alone_with_queries_sees_the_core_s_own_queue_and_workers() -> None:
    default = Recorder()
    policy = PerApplicationDispatch(default, {"b": Recorder()})
    policy.on_query_added(pending("a1", "a"))
    queue, workers = [pending("a1", "a")], [view("w")]
    decision = policy.decide(0.0, queue, workers)
    assert [a.query_ids for a in decision.assignments] == [("a1",)]
    assert default.shown == [(["a1"], [("w", 0)])]


def test_a_worker_goes_to_one_policy_per_decision_and_the_first_pick_rotates() -> None:
    first, second = Recorder(), Recorder()
    policy = PerApplicationDispatch(first, {"b": second})
    served = []
    for n in range(2):
        a, b = pending(f"a{n}", "a"), pending(f"b{n}", "b")
        policy.on_query_added(a)
        policy.on_query_added(b)
        decision = policy.decide(float(n), [a, b], [view("w")])
        assert len(decision.assignments) == 1 and decision.assignments[0].worker_id == "w"
        served.append(decision.assignments[0].query_ids[0][0])
        policy.on_query_removed(f"{'b' if served[-1] == 'a' else 'a'}{n}")  # the other one gives up
    assert sorted(served) == ["a", "b"], "each application had the first pick once"
    # the policy asked second saw the worker the first one took as busy, not gone
    later = [shown[1] for rec in (first, second) for shown in rec.shown if shown[1] != [("w", 0)]]
    assert later == [[("w", 1)], [("w", 1)]]


def test_the_next_wakeup_is_the_earliest_of_the_policies() -> None:
    assert PerApplicationDispatch(Waking(None), {"b": Waking(3.0), "c": Waking(2.0)}).next_wakeup_s() == 2.0
    assert PerApplicationDispatch(Waking(None)).next_wakeup_s() is None


def test_a_policy_object_serves_one_group() -> None:
    shared = FcfsDispatch()
    with pytest.raises(ValueError, match="distinct"):
        PerApplicationDispatch(shared, {"b": shared})
    policy = PerApplicationDispatch(shared)
    with pytest.raises(ValueError, match="new policy object"):
        policy.switch("a", shared)


def test_the_new_policy_hears_the_latest_plan_the_live_workers_and_the_queued_queries_in_order() -> None:
    default = Recorder()
    policy = PerApplicationDispatch(default)
    plan = FleetPlan(PlanStatus.OPTIMAL, "p", (), {"a": {"small": 1.0}})
    policy.on_worker_joined(view("w1"))
    policy.on_worker_joined(view("w2"))
    policy.on_worker_lost("w1")
    policy.on_plan(plan)
    for query in (pending("a1", "a"), pending("c1", "c"), pending("a2", "a")):
        policy.on_query_added(query)
    new = Recorder()
    policy.switch("a", new)
    assert (new.plans, new.joined, new.added) == ([plan], ["w2"], ["a1", "a2"])
    assert default.removed == ["a1", "a2"]
    policy.decide(0.0, [pending("a1", "a"), pending("c1", "c"), pending("a2", "a")], [view("w2", inflight=1)])
    assert default.shown[-1][0] == ["c1"] and new.shown[-1][0] == ["a1", "a2"]


def test_a_switch_under_load_serves_every_queued_query_once_and_leaves_other_applications_alone() -> None:
    default, own_b = Recorder(), Recorder()
    policy = PerApplicationDispatch(default, {"b": own_b})
    live = Live(policy)
    live.worker("w1")
    live.worker("w2")
    ids = [f"{app}{n}" for n in range(12) for app in "abc"]
    for query_id in ids[:6]:
        live.admit(query_id, query_id[0])
    live.step()  # both workers busy with a batch each
    for query_id in ids[6:]:
        live.admit(query_id, query_id[0])
    queued_a = [q for q in live.core.queue.items if q.startswith("a")]
    told_b = (list(own_b.added), list(own_b.removed))
    proteus = ProteusDispatch(PROFILES, decision_interval_s=0.01)
    policy.switch("a", proteus)
    assert default.removed == queued_a, "the old policy forgot exactly a's queued queries"
    assert (own_b.added, own_b.removed) == told_b, "b's policy heard nothing of the switch"
    assert policy.policy_of("a") == "proteus" and policy.policy_of("c") == policy.policy_of("b") == "fcfs"
    live.run_until_empty()
    assert live.dropped == [] and Counter(live.dispatched) == Counter(ids), "every query dispatched exactly once"
    for query_id in ids[6:]:
        live.admit(f"late-{query_id}", query_id[0])
    live.run_until_empty()
    assert not live.dropped and len(live.dispatched) == 2 * len(ids) - 6
    policy.switch("a", FcfsDispatch())  # and back: proteus held a's queued queries, it gives them up
    assert proteus.queued("w1") == proteus.queued("w2") == 0


def test_a_lost_worker_s_queries_come_back_first_in_their_application_s_queue() -> None:
    default, own_b = Recorder(), Recorder()
    live = Live(PerApplicationDispatch(default, {"b": own_b}), max_batch=1)
    live.worker("w1")
    live.worker("w2")
    live.admit("a1", "a")
    live.admit("a2", "a")
    live.step()
    live.admit("a3", "a")
    live.admit("b1", "b")
    holding = {i.pending.query_id: w.worker_id for w in live.core.workers.values() for b in w.inflight.values()
               for i in b.items}
    live.core.on_worker_event(WorkerStopped(worker_id=holding["a1"], at=0.0))
    live.worker("w3")
    live.step()
    assert default.shown[-1][0] == ["a1", "a3"], "the core's order: the lost worker's query first"


@pytest.mark.parametrize("name", ["fcfs", "kairos"])
def test_one_policy_for_all_decides_as_that_policy_alone(name: str) -> None:
    from shared.profiles.kairos import load_kairos_profiles
    from shared.settings import Settings
    from shared.sim import Workload, deeprecsys_sizes, make_fleet, poisson_arrivals, simulate

    profiles = load_kairos_profiles(Settings().kairos_data_dir)
    rng = np.random.default_rng(3)
    work = Workload(poisson_arrivals(40.0, 300, rng), deeprecsys_sizes(300, rng), "rm2", profiles.slo_ms["rm2"],
                    ("rm2",))
    fleet = {"g4dn.xlarge": 1, "r5n.large": 1}

    def run(policy: DispatchPolicy):
        return simulate(work, make_fleet(fleet, ["rm2"], max_batch=1000), policy, profiles, seed=1)

    plain, composite = run(make_dispatch(name, profiles)), run(PerApplicationDispatch(make_dispatch(name, profiles)))
    assert plain.num_served > 100 and plain.dropped
    for field in ("start_s", "finish_s", "worker", "variant"):  # NaN where not served, equal to NaN here
        np.testing.assert_array_equal(getattr(plain, field), getattr(composite, field), err_msg=field)
    assert plain.dropped == composite.dropped
