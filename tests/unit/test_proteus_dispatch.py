"""Router split, and `ProteusDispatch` following plans and the workers' loaded variants."""
from __future__ import annotations

from collections import Counter

import pytest

from shared.policy.base import (
    FleetPlan,
    PendingQuery,
    PlanStatus,
    WorkerView,
)
from shared.profiles.format import DeviceType, ProfileSet, VariantProfile
from shared.proteus.dispatch import ProteusDispatch
from shared.proteus.router import SmoothWeightedRouter

LAT = {1: 10.0, 2: 15.0, 4: 25.0, 8: 45.0}


@pytest.fixture(scope="module")
def profiles() -> ProfileSet:
    variants = []
    for device, factor in (("cpu", 1.0), ("gpu", 0.25)):
        for name, family, slow in (("a-big", "a", 2.0), ("a-small", "a", 1.0), ("b-only", "b", 1.0)):
            variants.append(VariantProfile(variant=name, family=family, device=device, accuracy=0.9 if "small" in name else 1.0,
                                           batch_latency_ms={b: v * factor * slow for b, v in LAT.items()}, max_batch=8))
    return ProfileSet(source="test", devices=[DeviceType(name="cpu", kind="cpu", price_per_hour=0.1),
                                              DeviceType(name="gpu", kind="gpu", price_per_hour=1.0)], variants=variants)


def view(worker_id: str, device: str, *variants: str, inflight: int = 0) -> WorkerView:
    return WorkerView(worker_id, device, variants, inflight, 0.0, 0.0, 8)


def query(i: int, at: float = 0.0, app: str = "a", slo_ms: float = 100.0) -> PendingQuery:
    candidates = ("a-big", "a-small") if app == "a" else ("b-only",)
    return PendingQuery(str(i), app, 1, at, slo_ms, candidates)


def plan(routing: dict) -> FleetPlan:
    return FleetPlan(PlanStatus.OPTIMAL, "test", (), routing)


def test_router_split_matches_weights() -> None:
    weights = {"x": 0.5, "y": 0.3, "z": 0.2}
    router = SmoothWeightedRouter(weights)
    counts = Counter(router.pick() for _ in range(1000))
    assert {k: counts[k] / 1000 for k in weights} == pytest.approx(weights, abs=1e-3)
    # every prefix stays within one pick of its share
    router = SmoothWeightedRouter(weights)
    seen = Counter()
    for n in range(1, 200):
        seen[router.pick()] += 1
        assert all(abs(seen[k] - n * w) <= 1.0 for k, w in weights.items())


def test_router_rejects_no_positive_weight() -> None:
    with pytest.raises(ValueError, match="`weights`"):
        SmoothWeightedRouter({"x": 0.0})


def added(dispatch: ProteusDispatch, queries: list[PendingQuery]) -> list[PendingQuery]:
    """Tell the dispatch about new queries, as the serving core does on admission."""
    for q in queries:
        dispatch.on_query_added(q)
    return queries


def route_all(dispatch: ProteusDispatch, workers: list[WorkerView], queries: list[PendingQuery]) -> Counter:
    """Route ``queries`` with every worker busy (nothing is sent), then count queued per worker."""
    busy = [WorkerView(w.worker_id, w.device, w.variants, 1, 0.0, 0.0, 8) for w in workers]
    dispatch.decide(0.0, added(dispatch, queries), busy)
    return Counter({w.worker_id: dispatch.queued(w.worker_id) for w in workers})


def test_dispatch_splits_by_plan_shares_and_capacity(profiles: ProfileSet) -> None:
    workers = [view("c1", "cpu", "a-big"), view("g1", "gpu", "a-big"), view("c2", "cpu", "a-small")]
    dispatch = ProteusDispatch(profiles)
    dispatch.on_plan(plan({"a": {"a-big": 0.75, "a-small": 0.25}}))
    counts = route_all(dispatch, workers, [query(i) for i in range(1000)])
    # a-big: 75 % split by capacity at SLO/2 = 50 ms: cpu b2 in 30 ms, gpu b8 in 22.5 ms
    assert counts["c2"] == pytest.approx(250, abs=1)
    assert counts["g1"] / counts["c1"] == pytest.approx((8 / 22.5) / (2 / 30), rel=0.02)


