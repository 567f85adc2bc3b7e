from __future__ import annotations

from shared.policy.base import PendingQuery, WorkerView
from shared.policy.fcfs import FcfsDispatch


def query(qid: str, rows: int = 1, candidates: tuple[str, ...] = ("v1",), at: float = 0.0) -> PendingQuery:
    return PendingQuery(qid, "app", rows, at, 100.0, candidates)


def worker(wid: str, *, inflight: int = 0, available_at: float = 0.0, variants=("v1",), max_batch: int = 8) -> WorkerView:
    return WorkerView(wid, "cpu", tuple(variants), inflight, 0.0, available_at, max_batch)


def test_head_goes_to_the_worker_free_longest() -> None:
    decision = FcfsDispatch().decide(1.0, [query("a")], [worker("late", available_at=0.9), worker("early", available_at=0.1)])
    assert [(a.worker_id, a.query_ids) for a in decision.assignments] == [("early", ("a",))]


def test_busy_workers_get_nothing() -> None:
    assert not FcfsDispatch().decide(1.0, [query("a")], [worker("w", inflight=1)])


def test_batches_fill_up_to_max_rows_in_arrival_order() -> None:
    queue = [query("a", 3), query("b", 4), query("c", 2), query("d", 1)]
    decision = FcfsDispatch().decide(1.0, queue, [worker("w", max_batch=8)])
    assert decision.assignments[0].query_ids == ("a", "b")


def test_a_query_larger_than_max_batch_still_goes_alone() -> None:
    decision = FcfsDispatch().decide(1.0, [query("big", 20), query("b")], [worker("w", max_batch=8)])
    assert decision.assignments[0].query_ids == ("big",)


def test_a_query_no_idle_worker_serves_does_not_block_the_rest() -> None:
    queue = [query("needs-v2", candidates=("v2",)), query("ok")]
    decision = FcfsDispatch().decide(1.0, queue, [worker("w", variants=("v1",))])
    assert decision.assignments[0].query_ids == ("ok",)


def test_two_idle_workers_split_the_queue() -> None:
    queue = [query(str(i), 4) for i in range(4)]
    decision = FcfsDispatch().decide(1.0, queue, [worker("w1", max_batch=8), worker("w2", available_at=0.5, max_batch=8)])
    assert [a.query_ids for a in decision.assignments] == [("0", "1"), ("2", "3")]


def test_with_profiles_a_batch_is_sized_to_finish_the_most_queries_in_time() -> None:
    from shared.policy.fcfs import DeadlineBatching
    from shared.profiles.format import DeviceType, ProfileSet, VariantProfile

    profiles = ProfileSet(source="t", devices=[DeviceType(name="cpu", kind="cpu", price_per_hour=0.1)], variants=[
        VariantProfile(variant="v", family="f", device="cpu", batch_latency_ms={1: 10.0, 4: 30.0, 8: 80.0},
                       max_batch=8)])
    batching, idle = DeadlineBatching(profiles), WorkerView("w", "cpu", ("v",), 0, 0.0, 0.0, 64)
    fresh = [PendingQuery(str(i), "a", 1, 0.0, 100.0, ("v",)) for i in range(8)]
    assert batching.batch_rows(0.0, fresh, idle, "v") == 8  # all 8 end at 80 ms, within 100
    assert batching.batch_rows(0.05, fresh, idle, "v") == 4  # 8 would end at 130 ms: 4 end at 80 ms
    # the head is near its deadline, the 7 behind it are not: the batch that serves those 7 wins
    behind = fresh[:1] + [PendingQuery(str(i), "a", 1, 0.05, 100.0, ("v",)) for i in range(1, 8)]
    assert batching.batch_rows(0.05, behind, idle, "v") == 8