def test_a_worker_hosting_several_variants_serves_each_its_planned_share(profiles: ProfileSet) -> None:
    """Plans route over a fleet that stays (every worker hosts both): the planned split still holds."""
    workers = [view("c1", "cpu", "a-big", "a-small"), view("c2", "cpu", "a-big", "a-small")]
    dispatch = ProteusDispatch(profiles, batching="nexus")
    dispatch.on_plan(plan({"a": {"a-big": 0.6, "a-small": 0.4}}))
    queue = added(dispatch, [query(i) for i in range(100)])
    served: Counter = Counter()
    busy = [view(w.worker_id, w.device, *w.variants, inflight=1) for w in workers]
    for step in range(100):  # each worker takes a batch, runs it, and is free again
        decision = dispatch.decide(step * 0.001, queue, workers)
        served.update(a.variant for a in decision.assignments for _ in a.query_ids)
        sent = {q for a in decision.assignments for q in a.query_ids}
        queue = [q for q in queue if q.query_id not in sent]
        dispatch.decide(step * 0.001, queue, busy)
    assert not queue and served == Counter({"a-big": 60, "a-small": 40})


def test_dispatch_never_sends_to_a_worker_without_the_variant(profiles: ProfileSet) -> None:
    workers = [view("c1", "cpu", "b-only"), view("g1", "gpu", "a-small")]
    dispatch = ProteusDispatch(profiles, batching="nexus")
    dispatch.on_plan(plan({"a": {"a-big": 1.0}}))  # nothing hosts a-big yet: fall back to a-small
    decision = dispatch.decide(0.0, added(dispatch, [query(0), query(1, app="b")]), workers)
    sent = {a.worker_id: (a.variant, a.query_ids) for a in decision.assignments}
    assert sent == {"g1": ("a-small", ("0",)), "c1": ("b-only", ("1",))}


def test_dispatch_before_any_plan_uses_workers_with_a_candidate(profiles: ProfileSet) -> None:
    workers = [view("c1", "cpu", "a-big", "a-small"), view("c2", "cpu", "b-only")]
    counts = route_all(ProteusDispatch(profiles), workers, [query(i) for i in range(10)])
    assert counts == Counter({"c1": 10, "c2": 0})


def test_uniform_routing_ignores_capacity(profiles: ProfileSet) -> None:
    workers = [view("c1", "cpu", "a-big"), view("g1", "gpu", "a-big")]
    dispatch = ProteusDispatch(profiles, routing="uniform")
    dispatch.on_plan(plan({"a": {"a-big": 1.0}}))
    assert route_all(dispatch, workers, [query(i) for i in range(100)]) == Counter({"c1": 50, "g1": 50})


def test_queries_move_when_a_worker_switches_variant(profiles: ProfileSet) -> None:
    dispatch = ProteusDispatch(profiles)
    workers = [view("c1", "cpu", "a-big", inflight=1), view("c2", "cpu", "b-only", inflight=1)]
    dispatch.decide(0.0, added(dispatch, [query(i) for i in range(3)]), workers)
    assert dispatch.queued("c1") == 3
    switched = [view("c1", "cpu", "b-only", inflight=1), view("c2", "cpu", "a-small", inflight=1)]
    dispatch.decide(0.001, [query(i) for i in range(3)], switched)
    assert dispatch.queued("c1") == 0 and dispatch.queued("c2") == 3


def test_unservable_query_is_dropped_at_its_deadline(profiles: ProfileSet) -> None:
    dispatch = ProteusDispatch(profiles)
    workers = [view("c1", "cpu", "b-only")]
    assert not dispatch.decide(0.0, added(dispatch, [query(0)]), workers)
    decision = dispatch.decide(0.1, [query(0)], workers)
    assert [q for q, _ in decision.dropped] == ["0"] and "no worker" in decision.dropped[0][1]


def test_non_work_conserving_wait_and_wakeup(profiles: ProfileSet) -> None:
    dispatch = ProteusDispatch(profiles)
    workers = [view("c1", "cpu", "a-small")]
    assert not dispatch.decide(0.0, added(dispatch, [query(0)]), workers)
    assert dispatch.next_wakeup_s() == pytest.approx(0.1 - 0.015)
    decision = dispatch.decide(0.085, [query(0)], workers)
    assert decision.assignments[0].query_ids == ("0",)
    assert dispatch.next_wakeup_s() is None


def test_decision_interval_sends_at_the_last_step_before_the_deadline(profiles: ProfileSet) -> None:
    dispatch = ProteusDispatch(profiles, decision_interval_s=0.05)
    workers = [view("c1", "cpu", "a-small")]
    assert not dispatch.decide(0.0, added(dispatch, [query(0)]), workers)
    assert dispatch.decide(0.05, [query(0)], workers).assignments  # 0.05 + 0.05 > 0.085


def test_queries_the_core_removed_leave_their_worker_queue(profiles: ProfileSet) -> None:
    dispatch = ProteusDispatch(profiles)
    busy = [view("c1", "cpu", "a-small", inflight=1)]
    dispatch.decide(0.0, added(dispatch, [query(i) for i in range(4)]), busy)
    dispatch.on_query_removed("0")  # e.g. the core dropped two that could no longer finish in time
    dispatch.on_query_removed("2")
    assert dispatch.queued("c1") == 2
    dispatch.on_query_added(query(4))
    dispatch.on_query_removed("4")  # removed before any decision routed it
    dispatch.decide(0.001, [query(1), query(3)], busy)
    assert dispatch.queued("c1") == 2


def test_least_loaded_prefers_the_accurate_variant_with_room(profiles: ProfileSet) -> None:
    workers = [view("c1", "cpu", "a-big", inflight=1), view("c2", "cpu", "a-small", inflight=1)]
    dispatch = ProteusDispatch(profiles, routing="least_loaded")
    counts = route_all(dispatch, workers, [query(i) for i in range(12)])
    assert counts["c1"] >= 1 and counts["c1"] + counts["c2"] == 12


def test_invalid_options(profiles: ProfileSet) -> None:
    with pytest.raises(ValueError, match="`routing`"):
        ProteusDispatch(profiles, routing="random")
    with pytest.raises(ValueError, match="`decision_interval_s`"):
        ProteusDispatch(profiles, decision_interval_s=-1)


def test_multi_row_queries_never_make_a_batch_larger_than_the_worker_takes():
    """The batching policies count queries; the dispatch packs rows up to the worker's max_batch."""
    from shared.policy.base import PendingQuery, WorkerView
    from shared.proteus.dispatch import ProteusDispatch
    from shared.profiles.format import DeviceType, ProfileSet, VariantProfile

    profiles = ProfileSet(source="test", devices=[DeviceType(name="cpu", kind="cpu", price_per_hour=0.0)],
                          variants=[VariantProfile(variant="m", family="f", device="cpu", max_batch=8,
                                                   batch_latency_ms={1: 1.0, 2: 1.5, 4: 2.5, 8: 4.5})])
    dispatch = ProteusDispatch(profiles, batching="nexus")
    worker = WorkerView("w", "cpu", ("m",), 0, 0.0, 0.0, 8)
    queue = [PendingQuery(f"q{k}", "app", 3, 0.0, 1000.0, ("m",)) for k in range(6)]
    for q in queue:
        dispatch.on_query_added(q)
    decision = dispatch.decide(0.0, queue, [worker])
    (assignment,) = decision.assignments
    assert len(assignment.query_ids) == 2, "two 3-row queries fit in 8 rows, a third would not"


def test_a_variant_goes_only_to_the_workers_the_plan_places_it_on(profiles) -> None:
    """Both workers host both variants (plans route, the fleet stays); the plan places a-big on the gpu and
    a-small on the cpu: each worker gets only its placement's queries, so none batches two variants."""
    from shared.policy.base import Placement

    dispatch = ProteusDispatch(profiles)
    workers = [view("w-cpu", "cpu", "a-big", "a-small", inflight=1),
               view("w-gpu", "gpu", "a-big", "a-small", inflight=1)]
    placements = (Placement("cpu", ("a-small",)), Placement("gpu", ("a-big",)))
    dispatch.on_plan(FleetPlan(PlanStatus.OPTIMAL, "test", placements, {"a": {"a-big": 0.5, "a-small": 0.5}}))
    for i in range(40):
        dispatch.on_query_added(query(i))
    dispatch.decide(0.0, [], workers)
    queued = {w: {v: len(q) for v, q in queues.items()} for w, queues in dispatch._queues.items()}
    assert queued == {"w-cpu": {"a-small": 20}, "w-gpu": {"a-big": 20}}


def test_batching_follows_the_service_times_batches_show(profiles) -> None:
    """A device slower than its profile: the batching policy learns it, and B_max shrinks with it."""
    dispatch = ProteusDispatch(profiles)
    worker = view("w", "cpu", "a-small")
    assert dispatch.batching.max_rows(worker, "a-small", 100.0) == 8  # 45 ms < 50 ms
    for _ in range(50):
        dispatch.on_batch_finished("cpu", "a-small", 8, 90.0)
        dispatch.on_batch_finished("cpu", "a-small", 4, 60.0)
    assert dispatch.batching.latency_s(worker, "a-small", 8) == pytest.approx(0.090, rel=0.02)
    assert dispatch.batching.max_rows(worker, "a-small", 100.0) == 2  # 15 ms x the learned 2.4 < 50 ms
